"""The tune page: the sweep runs on a model where it is (the loaded one, a row of My models, the model
picker), its chart fills in as each setting is measured, the chosen one marked against the default,
and the chat's model is back after it."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.engine import tune_replies
from app.machine import tune as tune_mod
from app.machine.llama_load import LoadSettings
from app.machine.tune import SpecRun, Trial, chart_rows, default_tps
from app.ui.base import theme
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


class FormulaReplies:
    """The speculative check's replies from a formula too (drafting a little faster), not a model loaded
    four more times through the engine."""

    def __init__(self, path, n_ctx) -> None:
        pass

    def __call__(self, settings: LoadSettings) -> SpecRun:
        return SpecRun(settings.speculative, tps=90.0 if settings.speculative == "off" else 99.0, tokens=128)

    def close(self) -> None:
        pass


def formulas(monkeypatch, measurer=FormulaMeasurer) -> None:
    monkeypatch.setattr(tune_mod, "Measurer", measurer)
    monkeypatch.setattr(tune_replies, "EngineReplies", FormulaReplies)


def light_window(make_window):
    """The window, its loads without drafting: under auto each load times batch sizes for the drafts
    (tens of seconds on a busy 2-core machine), which this page neither needs nor shows."""
    window = make_window()
    window.settings.set("engine.speculative", "off")
    return window


def watch_chart(chart) -> list[int]:
    """How many bars the chart had at each redraw asked for while the sweep ran."""
    counts: list[int] = []
    set_rows = chart.set_rows

    def counting(rows) -> None:
        counts.append(len(rows))
        set_rows(rows)

    chart.set_rows = counting
    return counts


def test_after_the_sweep_the_model_is_back_and_the_chart_stays(qtbot, make_window, smollm2, monkeypatch):
    formulas(monkeypatch)
    window = light_window(make_window)
    load_model(qtbot, window, smollm2)
    window.model_bar.tune_button.click()  # the loaded model's Tune: the page, then its button
    view = window.tune_view
    assert window.current_page() == "tune" and view.title.text().startswith("Tune SmolLM2-135M-Instruct")
    counts = watch_chart(view.chart)
    with qtbot.waitSignal(window.model.loaded, timeout=120_000):  # the reload with the tuned settings
        with qtbot.waitSignal(view.tuned, timeout=60_000) as done:
            qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    result = done.args[0]
    assert result.best is not None and result.best["n_threads"] == 2
    assert counts[0] == 0 and len(set(counts)) > 3  # bars added one by one as settings were measured
    assert window.current_page() == "tune"  # the user came to read this chart
    assert not any(b.isChecked() for b in window.rail.buttons.values())  # tune has no entry to light
    rows = view.chart.rows
    [chosen] = [r for r in rows if r.chosen]
    assert chosen.settings == result.best and view.chart.chosen() is chosen
    assert default_tps(rows) == result.baseline_tps > 0 and chosen.tps > default_tps(rows)
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
    formulas(monkeypatch, SlowMeasurer)
    window = light_window(make_window)
    load_model(qtbot, window, smollm2)
    window.navigate("tune")
    view = window.tune_view
    assert "this GPU" not in " ".join(w.text() for w in view.findChildren(type(view.status)))  # a CPU here
    view.run()
    qtbot.waitUntil(lambda: len(view.chart.rows) >= 1, timeout=30_000)
    view.stop()
    assert view.status.text().startswith("Stopping…") and not view.stop_button.isEnabled()
    assert window.model_bar.label.text() == "Stopping the tune…"
    with qtbot.waitSignal(window.model.loaded, timeout=120_000):  # the model comes back after the stop
        qtbot.waitUntil(lambda: view.status.text().startswith("Tune stopped"), timeout=30_000)
    assert window.model.info is not None


def test_tune_on_a_row_of_my_models_measures_that_file(qtbot, make_window, smollm2, monkeypatch):
    formulas(monkeypatch)
    window = make_window()
    window.model.library.used(smollm2)  # opened by hand once: My models lists it; nothing is loaded
    window.navigate("my_models")
    card = window.my_models_view.rows[smollm2.resolve()]
    [tune] = [b for b in card.findChildren(type(window.my_models_view.open_button)) if b.text() == "Tune"]
    with qtbot.waitSignal(window.tune_view.tuned, timeout=60_000) as done:
        qtbot.mouseClick(tune, Qt.MouseButton.LeftButton)
        assert window.current_page() == "tune"
    assert done.args[0].model == smollm2.name and window.tune_view.chart.chosen() is not None
    assert window.model.info is None  # none was loaded before; none is loaded after
    assert window.model_bar.label.text() == "No model loaded"


@pytest.mark.qt_log_ignore("This plugin does not support (raise|grabbing the keyboard)")  # the pop-up, offscreen
def test_tune_in_the_model_picker_measures_that_file(qtbot, make_window, smollm2, monkeypatch):
    formulas(monkeypatch, SlowMeasurer)
    window = make_window()
    window.model.library.used(smollm2)
    window.model_bar.picker.click()  # the pop-up, filled
    popup = window.model_bar.popup
    qtbot.waitUntil(popup.isVisible)
    row = popup.list.itemWidget(popup.list.item(0))
    qtbot.mouseClick(row.tune_button, Qt.MouseButton.LeftButton)
    view = window.tune_view
    assert not popup.isVisible() and window.current_page() == "tune" and view.op is not None and view.op.running
    assert view.target() == str(smollm2.resolve())
    view.stop()
    qtbot.waitUntil(lambda: view.status.text().startswith("Tune stopped"), timeout=30_000)
    assert view.status.text().endswith("no model was loaded before it, and none is now.")


def trial(threads: int, tps: float, flash: bool = True, error: str | None = None, repeat: bool = False) -> Trial:
    settings = {"n_threads": threads, "n_ubatch": 512, "flash_attn": flash, "type_k": "f16", "n_cpu_moe": 0}
    return Trial(settings, gen_tps=tps if error is None else 0.0, error=error, repeat=repeat)


def test_the_chart_rows_are_settings_with_their_mean_the_chosen_and_the_default():
    baseline = trial(1, 0).settings
    trials = [trial(1, 40.0), trial(2, 60.0), trial(2, 0, flash=False, error="out of memory"), trial(3, 50.0),
              trial(2, 62.0, repeat=True), trial(1, 42.0, repeat=True)]
    rows = chart_rows(trials, baseline, trial(2, 0).settings)
    assert [r.label for r in rows] == [t.label() for t in trials[:4]]  # one bar per setting, first-tried order
    assert rows[1].runs == [60.0, 62.0] and rows[1].tps == 61.0 and rows[1].chosen
    assert rows[0].default and default_tps(rows) == 41.0
    assert rows[2].failed == "out of memory" and not rows[2].runs
    assert sum(r.chosen for r in rows) == 1 and default_tps(chart_rows(trials[1:2], baseline, None)) == 0.0


def colours_in(widget) -> set[str]:
    image = widget.grab().toImage()
    return {image.pixelColor(x, y).name() for x in range(0, image.width(), 2) for y in range(0, image.height(), 2)}


def test_the_chart_paints_the_chosen_bar_in_the_accent_and_the_rest_in_the_theme(qtbot):
    from app.ui.widgets.tune_chart import TuneChart

    chart = TuneChart()
    qtbot.addWidget(chart)
    chart.resize(600, 200)
    baseline = trial(1, 0).settings
    trials = [trial(1, 40.0), trial(2, 60.0), trial(3, 50.0)]
    chart.set_rows(chart_rows(trials, baseline, None))  # while it measures: nothing chosen yet
    before = colours_in(chart)
    assert QColor(theme.color("accent")).name() not in before and QColor(theme.color("selected")).name() in before
    assert chart.sizeHint().height() >= 3 * theme.px("sm")
    chart.set_rows(chart_rows(trials, baseline, trials[1].settings))
    assert QColor(theme.color("accent")).name() in colours_in(chart)
