"""The Scenarios place's BFCL part (issue 62): a quick run over two categories on the loaded model runs to
its end and is kept, listed with its scores; a case opens with its parts; Stop keeps the partial run;
two runs compare side by side and export as CSV; where the test files are not here, the Get button's
failure says so in one sentence. The engine is a double that writes a call from each case's acceptable
answers (tests/helpers/bfcl_writer.py); the dataset is the installed bfcl-eval package's."""

from __future__ import annotations

import csv

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app.bench.bfcl_cases import QUICK_PER_CATEGORY as Q
from app.bench.bfcl_store import list_runs
from app.fetch import bfcl_dataset
from app.machine.llama_load import LoadSettings
from tests.helpers.bfcl_writer import bfcl_engine

CATS = ("simple_python", "irrelevance")
N = 2 * Q  # a quick run of CATS
FOLDER = bfcl_dataset.local_folder()
needs_data = pytest.mark.skipif(FOLDER is None, reason="the BFCL test files are not here (install bfcl-eval)")


def bfcl_window(make_window, engine):
    w = make_window(engine=engine)
    w.model._on_loaded(engine.load("tool-writer-7B.gguf", LoadSettings(n_ctx=4096)))
    w.navigate("scenarios")
    w.scenarios_place.show_tab(1)
    w.bfcl_view.categories = CATS  # N quick cases
    return w, w.bfcl_view


def run_to_end(qtbot, view, thinking: int = 0):
    view.thinking_box.setCurrentIndex(thinking)
    with qtbot.waitSignal(view.finished, timeout=60_000) as done:
        qtbot.mouseClick(view.run_button, Qt.MouseButton.LeftButton)
    return done.args[0]


@needs_data
def test_a_quick_run_runs_to_its_end_and_is_kept_with_its_scores(qtbot, make_window, clover_home):
    engine = bfcl_engine(FOLDER, wrong_every=3, categories=CATS)
    w, view = bfcl_window(make_window, engine)
    assert w.current_page() == "scenarios" and view.isVisible()
    assert not view.dataset_card.isVisible() and "Apache-2.0" in view.credit.text()
    assert view.runs == [] and "No runs yet" in view.runs_hint.text()
    runs = run_to_end(qtbot, view)
    assert len(runs) == 1 and len(engine.requests) == N and not engine.requests[0].enable_thinking
    bar = view.progress_bar
    assert bar.value() == bar.maximum() == N
    assert "Done" in view.progress_text.text() and view.run_button.isEnabled() and not view.stop_button.isEnabled()
    assert not w.model.busy_with("bench")  # the model is the chat's again
    kept = list_runs()
    assert [str(r.path) for r in kept] == view.runs_table.keys and kept[0].state == "complete"
    cells = [view.runs_table.item(0, c).text() for c in range(view.runs_table.columnCount())]
    summary = kept[0].summary
    assert cells[1] == "tool-writer-7B, no thinking, quick" and cells[4] == f"{N}/{N}" and cells[5] == "complete"
    assert cells[6:] == ["N/A", "N/A", "N/A", "N/A"]  # each column takes categories this run left out
    assert summary.categories["irrelevance"].correct == Q and 0 < summary.categories["simple_python"].correct < Q
    # its cases, at once: the run just finished is the one shown
    table = view.cases_table
    assert table.rowCount() == N and view.all_button.text() == f"All ({N})"
    wrong = summary.total - summary.correct
    view.failed_button.click()
    assert table.rowCount() == wrong > 0 and {table.item(r, 2).text() for r in range(wrong)} == {"✗"}
    table.selectRow(0)
    page = view.case_page
    assert page.isVisible() and "✗ wrong" in page.heading.text()
    record = next(r for r in kept[0].records if r.id == table.item(0, 0).text())
    assert record.reason and record.reason in page.verdict.text()
    assert "── user ──" in page.question.text.toPlainText() and page.question.text.isVisible()
    assert not page.tools.text.isVisible() and '"type": "function"' in page.tools.text.toPlainText()
    page.tools.toggle.click()
    assert page.tools.text.isVisible() and page.tools.toggle.text().startswith("▾ Tools offered (")
    assert "may be left out" in page.answers.text.toPlainText()
    assert page.raw.text.toPlainText() == record.raw and not page.reasoning.isVisible()  # no thinking: no reasoning
    assert page.calls.text.toPlainText() == "(none)"  # it answered in words
    assert page.question.text.isReadOnly() and page.question.text.textInteractionFlags() & \
        Qt.TextInteractionFlag.TextSelectableByMouse
    view.all_button.click()
    assert table.rowCount() == N
    right = next(r for r in range(N) if table.item(r, 2).text() == "✓" and table.item(r, 1).text() == "simple_python")
    table.selectRow(right)
    assert "✓ correct" in page.heading.text() and '"name"' in page.calls.text.toPlainText()
    w.close()


