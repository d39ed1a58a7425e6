"""The engine on its own thread: one long-lived QObject moved to a QThread, results through signals.

The model controller (app/ui/controllers/model_controller.py) emits requests, queued to this
thread, and gets back load progress, streamed reasoning/answer text, the finished reply, or a failed
load or reply (two signals): the chat's loads, swaps and replies all run here. The window's thread
only reads the engine's state (`loaded`, `kind`, `info`); jobs that run on the loaded model (the
scenario bench, the local server) call the engine from their own threads, and the engine serializes
them with this one. Stopping is a flag the engine polls between tokens, set from the window's
thread; `tokens` counts the reply's tokens by that beat.

The window's local engine runs in a process of its own (app/engine/hosted.py): when that process dies
under a reply, the reply fails with what stopped (what was streamed stays in the transcript),
`restarting` says so, and the same file and settings load into a fresh engine process (`loaded`, or
`load_failed`, as for any load); the next message is answered there.
"""

from __future__ import annotations

import threading
import traceback
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.engine.contract import ChatRequest
from app.engine.hosted import EngineCrashed, HostedEngine
from app.engine.planned_load import load_as_planned
from app.machine.llama_load import LoadSettings
from app.ui.base.messages import with_details

if TYPE_CHECKING:
    from app.engine.contract import ChatEngine
    from app.model.plan import PlannedFile


def window_engine() -> ChatEngine:
    """The window's local engine: in a process of its own, with a slot kept for the chat."""
    return HostedEngine(reserve_app=True)


class StreamBuffer:
    """The reply's text as the engine thread writes it, taken by the window's paint timer. A queued
    signal a token woke the window's event loop a thousand times a second on a fast model: each
    wake-up cost more than painting the text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[tuple[str, str]] = []

    def put(self, kind: str, text: str) -> bool:
        """Keep (kind, text); True when the buffer was empty (the window has nothing waiting)."""
        with self._lock:
            self._items.append((kind, text))
            return len(self._items) == 1

    def take(self) -> list[tuple[str, str]]:
        with self._lock:
            items, self._items = self._items, []
        return items


class EngineWorker(QObject):
    load_progress = Signal(float)
    loaded = Signal(object)  # ModelInfo
    streamed = Signal(str, str)  # kind ("reasoning" | "answer"), text: each event, for listeners that need them
    text_waiting = Signal()  # `text` went from empty to holding the reply's next events
    finished = Signal(object)  # Reply
    load_failed = Signal(str)
    reply_failed = Signal(str)
    restarting = Signal(str)  # the engine process died: what stopped; the model is being loaded again

    def __init__(self, engine: ChatEngine | None = None) -> None:
        super().__init__()
        self.engine: ChatEngine = engine or window_engine()
        self._stop = threading.Event()
        self._cancel_load = threading.Event()
        self.tokens = 0  # tokens of the reply being written, read by the window's live readout
        self.text = StreamBuffer()  # the reply's events, taken by the window when it paints

    def request_stop(self) -> None:
        """Thread-safe: ask the running generation (or load) to stop as soon as it can."""
        self._stop.set()
        self._cancel_load.set()

    @Slot(str, object)
    def load(self, path: str, planned: PlannedFile) -> None:
        """Load `path` as the set-up planned it (app.engine.planned_load: its settings, its slots, a
        load-time patch; nothing read or planned again)."""
        self._cancel_load.clear()
        try:
            info = load_as_planned(self.engine, path, planned, progress=self._on_progress)
        except Exception as exc:  # reported in the window, never raised into Qt
            self.load_failed.emit(f"Could not load the model: {exc}")
            return
        self.loaded.emit(info)

    @Slot()
    def connect_remote(self) -> None:
        """Connect the engine swapped in (a remote server's: it has no file and no plan)."""
        try:
            info = self.engine.load("", LoadSettings())
        except Exception as exc:  # reported in the window, never raised into Qt
            self.load_failed.emit(f"Could not load the model: {exc}")
            return
        self.loaded.emit(info)

    def _on_progress(self, fraction: float) -> bool:
        self.load_progress.emit(fraction)
        return not self._cancel_load.is_set()

    @Slot(object)
    def generate(self, request: ChatRequest) -> None:
        self._stop.clear()
        self.tokens = 0
        self.text.take()
        local = self.engine.kind == "local"
        try:
            reply = self.engine.generate(request, on_event=self._on_event if not local else self._stream,
                                         should_stop=self._between_tokens if local else self._stop.is_set)
        except EngineCrashed as exc:
            self.reply_failed.emit(with_details(f"{exc} and is starting again with the same model; your reply "
                                                "was kept up to where it stopped.", exc.details))
            self._restart(str(exc))
            return
        except Exception as exc:
            detail = "" if str(exc) else traceback.format_exc(limit=3)
            self.reply_failed.emit(f"Generation failed: {exc}{detail}")
            return
        self.finished.emit(reply)

    def _restart(self, why: str) -> None:
        """A fresh engine process with the model and settings of the one that died."""
        restart = getattr(self.engine, "restart", None)
        if restart is None:
            return
        self._cancel_load.clear()
        self.restarting.emit(why)
        try:
            info = restart(progress=self._on_progress)
        except Exception as exc:  # noqa: BLE001 -- reported in the window, never raised into Qt
            self.load_failed.emit(f"Could not load the model again after the engine stopped: {exc}")
            return
        self.loaded.emit(info)

    def _between_tokens(self) -> bool:
        """The local engine polls this once between tokens: the readout's token count."""
        self.tokens += 1
        return self._stop.is_set()

    def _on_event(self, kind: str, text: str) -> None:
        """Another engine (a remote server streams about a token a chunk; it counts chunks the same
        way when the server reports no usage)."""
        if text and kind in ("reasoning", "answer"):
            self.tokens += 1
        self._stream(kind, text)

    def _stream(self, kind: str, text: str) -> None:
        if self.text.put(kind, text):
            self.text_waiting.emit()
        self.streamed.emit(kind, text)

    @Slot(object)
    def swap(self, engine: ChatEngine) -> None:
        """Use another engine (a remote one, or a fresh local one); the old one's model is freed."""
        self.engine.unload()
        self.engine = engine


class EngineThread(QObject):
    """Owns the worker's thread; `shutdown()` stops generation, frees the model and joins the thread."""

    request_load = Signal(str, object)  # path, PlannedFile
    request_connect = Signal()  # the remote engine swapped in
    request_generate = Signal(object)
    request_swap = Signal(object)

    def __init__(self, engine: ChatEngine | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.qthread = QThread()
        self.qthread.setObjectName("engine")
        self.worker = EngineWorker(engine)
        self.worker.moveToThread(self.qthread)
        self.request_load.connect(self.worker.load)
        self.request_connect.connect(self.worker.connect_remote)
        self.request_generate.connect(self.worker.generate)
        self.request_swap.connect(self.worker.swap)
        self.qthread.start()

    def shutdown(self, timeout_ms: int = 30_000) -> None:
        if self.qthread.isRunning():
            self.worker.request_stop()  # a running generation ends at its next token
            self.qthread.quit()
            self.qthread.wait(timeout_ms)
        if not self.qthread.isRunning():
            self.worker.engine.unload()  # the thread has ended: freeing the model from here is safe
