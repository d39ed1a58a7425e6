"""The op runner: results on the GUI thread, failures as exceptions, and a job still blocked when the
window closes neither holds the window open nor brings the process down."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from app.ui.base.ops import Op, OpCancelled
from tests.conftest import ROOT


def test_success_failure_progress_and_busy_widgets(qtbot):
    from PySide6.QtCore import QThread
    from PySide6.QtWidgets import QPushButton

    button = QPushButton()
    qtbot.addWidget(button)
    seen: dict = {}

    def work(ctx):
        seen["thread"] = threading.current_thread().name
        ctx.report("step", 0.5, "half")
        ctx.emit("partial")
        return 42

    op = Op(None, work, name="answer").progress(lambda s, f, t: seen.setdefault("progress", (s, f, t))) \
        .items(lambda i: seen.setdefault("item", (i, QThread.currentThread() is button.thread()))) \
        .success(lambda r: seen.setdefault("result", r)).busy(button)
    with qtbot.waitSignal(op.finished, timeout=5000):
        op.run()
        assert not button.isEnabled()
    assert seen == {"thread": "answer", "progress": ("step", 0.5, "half"), "item": ("partial", True), "result": 42}
    assert button.isEnabled()

    failures: list = []
    op = Op(None, lambda ctx: 1 / 0, name="broken").failure(failures.append)
    with qtbot.waitSignal(op.finished, timeout=5000):
        op.run()
    assert isinstance(failures[0], ZeroDivisionError)


def test_cancel_is_seen_by_the_job(qtbot):
    started = threading.Event()

    def work(ctx):
        started.set()
        while True:
            ctx.check()
            time.sleep(0.01)

    failures: list = []
    op = Op(None, work).failure(failures.append)
    with qtbot.waitSignal(op.finished, timeout=5000):
        op.run()
        assert started.wait(5)
        op.cancel()
    assert isinstance(failures[0], OpCancelled)


@pytest.mark.slow  # starts and closes the app in a subprocess
def test_closing_the_app_while_a_job_is_blocked_exits_cleanly(clover_home):
    code = """
import threading, sys, time
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.ui.base.ops import Op
from app.ui.main_window import MainWindow
w = MainWindow()
w.show()
blocked = threading.Event()
Op(w, lambda ctx: blocked.wait(60), name="stuck on the network").run()
app.processEvents()
started = time.monotonic()
w.close()
print(f"closed in {time.monotonic() - started:.1f} s", flush=True)
"""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 0, result.stdout + result.stderr  # a destroyed running QThread aborted here
    seconds = float(result.stdout.split("closed in ")[1].split(" s")[0])
    assert seconds < 5