@needs_data
def test_stop_keeps_the_partial_run(qtbot, make_window, clover_home):
    engine = bfcl_engine(FOLDER, gated=True, categories=CATS)
    w, view = bfcl_window(make_window, engine)
    view.run()
    assert w.model.busy_with("bench") and w.model.load("other.gguf") is None  # the model is the bench's
    engine.release(3)
    qtbot.waitUntil(lambda: view.progress_bar.value() == 3, timeout=10_000)
    assert "1 of 1" not in view.progress_text.text() and f"3 of {N} cases" in view.progress_text.text()
    assert "min left" in view.progress_text.text() or "under a minute" in view.progress_text.text()
    assert view.runs_table.item(0, 5).text() == "running…"
    with qtbot.waitSignal(view.finished, timeout=10_000) as done:
        qtbot.mouseClick(view.stop_button, Qt.MouseButton.LeftButton)
    run = done.args[0][0]
    assert 3 <= len(run.records) < N
    kept = list_runs()
    assert len(kept) == 1 and kept[0].state == "stopped" and len(kept[0].records) == len(run.records)
    assert view.runs_table.item(0, 5).text() == "stopped" and "Stopped" in view.progress_text.text()
    assert view.cases_table.rowCount() == len(run.records) and not w.model.busy_with("bench")
    w.close()


@needs_data
def test_two_runs_compare_side_by_side_and_export_as_csv(qtbot, make_window, clover_home,
                                                         monkeypatch, tmp_path):
    engine = bfcl_engine(FOLDER, wrong_every=2, categories=CATS)
    w, view = bfcl_window(make_window, engine)
    runs = run_to_end(qtbot, view, thinking=2)  # both: one run with thinking off, one with it on
    assert [r.info.thinking for r in runs] == [False, True] and len(engine.requests) == 2 * N
    assert engine.requests[-1].enable_thinking and len(view.runs) == 2
    assert not view.comparison.isVisible() and not view.export_button.isEnabled()
    table = view.runs_table
    for row in (0, 1):
        table.item(row, 0).setCheckState(Qt.CheckState.Checked)
    assert len(view.ticked) == 2 and view.comparison.isVisible() and view.export_button.isEnabled()
    comp = view.comparison
    assert comp.columnCount() == 2
    heads = [comp.horizontalHeaderItem(c).text() for c in range(2)]
    assert [h.split("\n")[0] for h in heads] == ["tool-writer-7B"] * 2  # the model, its settings, the date
    assert {h.split("\n")[1] for h in heads} == {"thinking, quick", "no thinking, quick"}
    off = next(c for c in range(2) if "no thinking" in heads[c])  # the column of the run with thinking off
    rows = [comp.verticalHeaderItem(r).text() for r in range(comp.rowCount())]
    assert rows == ["Non-live AST", "Live AST", "Irrelevance", "Relevance", "simple_python", "irrelevance", "Cases"]
    assert comp.item(5, 0).text() == f"100.0 ({Q}/{Q})" and comp.item(6, off).text() == f"{runs[0].summary.correct}/{N}"
    # the thinking run's case shows its reasoning, folded apart
    table.selectRow(table.keys.index(str(runs[1].path)))
    view.cases_table.selectRow(0)
    page = view.case_page
    assert page.reasoning.isVisible() and not page.reasoning.text.isVisible()
    assert "The user asks" in page.reasoning.text.toPlainText() and "<think>" not in page.raw.text.toPlainText()
    out = tmp_path / "two-runs.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), "CSV files (*.csv)"))
    with qtbot.waitSignal(view.exported, timeout=10_000):
        qtbot.mouseClick(view.export_button, Qt.MouseButton.LeftButton)
    rows_out = list(csv.DictReader(out.open(encoding="utf-8")))
    assert len(rows_out) == 2 * N and {r["thinking"] for r in rows_out} == {"on", "off"}
    assert {r["category"] for r in rows_out} == set(CATS) and f"{2 * N} cases of 2 runs" in view.export_note.text()
    # a fifth tick is refused: four at most side by side
    view.ticked = ["a", "b", "c", "d"]
    view.tick(str(runs[0].path), True)
    assert str(runs[0].path) not in view.ticked and "untick one" in view.runs_hint.text()
    w.close()


