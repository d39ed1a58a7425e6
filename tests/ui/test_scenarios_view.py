"""The scenario page runs one row alone, shows each row as it ends, and stops between rows."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from app.engine.local import ModelInfo, Reply, ReplyStats
from app.machine.llama_load import LoadSettings


class CannedEngine:
    """Answers "Canberra" to everything; each reply waits for the test to let it go."""

    kind = "fake"

    def __init__(self) -> None:
        self.info = None
        self.gate = threading.Semaphore(0)
        self.asked = 0

    @property
    def loaded(self) -> bool:
        return self.info is not None

    def load(self, path, settings, progress=None):
        self.info = ModelInfo(str(path), "canned", "fake", settings.n_ctx, True, True, settings)
        return self.info

    def unload(self) -> None:
        self.info = None

    def count_tokens(self, request) -> int:
        return 10

    def generate(self, request, on_event=None, should_stop=None, on_logprob=None):
        self.asked += 1
        while not self.gate.acquire(timeout=0.05):
            if should_stop is not None and should_stop():
                break
        stats = ReplyStats(prompt_tokens=10, prompt_evaluated=10, generated_tokens=3, stop_reason="end")
        return Reply("Canberra", "", "Canberra", "", stats)


def loaded_window(make_window, engine):
    w = make_window(engine=engine)
    w.model._on_loaded(engine.load("canned.gguf", LoadSettings(n_ctx=4096)))
    w.navigate("scenarios")
    return w


def test_one_row_runs_alone(qtbot, make_window):
    engine = CannedEngine()
    w = loaded_window(make_window, engine)
    view = w.scenarios_view
    row = list(view.rows).index("capital-australia")
    other = (row + 1) % len(view.scenarios)
    engine.gate.release()
    with qtbot.waitSignal(view.finished, timeout=10_000) as done:
        qtbot.mouseClick(view.table.cellWidget(row, 5), Qt.MouseButton.LeftButton)
    assert [r.id for r in done.args[0]] == ["capital-australia"] and engine.asked == 1
    assert view.table.item(row, 1).text() == "PASS"
    assert view.table.item(other, 1) is None  # untouched
    assert "1 of 1 passed" in view.saved.text() and all(b.isEnabled() for b in view.row_buttons)
    w.close()


def test_rows_show_progress_one_at_a_time_and_stop_between_rows(qtbot, make_window):
    """Rows run in turn; Stop acts between rows; while rows run, the model is neither swapped nor lent."""
    engine = CannedEngine()
    w = loaded_window(make_window, engine)
    view = w.scenarios_view
    first, second = view.scenarios[0].id, view.scenarios[1].id
    view.run()
    qtbot.waitUntil(lambda: view.table.item(0, 1).text() == "running…", timeout=10_000)
    assert view.table.item(1, 1).text() == "queued" and not view.run_button.isEnabled()
    with qtbot.waitSignal(view.row_finished, timeout=10_000) as row:
        engine.gate.release()
    assert row.args[0].id == first and view.table.item(0, 1).text() in ("PASS", "fail")
    qtbot.waitUntil(lambda: view.table.item(1, 1).text() == "running…", timeout=10_000)
    assert w.model.load("other.gguf") is None and "scenario bench" in w.error_banner.text()
    assert w.model.lend("Tuning…") is None and engine.loaded  # tune cannot take the model away either
    assert w.model.info is not None and w.model_bar.label.text() != "Tuning…"
    with qtbot.waitSignal(view.finished, timeout=10_000) as done:
        view.stop()
    assert [r.id for r in done.args[0]][0] == first and second in [r.id for r in done.args[0]]
    assert view.table.item(2, 1).text() == "stopped" and view.run_button.isEnabled()
    w.close()
