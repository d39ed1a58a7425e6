"""Issue 53, item 4, through the real window: a set-up started on its page shows in the Downloads
place (reached from the rail, whose button shows progress) with its speed and time left; Pause and
Resume there continue from the .part; closing the window asks before cutting a download; the next
start offers to resume it in a banner; a failure reads as a sentence with what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from tests.helpers.gguf_models import write_llama
from tests.helpers.http_server import ServerState, serve


@pytest.fixture()
def model_file(tmp_path) -> Path:
    """A real tiny GGUF (about 700 kB): served slowly, its download can be watched, paused and resumed."""
    (tmp_path / "served").mkdir()
    return write_llama(tmp_path / "served" / "tiny-model.gguf")


def start_setup(qtbot, window, url: str):
    """Set up a model by URL on the Set up tab (the user's own entry), as its button does."""
    view = window.setup_view
    window.show_setup()
    view.add_url("Tiny test model", url)
    view.start(confirmed=True)
    qtbot.waitUntil(lambda: view.job is not None and view.job.stage == "download" and view.job.done > 0,
                    timeout=30_000)
    return view.job


def row_of(window, job):
    return window.downloads_view.rows[job.id]


def click_when_asked(qtbot, button_text: str, seen: list) -> None:
    """Answer the next modal question by its button's text (the close prompt)."""
    def answer() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(50, answer)
            return
        seen.append(box.text())
        button = next(b for b in box.buttons() if b.text() == button_text)
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)

    QTimer.singleShot(50, answer)


def test_a_set_up_shows_in_downloads_and_pauses_and_resumes_there(qtbot, make_window, model_file):
    window = make_window(allow_http=True)
    state = ServerState(files={"/tiny.gguf": model_file}, bytes_per_second=100_000)
    with serve(state) as base:
        job = start_setup(qtbot, window, base + "/tiny.gguf")
        rail = window.rail
        qtbot.waitUntil(lambda: rail.download_bar.isVisible() and rail.download_bar.value() > 0, timeout=10_000)
        assert "Tiny test model" in rail.buttons["downloads"].toolTip()
        qtbot.mouseClick(rail.buttons["downloads"], Qt.MouseButton.LeftButton)
        assert window.current_page() == "downloads" and rail.buttons["downloads"].isChecked()
        row = row_of(window, job)
        qtbot.waitUntil(lambda: "/s" in row.line.text() and "left" in row.line.text(), timeout=10_000)
        assert row.line.text().startswith("Downloading · ")
        assert row.buttons["pause"].isVisibleTo(row) and row.buttons["cancel"].isVisibleTo(row)
        assert not row.buttons["resume"].isVisibleTo(row)

        qtbot.mouseClick(row.buttons["pause"], Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: job.state == "paused", timeout=10_000)
        qtbot.waitUntil(lambda: row.buttons["resume"].isVisibleTo(row), timeout=5_000)
        assert row.line.text().startswith("Paused · ") and "Resume" in row.message.text()
        assert not rail.download_bar.isVisible()
        from app.base.paths import app_dirs

        part = next(app_dirs().models.glob("*.part"))
        kept = part.stat().st_size
        assert kept > 0
        assert window.setup_view.start_button.text() == "Continue"  # the page that started it says so too

        state.bytes_per_second = None
        with qtbot.waitSignal(window.setup_view.ready, timeout=60_000):
            qtbot.mouseClick(row.buttons["resume"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: row.line.text().startswith("Done"), timeout=5_000)
    assert job.state == "done"
    assert row.buttons["remove"].isVisibleTo(row) and not row.bar.isVisibleTo(row)
    assert state.requests[-1]["headers"].get("Range", "").startswith("bytes=")  # the rest, not all of it
    qtbot.mouseClick(window.downloads_view.clear_button, Qt.MouseButton.LeftButton)
    assert job.id not in window.downloads_view.rows and window.downloads_view.empty.isVisibleTo(window.downloads_view)


def test_closing_asks_and_the_next_start_offers_to_resume(qtbot, make_window, model_file):
    window = make_window(allow_http=True)
    state = ServerState(files={"/tiny.gguf": model_file}, bytes_per_second=60_000)
    with serve(state) as base:
        job = start_setup(qtbot, window, base + "/tiny.gguf")
        asked: list[str] = []
        click_when_asked(qtbot, "Keep downloading", asked)
        window.close()
        assert asked and "Tiny test model is still downloading" in asked[0]
        assert window.isVisible() and job.state == "running"  # kept: nothing was cut

        click_when_asked(qtbot, "Stop and quit", asked)
        window.close()
        assert len(asked) == 2 and not window.isVisible()
        assert job.state == "paused"

        later = make_window(allow_http=True)  # the next start, on the same data folder
        banner = later.resume_banner
        assert banner.isVisible() and banner.text.text().startswith("Not finished when the app closed: Tiny test "
                                                                     "model (")
        state.bytes_per_second = None
        listed = later.downloads.downloads.get(job.id)
        assert listed is not None and listed.state == "paused" and 0 < listed.done
        with qtbot.waitSignal(later.setup_view.ready, timeout=60_000):
            qtbot.mouseClick(banner.resume_button, Qt.MouseButton.LeftButton)
    assert not banner.isVisible() and listed.state == "done"
    assert later.setup_view.job is listed  # the set-up page followed the resumed job


def test_a_failure_reads_as_a_sentence_and_cancel_removes_it(qtbot, make_window):
    window = make_window(allow_http=True)
    with serve(ServerState(files={})) as base:
        view = window.setup_view
        window.show_setup()
        view.add_url("Gone model", base + "/gone.gguf")
        with qtbot.waitSignal(view.failed, timeout=60_000):
            view.start(confirmed=True)
    job = view.job
    window.navigate("downloads")
    row = row_of(window, job)
    assert job.state == "failed" and row.message.isVisibleTo(row)
    assert row.message.sentence.startswith("The file is no longer at its address (HTTP 404)")
    assert "Discover" in row.message.sentence and "404" in row.message.details
    assert row.buttons["retry"].isVisibleTo(row) and row.buttons["cancel"].isVisibleTo(row)
    qtbot.mouseClick(row.buttons["cancel"], Qt.MouseButton.LeftButton)
    assert job.state == "cancelled" and row.buttons["remove"].isVisibleTo(row)
    qtbot.mouseClick(row.buttons["remove"], Qt.MouseButton.LeftButton)
    assert job.id not in window.downloads_view.rows
