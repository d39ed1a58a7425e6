"""Errors as sentences with the details behind a click (issue 53, item 7): an engine crash under a reply
reaches the window as one line of what happened and what the app did; the signal, the frame and the
log path stay behind "Details" in the banner."""

from __future__ import annotations

import time

from PySide6.QtCore import QPoint, Qt

from app.base import crash_trail
from app.base.logs import log_file
from app.engine.contract import ChatRequest
from app.engine.hosted import EngineCrashed
from app.ui.base.engine_worker import EngineWorker
from app.ui.base.messages import messages, split_details
from tests.helpers.fakes import ScriptedEngine

SENTENCE = ("The engine stopped (SIGSEGV) and is starting again with the same model; your reply was kept up to "
            "where it stopped.")


class Crashing(ScriptedEngine):
    """Dies under every reply as the hosted engine reports it; its restart is counted."""

    def __init__(self) -> None:
        super().__init__(loaded=True)
        self.restarts = 0

    def generate(self, request, on_event=None, should_stop=None, on_logprob=None, prepared=None):
        crash = crash_trail.Crash("engine host", 4242, time.time(), "SIGSEGV",
                                  "app/engine/host_wire.py:88 (read), called from app/engine/host.py:40")
        raise EngineCrashed(crash)

    def restart(self, progress=None):
        self.restarts += 1
        return self.info


def test_the_worker_says_one_sentence_and_keeps_the_details(qtbot):
    engine = Crashing()
    worker = EngineWorker(engine)
    with qtbot.waitSignal(worker.reply_failed) as failed:
        worker.generate(ChatRequest([{"role": "user", "content": "Hi"}]))
    sentence, details = split_details(failed.args[0])
    assert sentence == SENTENCE and engine.restarts == 1
    assert details.startswith("The engine (pid 4242) stopped with SIGSEGV while its main thread waited")
    assert details.endswith(f"Log: {log_file()}")


def test_the_banner_shows_the_sentence_and_the_details_behind_a_click(qtbot, make_window):
    w = make_window()
    engine = Crashing()
    worker = EngineWorker(engine)
    worker.reply_failed.connect(messages().error)  # as the chat controller passes it on
    worker.generate(ChatRequest([{"role": "user", "content": "Hi"}]))
    banner = w.error_banner
    assert banner.isVisible() and banner.sentence == SENTENCE
    assert "main thread" not in banner.text() and "host_wire" not in banner.text() and ">Details<" in banner.text()
    banner.toggle_details()
    assert "host_wire.py:88" in banner.text() and str(log_file()) in banner.text() and "Hide details" in banner.text()
    banner.toggle_details()
    assert "host_wire" not in banner.text()
    qtbot.mouseClick(banner, Qt.MouseButton.LeftButton, pos=QPoint(banner.width() - 4, banner.height() - 4))
    assert not banner.isVisible()  # a click beside the link dismisses it


def test_a_message_without_details_reads_as_before(qtbot, make_window):
    w = make_window()
    messages().error("The local server port must be 1 to 65535, not 70000.")
    assert w.error_banner.text() == "The local server port must be 1 to 65535, not 70000.   (click to dismiss)"
    assert w.error_banner.details == ""
