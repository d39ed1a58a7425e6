"""How a request reaches the engine and its reply reaches the client, so that no client can hold
the engine for others: the server's requests wait in one line, first come first served (each knows
its place in it), and a stream's generation writes into a bounded buffer that the server's event loop
empties onto the socket. A client that stops reading fills its buffer; after `stall_timeout` seconds its
generation stops and it is dropped. Nothing here writes to a socket. No Qt."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

STALL_TIMEOUT = 30.0  # seconds a stream's buffer may stay full (the client not reading) before it is dropped
BUFFER_CHUNKS = 256  # a stream's buffer, in chunks (a chunk is one piece of text, a few bytes to a few KB)
QUEUE_NOTE = 10.0  # seconds between `: queued` comments while the place in line does not change
POLL = 0.2  # seconds between checks that a waiting client is still there


class Line:
    """The server's requests, in the order they came; the first `width` have the engine: as many as it
    has parallel slots for clients now (none while the window's replies hold them all: then the
    first in line is told one is ahead of it)."""

    def __init__(self, width: Callable[[], int] = lambda: 1) -> None:
        self._cond = threading.Condition()
        self._tickets: list[object] = []
        self.width = width  # asked at each check: the engine may be swapped for one with other slots

    def __len__(self) -> int:
        with self._cond:
            return len(self._tickets)

    def waiting(self) -> int:
        """Requests in line that do not have the engine yet."""
        with self._cond:
            return max(0, len(self._tickets) - self.width())

    def wait(self, on_place: Callable[[int], None], gone: Callable[[], bool],
             note: float = QUEUE_NOTE) -> object | None:
        """Join the line and wait for a place among the first `width`: a ticket to give back with
        `leave`, or None when `gone()` turned true first (the client left; it is out of the line).
        `on_place(n)` hears how many requests are ahead of it in the queue whenever that changes, and
        every `note` seconds while it does not; never when it has the engine at once."""
        ticket = object()
        with self._cond:
            self._tickets.append(ticket)
        told, told_at = -1, 0.0
        try:
            while True:
                with self._cond:
                    ahead = self._tickets.index(ticket) - self.width() + 1
                    if ahead <= 0:
                        return ticket
                now = time.monotonic()
                if ahead != told or now - told_at >= note:
                    on_place(ahead)
                    told, told_at = ahead, now
                if gone():
                    self.leave(ticket)
                    return None
                with self._cond:
                    if self._tickets.index(ticket) - self.width() + 1 == ahead:
                        self._cond.wait(POLL)
        except BaseException:
            self.leave(ticket)
            raise

    def leave(self, ticket: object) -> None:
        with self._cond:
            if ticket in self._tickets:
                self._tickets.remove(ticket)
                self._cond.notify_all()


class StreamBuffer:
    """One stream's chunks between its generation (which may hold the engine) and the event loop that
    writes them. `put` never blocks longer than `stall_timeout`: a buffer full that long means the
    client stopped reading, and the stream is dropped (`on_drop` runs, e.g. to cut its connection).
    `on_put` runs after each chunk is in (e.g. to wake the loop that takes them).

    One thread puts (the stream's generation), one takes (the loop): the chunks go through a deque,
    and only a generation that finds the buffer full waits on a condition, which the loop notifies
    when it takes a full buffer's worth (with 4 slots streaming, `queue.Queue`'s locking cost the loop
    a tenth of its time)."""

    def __init__(self, stall_timeout: float = STALL_TIMEOUT, size: int = BUFFER_CHUNKS,
                 on_drop: Callable[[], None] | None = None, on_put: Callable[[], None] | None = None) -> None:
        self._items: deque[tuple[str, Any]] = deque()
        self._size = size
        self._room = threading.Condition()  # a full buffer's generation waits here for the loop to take
        self.stall_timeout = stall_timeout
        self._on_drop = on_drop
        self._on_put = on_put
        self.dropped = threading.Event()
        self.ended = False  # the stream's last chunk was taken: nothing is left to stop or cut

    def put(self, kind: str, value: Any = None) -> None:
        if self.dropped.is_set():
            return
        if len(self._items) >= self._size:
            with self._room:
                if not self._room.wait_for(lambda: len(self._items) < self._size or self.dropped.is_set(),
                                           self.stall_timeout):
                    self.drop()
                    return
            if self.dropped.is_set():
                return
        self._items.append((kind, value))
        if self._on_put is not None:
            self._on_put()

    def take(self) -> list[tuple[str, Any]]:
        """Every chunk there now, without waiting."""
        items = []
        while self._items:
            items.append(self._items.popleft())
        if len(items) >= self._size:  # the buffer was full: its generation may be waiting for room
            with self._room:
                self._room.notify_all()
        return items

    def end(self) -> None:
        """The stream's last chunk (its reply or error) is taken: a later `drop` does nothing, so the
        connection stays open for the client's next request."""
        self.ended = True

    def drop(self) -> None:
        """The client is gone or does not read: no more chunks, and the generation stops."""
        if self.ended or self.dropped.is_set():
            return
        self.dropped.set()
        with self._room:  # a generation waiting for room stops waiting
            self._room.notify_all()
        if self._on_drop is not None:
            self._on_drop()
