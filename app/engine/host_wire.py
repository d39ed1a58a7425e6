"""The wire between the window and its engine host (app/engine/host.py, a process of its own): framed
pickles over a pair of pipes, and errors that cross it as the exceptions they were. No Qt.

A frame is 4 bytes of length (little-endian) and a pickle of a tuple whose first item names the
message. Both ends trust each other (the host is this app's own child, on pipes no one else holds),
so pickle is the serializer: requests, replies, stats and model info are the engine's own dataclasses.
"""

from __future__ import annotations

import pickle
import struct
import threading
from typing import IO, Any

from app.engine.contract import ContextOverflow, EngineError

_HEADER = struct.Struct("<I")


class WireClosed(EOFError):
    """The other end is gone (its process ended, or it closed the pipe)."""


class Wire:
    """One direction each way: `send` from any thread (a lock keeps frames whole), `receive` from one."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes]) -> None:
        self.reader, self.writer = reader, writer
        self._lock = threading.Lock()

    def send(self, *message: Any) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            try:
                self.writer.write(_HEADER.pack(len(data)) + data)
                self.writer.flush()
            except (BrokenPipeError, OSError, ValueError) as exc:  # ValueError: the pipe was closed here
                raise WireClosed(str(exc)) from None

    def receive(self) -> tuple[Any, ...]:
        size = _HEADER.unpack(self._exactly(_HEADER.size))[0]
        return pickle.loads(self._exactly(size))  # noqa: S301 (our own child, on our own pipes)

    def _exactly(self, n: int) -> bytes:
        parts, left = [], n
        while left:
            try:
                chunk = self.reader.read(left)
            except (OSError, ValueError) as exc:
                raise WireClosed(str(exc)) from None
            if not chunk:
                raise WireClosed("the pipe was closed")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)


def pack_error(exc: BaseException) -> tuple[str, Any]:
    """An exception as it can cross the wire: ("overflow", its numbers) for a prompt past the context
    (its constructor takes numbers, not the message), ("pickle", the exception) where it pickles back
    to itself, else ("engine", its message) as an EngineError."""
    if isinstance(exc, ContextOverflow):
        return "overflow", (exc.n, exc.n_ctx, exc.at_least)
    try:
        again = pickle.loads(pickle.dumps(exc))  # noqa: S301
        if type(again) is type(exc) and str(again) == str(exc):
            return "pickle", exc
    except Exception:  # noqa: BLE001, S110 -- any failure to round-trip means: send it as words
        pass
    return "engine", f"{type(exc).__name__}: {exc}" if not isinstance(exc, EngineError) else str(exc)


def unpack_error(packed: tuple[str, Any]) -> BaseException:
    kind, value = packed
    if kind == "overflow":
        return ContextOverflow(*value)
    if kind == "pickle":
        return value
    return EngineError(value)
