"""The window plans each load with the Reproducible replies setting (engine.reproducible)."""

from __future__ import annotations

from app.ui.controllers import model_controller


def test_the_window_plans_each_load_with_the_reproducible_setting(make_window, monkeypatch, tmp_path):
    seen: list[bool] = []

    def plan(path, machine, request, **_settings):
        seen.append(request.reproducible)
        raise ValueError("planned: nothing to load in this test")

    monkeypatch.setattr(model_controller, "plan_for_file", plan)
    window = make_window()
    assert window.settings.get("engine.reproducible") is True  # on by default in the window
    for on in (True, False):
        window.settings.set("engine.reproducible", on)
        window.model.load(str(tmp_path / "model.gguf"))
    assert seen == [True, False]


def test_the_settings_line_says_what_reproducible_replies_cost():
    from app.base.settings import OPTIONS
    from app.ui.widgets.settings_panel import hint

    line = hint(next(o for o in OPTIONS if o.key == "engine.reproducible"))
    assert "token for token" in line and "0.89x" in line and line.endswith("Takes effect at the next model load.")