def test_without_the_test_files_the_get_button_says_why_it_failed(qtbot, make_window, clover_home, monkeypatch):
    import socket

    from app.net import download

    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(bfcl_dataset, "local_folder", lambda *a, **k: None)
    monkeypatch.setenv(bfcl_dataset.URL_OVERRIDE, f"http://127.0.0.1:{port}/bfcl_eval-2026.3.23-py3-none-any.whl")
    monkeypatch.setattr(download.Downloader, "_back_off", staticmethod(lambda *a, **k: None))
    w = make_window()
    w.navigate("scenarios")
    w.scenarios_place.show_tab(1)
    view = w.bfcl_view
    assert view.dataset_card.isVisible()
    assert view.dataset_line.text() == "The BFCL test files are not on this machine yet."
    assert view.get_button.text() == "Get the test files (1.9 MB)"
    with qtbot.waitSignal(view.dataset_failed, timeout=30_000) as failed:
        qtbot.mouseClick(view.get_button, Qt.MouseButton.LeftButton)
    sentence = failed.args[0]
    assert sentence.startswith("The BFCL test files are not on this machine yet and there is no connection")
    assert sentence.endswith(".") and "\n" not in sentence and "Errno" not in sentence
    assert view.dataset_line.text() == sentence and w.error_banner.sentence == sentence
    assert view.get_button.isEnabled() and not view.get_bar.isVisible()
    view.run()  # no cases to run: said, nothing started
    assert view.op is None and "Get the BFCL test files first" in w.error_banner.sentence
    # a kept run still opens its cases: what the run kept shows, the rest is said to be missing
    from app.bench.bfcl_run import CaseRecord
    from app.bench.bfcl_store import RunInfo, RunWriter

    writer = RunWriter(RunInfo("kept-model", "kept-model", "kept.gguf", "local", False, "fc", True, ["simple_python"],
                               1, "BFCL v4", "CPU"))
    writer.add(CaseRecord("simple_python_1", "simple_python", False, "Function name 'f' not found.",
                          "simple_function_checker:wrong_func_name", "<tool_call>...</tool_call>",
                          [{"name": "f", "arguments": {}}]))
    writer.close()
    view.refresh()
    view.cases_table.selectRow(0)
    page = view.case_page
    assert page.note.isVisible() and "test files are not on this machine" in page.note.text()
    assert not page.question.isVisible() and not page.tools.isVisible() and not page.answers.isVisible()
    assert page.raw.text.toPlainText() == "<tool_call>...</tool_call>" and '"f"' in page.calls.text.toPlainText()
    assert "Function name 'f' not found." in page.verdict.text()
    w.close()


@needs_data
def test_a_run_on_an_endpoint_goes_through_the_engines_pages_server(qtbot, make_window, clover_home):
    """An endpoint added on the Engines page (here the app's own server on 127.0.0.1, serving the double)
    is offered beside the loaded model; its run leaves the loaded model free and says it ran remotely."""
    from app.engine.endpoints import save_endpoint
    from app.engine.remote import Endpoint
    from app.serve.server import LocalServer

    served = bfcl_engine(FOLDER, wrong_every=4, categories=CATS, name="served-writer")
    served.load("served-writer.gguf", LoadSettings(n_ctx=4096))
    server = LocalServer(served)
    server.start()
    try:
        save_endpoint(Endpoint("bench box", server.url, ""))
        w, view = bfcl_window(make_window, bfcl_engine(FOLDER, categories=CATS))
        assert [t.key for t in view.targets] == ["model", "endpoint:bench box"]
        assert view.target_box.itemText(1).startswith("the endpoint bench box (http://127.0.0.1:")
        view.target_box.setCurrentIndex(1)
        assert view.target_key == "endpoint:bench box"
        with qtbot.waitSignal(view.finished, timeout=60_000) as done:
            view.run()
            assert not w.model.busy_with("bench")  # the loaded model stays the chat's
        (run,) = done.args[0]
        assert len(served.requests) == N and run.info.kind == "remote" and run.info.label == "bench box"
        assert run.info.device == "an endpoint (its own hardware)" and run.state == "complete"
        assert run.summary.categories["simple_python"].correct == Q - Q // 4  # every fourth AST case wrong
        assert view.runs_table.item(0, 1).text() == "bench box, no thinking, quick"
    finally:
        server.stop()
    w.close()
