"""The engine host: the process that owns the model (`python -m app.engine.host`, started by
app/engine/hosted.py). No Qt.

llama.cpp is native code: a SIGILL in a CPU variant, a SIGSEGV in a driver, a `GGML_ASSERT` or a
CUDA error ends the process it runs in at once. Here that process is this one, not the window: the
window's `HostedEngine` sees the pipe close, reads the crash trail this process leaves
(app/base/crash_trail.py: the signal and the Python stack at the crash) and restarts it.

It runs one `Engine` (app/engine/local.py) and answers the window's messages (app/engine/host_wire.py)
on its stdin and on the stdout it had at start; its own fd 1 goes to stderr from the first line on, so
that nothing llama.cpp or a library prints can land inside a frame. Each request runs on a thread of
its own (the engine's lock and its slots order them, as in the window before); a `stop` message
sets the flag the engine polls between tokens, and the polls are counted back to the window with the
next piece of text (its tokens/s readout counts them; one frame a token). When the window goes away
(its end of the pipe closes), this process ends too.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from typing import Any

log = logging.getLogger(__name__)

TICKS_ALONE = 4  # polls between tokens sent on their own when no text carries them (one frame a token otherwise)


class Host:
    def __init__(self, wire: Any) -> None:
        from app.engine.local import Engine

        self.wire = wire
        self.engine = Engine(reserve_app=os.environ.get("CLOVER_HOST_RESERVE_APP") == "1")
        self._stops: dict[int, threading.Event] = {}
        self._answers: dict[int, queue.Queue[bool]] = {}  # loads waiting for the window's word on progress

    def serve(self) -> None:
        from app.engine.host_wire import WireClosed

        self.wire.send("ready", os.getpid())
        while True:
            try:
                message = self.wire.receive()
            except WireClosed:
                return
            kind = message[0]
            if kind == "exit":
                return
            if kind == "stop":
                stop = self._stops.get(message[1])
                if stop is not None:
                    stop.set()
                continue
            if kind == "go-on":  # the window's answer to a load's progress: go on (True) or cancel
                answer = self._answers.get(message[1])
                if answer is not None:
                    answer.put(message[2])
                continue
            self._stops[message[1]] = threading.Event()
            threading.Thread(target=self._run, args=(message,), name=f"host-{kind}", daemon=True).start()

    def _run(self, message: tuple[Any, ...]) -> None:
        from app.engine.host_wire import WireClosed, pack_error

        kind, rid = message[0], message[1]
        stop = self._stops[rid]
        try:
            try:
                value = self._do(kind, rid, stop, *message[2:])
            except Exception as exc:  # noqa: BLE001 -- every failure goes back to the window as itself
                if not isinstance(exc, WireClosed):
                    log.debug("engine host: %s failed", kind, exc_info=True)
                    self.wire.send("error", rid, pack_error(exc))
                return
            self.wire.send("done", rid, value)
        except WireClosed:
            pass  # the window is gone: the main loop ends this process
        finally:
            self._stops.pop(rid, None)

    def _do(self, kind: str, rid: int, stop: threading.Event, *args: Any) -> Any:
        engine, send = self.engine, self.wire.send
        if kind == "load":
            path, settings = args

            answers: queue.Queue[bool] = queue.Queue()
            self._answers[rid] = answers

            def progress(fraction: float) -> bool:  # the window decides, as its callback does in-process
                send("progress", rid, fraction)
                return bool(answers.get()) and not stop.is_set()

            try:
                return engine.load(path, settings, progress=progress)
            finally:
                self._answers.pop(rid, None)
        if kind == "generate":
            request, logprobs = args
            polls = [0]  # the engine's polls since the last message: they ride on the next one

            def should_stop() -> bool:
                polls[0] += 1
                if polls[0] >= TICKS_ALONE:  # a stretch with no text (a tool call's JSON, say): said alone
                    send("tick", rid, polls[0])
                    polls[0] = 0
                return stop.is_set()

            def on_event(kind: str, text: str) -> None:
                send("event", rid, kind, text, polls[0])
                polls[0] = 0

            reply = engine.generate(request, on_event=on_event, should_stop=should_stop,
                                    on_logprob=(lambda entry: send("logprob", rid, entry)) if logprobs else None)
            if polls[0]:
                send("tick", rid, polls[0])
            return reply
        if kind == "count":
            return engine.count_tokens(args[0])
        if kind == "unload":
            engine.unload()
            return None
        raise ValueError(f"the engine host does not know {kind!r}")


def main() -> int:
    # the frames' channel is the stdout this process was given; fd 1 is stderr from now on
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    inp = os.fdopen(os.dup(sys.stdin.fileno()), "rb")

    from app.base import crash_trail
    from app.base.logs import setup_logging
    from app.engine.host_wire import Wire

    setup_logging()
    crash_trail.begin("engine host")
    host = Host(Wire(inp, out))
    try:
        host.serve()
        host.engine.unload()
    finally:
        crash_trail.end()
    os._exit(0)  # noqa: SLF001 -- threads still writing for a window that is gone are not waited for


if __name__ == "__main__":
    raise SystemExit(main())
