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
