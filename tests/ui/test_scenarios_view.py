"""The scenario page runs one row alone, shows each row as it ends, and stops between rows."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.engine.contract import ReplyStats
from app.machine.llama_load import LoadSettings
from tests.helpers.fakes import ScriptedEngine, Turn


def canberra_engine() -> ScriptedEngine:
    """Answers "Canberra" to everything; each reply waits for the test to let it go."""
    stats = ReplyStats(prompt_tokens=10, prompt_evaluated=10, generated_tokens=3, stop_reason="end")
    return ScriptedEngine(Turn("Canberra", stats=stats, stream=[]), gated=True, name="canned")


def loaded_window(make_window, engine):
    w = make_window(engine=engine)
    w.model._on_loaded(engine.load("canned.gguf", LoadSettings(n_ctx=4096)))
    w.navigate("scenarios")
    return w


def test_one_row_runs_alone(qtbot, make_window):
    engine = canberra_engine()
    w = loaded_window(make_window, engine)
    view = w.scenarios_view
    row = list(view.rows).index("capital-australia")
    other = (row + 1) % len(view.scenarios)
    engine.release()
    with qtbot.waitSignal(view.finished, timeout=10_000) as done:
        qtbot.mouseClick(view.table.cellWidget(row, 5), Qt.MouseButton.LeftButton)
    assert [r.id for r in done.args[0]] == ["capital-australia"] and len(engine.requests) == 1
    assert view.table.item(row, 1).text() == "PASS"
    assert view.table.item(other, 1) is None  # untouched
    assert "1 of 1 passed" in view.saved.text() and all(b.isEnabled() for b in view.row_buttons)
    w.close()


def test_rows_show_progress_one_at_a_time_and_stop_between_rows(qtbot, make_window):
    """Rows run in turn; Stop acts between rows; while rows run, the model is neither swapped nor lent."""
    engine = canberra_engine()
    w = loaded_window(make_window, engine)
    view = w.scenarios_view
    first, second = view.scenarios[0].id, view.scenarios[1].id
    view.run()
    qtbot.waitUntil(lambda: view.table.item(0, 1).text() == "running…", timeout=10_000)
    assert view.table.item(1, 1).text() == "queued" and not view.run_button.isEnabled()
    with qtbot.waitSignal(view.row_finished, timeout=10_000) as row:
        engine.release()
    assert row.args[0].id == first and view.table.item(0, 1).text() in ("PASS", "fail")
    qtbot.waitUntil(lambda: view.table.item(1, 1).text() == "running…", timeout=10_000)
    assert w.model.load("other.gguf") is None and "Stop the bench first (Scenarios)" in w.error_banner.text()
    assert w.model.lend("Tuning…") is None and engine.loaded  # tune cannot take the model away either
    assert w.model.info is not None and w.model_bar.label.text() != "Tuning…"
    with qtbot.waitSignal(view.finished, timeout=10_000) as done:
        view.stop()
    assert [r.id for r in done.args[0]][0] == first and second in [r.id for r in done.args[0]]
    assert view.table.item(2, 1).text() == "stopped" and view.run_button.isEnabled()
    w.close()
