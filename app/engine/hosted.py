"""The window's engine: the same `ChatEngine` as app/engine/local.py, run in a process of its own (the
engine host, app/engine/host.py), as LM Studio, Ollama and Jan run theirs. No Qt.

A crash inside llama.cpp (SIGILL, SIGSEGV, `GGML_ASSERT`, a CUDA error) ends the host, never the
window: the calls under way raise `EngineCrashed` with what stopped and what the crash changed, what
was streamed stays with the caller, and `restart()` loads the same file with the same settings in a
fresh host (`load` retries once by itself when the crash changed a setting). Everything crosses the
wire (app/engine/host_wire.py) as the engine's own values; each call has its own id and one reader
thread hands every message to its call. More: docs/architecture/decode-loop.md.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.base import crash_trail
from app.base.logs import log_file
from app.engine.contract import AppReplies, ChatRequest, EngineError, ModelInfo, Reply
from app.engine.host_wire import Wire, WireClosed, unpack_error
from app.machine.llama_load import LoadSettings

log = logging.getLogger(__name__)

START_SECONDS = 120.0  # the host's first word (Python, llama-cpp-python and its libraries imported)
EXIT_SECONDS = 30.0  # an unload: the host frees the model and ends, else it is killed


class EngineCrashed(EngineError):
    """The engine's process ended under a call: its text is one line for the user ("The engine stopped
    (SIGSEGV)"), `details` the rest (signal, where, CPU variant, what the crash changed, the log);
    `crash` the trail itself; `changed`: the crash changed a setting (a CPU variant ruled out), so a
    second load runs otherwise."""

    def __init__(self, crash: crash_trail.Crash, changed: bool = False) -> None:
        super().__init__(crash_sentence(crash))
        self.crash, self.changed = crash, changed
        self.details = crash_details(crash)


def crash_sentence(crash: crash_trail.Crash) -> str:
    """What happened, in the user's words and without a full stop (the caller adds what the app did)."""
    return f"The engine stopped ({crash.signal})" if crash.signal else "The engine stopped"


def crash_details(crash: crash_trail.Crash) -> str:
    """"The engine stopped with SIGSEGV in llama_decode (llama_cpp/llama_cpp.py), called from
    app/engine/slots.py:512. <what it changed> Log: <path>": what a bug report needs."""
    how = f"stopped with {crash.signal}" if crash.signal else "stopped without a word"
    if "app/engine/host_wire.py" in crash.where.split(",")[0]:  # the main thread, idle: no frame of the work
        where = (" while its main thread waited for the window (a signal sent to it, or a crash in a native "
                 f"thread; its frame: {crash.where})")
    else:
        where = f" in {crash.where}" if crash.where else ""
    text = f"The engine (pid {crash.pid}) {how}{where}."
    variant = crash.notes.get("cpu_variant")
    if variant:
        text += f" CPU variant: {variant}."
    return " ".join([text, *crash.effects, f"Log: {log_file()}"])


