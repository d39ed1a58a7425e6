"""The one way long jobs run off the GUI thread: a Job (QObject) on its own QThread.

A job is a plain function `fn(report, is_cancelled)` from the core. Its progress reaches the GUI
through the `progress` signal (queued to the GUI thread), and it ends with exactly one of
`finished(result)` or `failed(message)`. `cancel()` sets a flag the function polls. Workers never
touch widgets.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot


class Job(QObject):
    progress = Signal(str, float, str)  # step, fraction (-1: unknown), text
    finished = Signal(object)
    failed = Signal(str)

    def __init__(self, fn: Callable[[Callable[[str, float | None, str], None], Callable[[], bool]], Any]) -> None:
        super().__init__()
        self._fn = fn
        self._cancel = threading.Event()
        self.thread = QThread()
        self.moveToThread(self.thread)
        self.thread.started.connect(self._run)
        self.finished.connect(self.thread.quit)
        self.failed.connect(self.thread.quit)

    def start(self) -> None:
        self.thread.start()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def wait(self, ms: int = 30_000) -> bool:
        return self.thread.wait(ms)

    @Slot()
    def _run(self) -> None:
        def report(step: str, fraction: float | None, text: str) -> None:
            self.progress.emit(step, -1.0 if fraction is None else float(fraction), text)

        try:
            result = self._fn(report, self._cancel.is_set)
        except Exception as exc:
            self.failed.emit(str(exc) or traceback.format_exc(limit=2))
            return
        self.finished.emit(result)
