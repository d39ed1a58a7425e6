"""The one way background work runs: an Op (Anki's QueryOp is the model).

    Op(parent, fn).success(cb).failure(cb).progress(cb).items(cb).busy(button).run()

`fn(ctx)` runs on its own thread with a context: `ctx.report(step, fraction, text)` for progress,
`ctx.emit(item)` for partial results (a header plan as soon as it is read), `ctx.cancelled` to poll
and `ctx.check()` to stop. Every callback runs on the GUI thread; the function never touches a
widget. An Op ends with exactly one of success(result) or failure(exception); without a failure
callback the exception goes to the one error display (app/ui/base/messages.py), so nothing fails
silently. `busy(...)` disables widgets while the Op runs.

The thread is a Python daemon thread, not a QThread: a window closed while an Op still waits on the
network must not take the process down with it (Qt aborts when a running QThread is destroyed).
Results reach the GUI thread as queued signals of a QObject that lives there; once the Op is gone
they are dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

log = logging.getLogger(__name__)

_RUNNING: set[Op] = set()  # keeps running Ops (and their threads) alive until they end


class OpCancelled(Exception):
    """Raised by `ctx.check()` once the Op was cancelled."""


class OpContext:
    def __init__(self, worker: _Worker) -> None:
        self._worker = worker

    def report(self, step: str, fraction: float | None, text: str = "") -> None:
        self._worker.progressed.emit(step, -1.0 if fraction is None else float(fraction), text)

    def emit(self, item: Any) -> None:
        self._worker.item.emit(item)

    @property
    def cancelled(self) -> bool:
        return self._worker.cancel_flag.is_set()

    def is_cancelled(self) -> bool:  # as a callable for core functions that poll `cancel()`
        return self._worker.cancel_flag.is_set()

    def check(self) -> None:
        if self.cancelled:
            raise OpCancelled("cancelled")


class _Worker(QObject):
    """Lives on the GUI thread; its signals, emitted from the Op's thread, are queued to it."""

    progressed = Signal(str, float, str)
    item = Signal(object)
    done = Signal(object)
    failed = Signal(object)  # the exception

    def __init__(self, fn: Callable[[OpContext], Any]) -> None:
        super().__init__()
        self.fn = fn
        self.cancel_flag = threading.Event()

    def run(self) -> None:  # on the Op's thread
        try:
            result = self.fn(OpContext(self))
        except Exception as exc:  # every failure reaches a failure callback or the error display
            self._send(self.failed, exc)
            return
        self._send(self.done, result)

    @staticmethod
    def _send(signal: Any, value: Any) -> None:
        try:
            signal.emit(value)
        except RuntimeError:  # the window (and this worker) is gone: nobody is waiting for the result
            log.debug("an op finished after its window closed")


class Op(QObject):
    """A background call with callbacks on the GUI thread. Build it, then `run()` once."""

    finished = Signal()  # after success or failure (tests wait on it)

    def __init__(self, parent: QObject | None, fn: Callable[[OpContext], Any], *, name: str = "op") -> None:
        super().__init__(parent)
        self.name = name
        self._success: Callable[[Any], None] | None = None
        self._failure: Callable[[BaseException], None] | None = None
        self._progress: Callable[[str, float, str], None] | None = None
        self._items: Callable[[Any], None] | None = None
        self._busy: list[QWidget] = []
        self._worker = _Worker(fn)
        self._thread = threading.Thread(target=self._worker.run, name=name, daemon=True)
        self._worker.progressed.connect(self._on_progress)
        self._worker.item.connect(self._on_item)
        self._worker.done.connect(self._on_done)
        self._worker.failed.connect(self._on_failed)
        self.running = False

    # -------------------------------------------------------------- building

    def success(self, cb: Callable[[Any], None]) -> Op:
        self._success = cb
        return self

    def failure(self, cb: Callable[[BaseException], None]) -> Op:
        self._failure = cb
        return self

    def progress(self, cb: Callable[[str, float, str], None]) -> Op:
        self._progress = cb
        return self

    def items(self, cb: Callable[[Any], None]) -> Op:
        self._items = cb
        return self

    def busy(self, *widgets: QWidget) -> Op:
        self._busy.extend(widgets)
        return self

    # -------------------------------------------------------------- running

    def run(self) -> Op:
        for w in self._busy:
            w.setEnabled(False)
        self.running = True
        _RUNNING.add(self)
        self._thread.start()
        return self

    def cancel(self) -> None:
        self._worker.cancel_flag.set()

    @property
    def cancelled(self) -> bool:
        return self._worker.cancel_flag.is_set()

    def wait(self, ms: int = 30_000) -> bool:
        """Wait for the function to return (True), at most `ms` (False: it is still running)."""
        if self._thread.is_alive():
            self._thread.join(ms / 1000)
        return not self._thread.is_alive()

    def _end(self) -> None:
        self.running = False
        for w in self._busy:
            try:
                w.setEnabled(True)
            except RuntimeError:  # the widget is gone (window closed)
                pass
        _RUNNING.discard(self)

    def _on_progress(self, step: str, fraction: float, text: str) -> None:
        if self._progress is not None:
            self._progress(step, fraction, text)

    def _on_item(self, item: Any) -> None:
        if self._items is not None:
            self._items(item)

    def _on_done(self, result: Any) -> None:
        self._end()
        try:
            if self._success is not None:
                self._success(result)
        finally:
            self.finished.emit()

    def _on_failed(self, exc: BaseException) -> None:
        self._end()
        try:
            if self._failure is not None:
                self._failure(exc)
            elif not isinstance(exc, OpCancelled):
                from app.ui.base.messages import messages

                log.error("%s failed", self.name, exc_info=exc)
                messages().error(f"{self.name}: {exc}")
        finally:
            self.finished.emit()


def running_ops() -> list[Op]:
    return list(_RUNNING)