class HostedEngine:
    kind = "local"

    def __init__(self, reserve_app: bool = False) -> None:
        self.reserve_app = reserve_app  # with slots: one kept for the window's chat
        self.info: ModelInfo | None = None
        self.loading = False  # a load is under way (the server's health check reads it)
        self.app_replies = AppReplies()  # the window's replies under way (the local server's line counts them)
        self.crash: crash_trail.Crash | None = None  # the last crash of this engine's host
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._wire: Wire | None = None
        self._calls: dict[int, queue.Queue[tuple[Any, ...]]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # the process, the wire and the calls' table
        self._leaving: set[int] = set()  # hosts asked to end (pids): their end is no crash
        self._down: EngineCrashed | None = None  # the host crashed and none runs since
        self._last: tuple[str, LoadSettings] | None = None  # what to load again after a crash

    # ------------------------------------------------------------------ the process

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def loaded(self) -> bool:
        return self.info is not None and self.pid is not None

    def _start(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the folder that holds the `app` package
        env = dict(os.environ, CLOVER_HOST_RESERVE_APP="1" if self.reserve_app else "0",
                   PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
        proc = subprocess.Popen(host_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # noqa: S603
                                env=env)
        assert proc.stdin is not None and proc.stdout is not None
        wire = Wire(proc.stdout, proc.stdin)
        first: list[Any] = []
        waiter = threading.Thread(target=lambda: first.append(_first_word(wire)), daemon=True)
        waiter.start()
        waiter.join(START_SECONDS)
        if not first or first[0] is None:
            proc.kill()
            rc = proc.wait()
            raise EngineError(f"the engine process did not start (exit code {rc}; the log has its words)")
        with self._lock:
            self._proc, self._wire, self._down = proc, wire, None
        threading.Thread(target=self._read, args=(proc, wire), name="engine-host-reader", daemon=True).start()
        log.info("engine host started (pid %d)", proc.pid)

    def _read(self, proc: subprocess.Popen[bytes], wire: Wire) -> None:
        """Hand each message to its call; when the host is gone, tell every call how it ended."""
        while True:
            try:
                message = wire.receive()
            except WireClosed:
                break
            with self._lock:
                call = self._calls.get(message[1])
            if call is not None:
                call.put(message)
        rc = proc.wait()
        with self._lock:
            leaving = proc.pid in self._leaving
            current = self._proc is proc
            if current:
                self._proc, self._wire = None, None
            calls = list(self._calls.values()) if current else []
        if leaving:
            for call in calls:
                call.put(("gone", 0, None))
            return
        crashed = _crash_of(proc.pid, rc)
        with self._lock:
            self.crash = crashed.crash
            if current:
                self.info, self._down = None, crashed
        for call in calls:
            call.put(("crashed", 0, crashed))

    def _call(self, kind: str, *args: Any, on_message: Callable[[tuple[Any, ...]], None] | None = None) -> Any:
        rid = next(self._ids)
        calls: queue.Queue[tuple[Any, ...]] = queue.Queue()
        with self._lock:
            wire, down = self._wire, self._down
            if wire is None:
                if down is not None:  # it crashed between calls: the caller restarts it as after one in a call
                    raise EngineCrashed(down.crash, down.changed)
                raise EngineError("No model loaded")
            self._calls[rid] = calls
        try:
            self._send(kind, rid, *args)
            while True:
                message = calls.get()
                what = message[0]
                if what == "done":
                    return message[2]
                if what == "error":
                    raise unpack_error(message[2])
                if what == "crashed":  # each call raises its own copy (one exception, many threads)
                    raise EngineCrashed(message[2].crash, message[2].changed)
                if what == "gone":
                    raise EngineError("the model was unloaded")
                if on_message is not None:
                    on_message(message)
        finally:
            with self._lock:
                self._calls.pop(rid, None)

    def _stop(self, rid: int) -> None:
        self._send("stop", rid)

    def _send(self, *message: Any) -> None:
        wire = self._wire
        if wire is not None:
            try:
                wire.send(*message)
            except WireClosed:
                pass  # the reader sees the end and tells the call

    # ------------------------------------------------------------------ the engine's contract

    def load(self, path: str | Path, settings: LoadSettings,
             progress: Callable[[float], bool] | None = None) -> ModelInfo:
        """Load a model in the host (started if none runs). A host that crashes while loading is
        started once more where the crash changed a setting (a SIGILL rules its CPU variant out)."""
        self.loading = True
        try:
            try:
                return self._load(str(path), settings, progress)
            except EngineCrashed as exc:
                if not exc.changed:
                    raise
                log.warning("engine host crashed while loading; trying again: %s", exc)
                return self._load(str(path), settings, progress)
        finally:
            self.loading = False

    def _load(self, path: str, settings: LoadSettings, progress: Callable[[float], bool] | None) -> ModelInfo:
        self.info = None
        if self.pid is None:
            self._start()
        def on(message: tuple[Any, ...]) -> None:
            if message[0] == "progress":  # the host waits for this answer: progress False cancels
                self._send("go-on", message[1], progress is None or bool(progress(message[2])))

        info = self._call("load", path, settings, on_message=on)
        self.info, self._last = info, (path, settings)
        return info

    def restart(self, progress: Callable[[float], bool] | None = None) -> ModelInfo:
        """After a crash: a fresh host with the last model and settings (the crash's effects, such as a
        CPU variant ruled out, apply to it)."""
        if self._last is None:
            raise EngineError("No model was loaded before the engine stopped")
        self.restarts += 1
        self._end()
        return self.load(*self._last, progress=progress)

    def generate(self, request: ChatRequest, on_event: Callable[[str, str], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 on_logprob: Callable[[dict[str, Any]], None] | None = None, prepared: Any = None) -> Reply:
        stopping = False

        def on(message: tuple[Any, ...]) -> None:
            nonlocal stopping
            what = message[0]
            polls = message[-1] if what in ("event", "tick") else 0
            for _ in range(polls):  # the engine's polls between tokens, each one the caller's poll here
                if should_stop is not None and not stopping and should_stop():
                    stopping = True
                    self._stop(message[1])
            if what == "event" and on_event is not None:
                on_event(message[2], message[3])
            elif what == "logprob" and on_logprob is not None:
                on_logprob(message[2])

        with self.app_replies.during(request):
            return self._call("generate", request, on_logprob is not None, on_message=on)

    def count_tokens(self, request: ChatRequest) -> int:
        return int(self._call("count", request))

    def unload(self) -> None:
        """Free the model: the host ends (its memory, GPU memory included, goes back at once)."""
        self._end()
        self.info = None

    def _end(self) -> None:
        with self._lock:
            proc, wire = self._proc, self._wire
            self._down = None
            if proc is not None:
                self._leaving.add(proc.pid)
        if proc is None or wire is None:
            return
        try:
            wire.send("exit")
        except WireClosed:
            pass
        try:
            proc.wait(EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("engine host %d did not end in %.0f s: killed", proc.pid, EXIT_SECONDS)
            proc.kill()
            proc.wait()
        crash_trail.collect(proc.pid)  # a host killed on its way out leaves a trail that is no crash


def host_command() -> list[str]:
    """How the engine host starts: `python -m app.engine.host`, or the bundle's own executable with
    `--engine-host` (a frozen app has no `python -m`; packaging/bundle_main.py hands it over)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--engine-host"]
    return [sys.executable, "-m", "app.engine.host"]


def _first_word(wire: Wire) -> Any:
    try:
        message = wire.receive()
    except WireClosed:
        return None
    return message if message[0] == "ready" else None


def _crash_of(pid: int, rc: int) -> EngineCrashed:
    """The host's end: its crash trail where it left one, else the exit status; acted on
    (app/machine/crash_effects.py) and kept for doctor."""
    from app.machine import crash_effects

    name = ""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
    found = crash_trail.collect(pid)
    crash = found[-1] if found else crash_trail.Crash("engine host", pid, time.time(), name, "")
    if not crash.signal:
        crash.signal = name or f"exit code {rc}"
    changed = crash_effects.apply(crash)
    crash_trail.keep_last(crash)
    log.warning("engine host crashed: %s | stack: %s", crash_details(crash), " <- ".join(crash.stack))
    return EngineCrashed(crash, changed)
