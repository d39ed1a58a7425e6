"""The chat settings' preset row: picking a preset fills the system prompt and sampling (saved as if
typed), the row names the preset the fields match or Custom, Save keeps the fields under a name."""

from __future__ import annotations

from typing import cast

from PySide6.QtWidgets import QDoubleSpinBox

from app.base.settings import Settings
from app.ui.widgets.settings_panel import SettingsPanel


def test_a_preset_fills_the_fields_and_a_change_makes_them_custom(qtbot, tmp_path):
    settings = Settings.load(tmp_path / "settings.json")
    panel = SettingsPanel(settings)
    qtbot.addWidget(panel)
    row = panel.presets
    assert row.combo.currentText() == "Balanced"  # the defaults are the Balanced preset
    tool = next(i for i, p in enumerate(row.presets) if p.name == "Tool testing")
    row.combo.activated.emit(tool)
    assert panel.sampling().temperature == 0.0 and panel.sampling().top_p == 1.0
    assert panel.system_prompt().startswith("You are an agent.")
    assert row.combo.currentText() == "Tool testing"
    assert Settings.load(tmp_path / "settings.json").get("sampling.temperature") == 0.0  # saved as if typed
    cast(QDoubleSpinBox, panel.widgets["sampling.temperature"]).setValue(0.35)
    assert row.combo.currentText() == "Custom"
    row.save_as("Warm agent")
    assert row.combo.currentText() == "Warm agent (yours)" and row.delete_button.isEnabled()
    row.delete()
    assert row.combo.currentText() == "Custom" and not row.delete_button.isEnabled()
