"""The preset row of the chat's settings: a menu of presets (a system prompt and sampling under a
name: app/chat/presets.py) that fills the fields below it when one is picked, Save to keep what the
fields hold under a name, Delete for one the user saved. It shows which preset the fields match."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QInputDialog, QSizePolicy, QToolButton, QWidget

from app.chat import presets as store
from app.chat.presets import Preset
from app.ui.base import theme
from app.ui.base.messages import messages

CUSTOM = "Custom"


class PresetRow(QWidget):
    def __init__(self, current: Callable[[], tuple[str, float, float]], apply: Callable[[Preset], None]) -> None:
        super().__init__()
        self.current, self.apply = current, apply
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.combo = QComboBox()
        self.combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # as narrow as the panel: a long name elides instead of widening the side panel
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(6)
        self.combo.setToolTip("A system prompt and sampling under a name: picking one fills the fields below")
        self.save_button = QToolButton()
        self.save_button.setIcon(theme.icon("file-down"))
        self.save_button.setToolTip("Save the fields below as a preset")
        self.delete_button = QToolButton()
        self.delete_button.setIcon(theme.icon("trash-2"))
        self.delete_button.setToolTip("Delete this preset (one you saved)")
        for w in (self.combo, self.save_button, self.delete_button):
            row.addWidget(w)
        self.combo.activated.connect(self._picked)
        self.save_button.clicked.connect(self.save_as)
        self.delete_button.clicked.connect(self.delete)
        self.presets: list[Preset] = []  # listed by refresh(), once the fields exist

    def refresh(self) -> None:
        """List the presets and select the one the fields match (else Custom)."""
        self.presets = store.presets()
        self.combo.blockSignals(True)
        self.combo.clear()
        for p in self.presets:
            self.combo.addItem(p.name + (" (yours)" if p.user else ""))
            self.combo.setItemData(self.combo.count() - 1, p.description or p.system_prompt, 3)  # ToolTipRole
        self.combo.addItem(CUSTOM)
        self.combo.setCurrentIndex(self._matching())
        self.combo.blockSignals(False)
        selected = self._selected()
        self.delete_button.setEnabled(selected is not None and selected.user)

    def _matching(self) -> int:
        prompt, temperature, top_p = self.current()
        for i, p in enumerate(self.presets):
            if p.system_prompt == prompt and abs(p.temperature - temperature) < 1e-6 and abs(p.top_p - top_p) < 1e-6:
                return i
        return len(self.presets)  # Custom

    def _selected(self) -> Preset | None:
        i = self.combo.currentIndex()
        return self.presets[i] if 0 <= i < len(self.presets) else None

    def _picked(self, index: int) -> None:
        if 0 <= index < len(self.presets):
            self.apply(self.presets[index])
        self.refresh()

    def save_as(self, name: str | None = None) -> None:
        """Keep the fields as a preset named `name` (asked when not given)."""
        if not name:
            name, ok = QInputDialog.getText(self, "Save preset", "Name of the preset:")
            if not ok or not name.strip():
                return
        prompt, temperature, top_p = self.current()
        try:
            store.save(Preset(name.strip(), prompt, temperature, top_p, user=True))
        except (OSError, ValueError) as exc:
            messages().error(f"The preset was not saved: {exc}")
            return
        self.refresh()

    def delete(self) -> None:
        selected = self._selected()
        if selected is not None and selected.user:
            try:
                store.delete(selected.name)
            except OSError as exc:
                messages().error(f"The preset was not deleted: {exc}")
            self.refresh()
