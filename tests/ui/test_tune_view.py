"""The tune page: the sweep runs on the loaded model, and its chart stays in view once the model is back."""

from __future__ import annotations

from app.machine import tune as tune_mod
from app.machine.llama_load import LoadSettings
from tests.helpers.ui_actions import load_model


class FormulaMeasurer:
    """Speeds from a formula instead of llama.cpp (two threads fastest, flash attention helps): the
    page, the sweep and the reload are real, the minutes of measuring are not."""

    def __init__(self, path, n_ctx) -> None:
        self.path = path

    def measure(self, s: LoadSettings) -> tuple[float, float]:
        gen = {1: 60.0, 2: 100.0}.get(s.n_threads, 50.0) * (1.05 if s.flash_attn else 1.0)
        return gen, 300.0 + s.n_ubatch / 100

    def close(self) -> None:
        pass


def test_after_the_sweep_the_model_is_back_and_the_chart_stays(qtbot, make_window, smollm2, monkeypatch):
    monkeypatch.setattr(tune_mod, "Measurer", FormulaMeasurer)
    window = make_window()
    load_model(qtbot, window, smollm2)
    window.navigate("tune")
    view = window.tune_view
    with qtbot.waitSignal(window.model.loaded, timeout=120_000):  # the reload with the tuned settings
        with qtbot.waitSignal(view.tuned, timeout=60_000) as done:
            view.run()
    result = done.args[0]
    assert result.best is not None and result.best["n_threads"] == 2
    assert window.current_page() == "tune"  # the user came to read this chart
    assert not any(b.isChecked() for b in window.rail.buttons.values())  # tune has no entry to light
    rows = view.chart.rows
    assert rows and sum(chosen for _label, _tps, chosen, _failed in rows) >= 1
    assert "chosen:" in view.status.text() and window.model.info is not None
    load_model(qtbot, window, smollm2)  # any other load shows the chat, as before
    assert window.current_page() == "chat" and window.rail.buttons["chat"].isChecked()


class SlowMeasurer(FormulaMeasurer):
    """Each run takes 0.3 s, as a real one takes seconds: Stop lands in the middle of one."""

    def measure(self, s: LoadSettings) -> tuple[float, float]:
        import time

        time.sleep(0.3)
        return super().measure(s)


def test_stop_says_stopping_until_the_run_under_way_ends(qtbot, make_window, smollm2, monkeypatch):
    monkeypatch.setattr(tune_mod, "Measurer", SlowMeasurer)
    window = make_window()
    load_model(qtbot, window, smollm2)
    window.navigate("tune")
    view = window.tune_view
    assert "this GPU" not in " ".join(w.text() for w in view.findChildren(type(view.status)))  # a CPU here
    view.run()
    qtbot.waitUntil(lambda: len(view._rows) >= 1, timeout=30_000)
    view.stop()
    assert view.status.text().startswith("Stopping…") and not view.stop_button.isEnabled()
    assert window.model_bar.label.text() == "Stopping the tune…"
    with qtbot.waitSignal(window.model.loaded, timeout=120_000):  # the model comes back after the stop
        qtbot.waitUntil(lambda: view.status.text().startswith("Tune stopped"), timeout=30_000)
    assert window.model.info is not None
