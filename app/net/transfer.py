"""The parts of receiving a body that know nothing of the part file. No Qt.

The SHA-256 on a second thread, the speed meter, the pacing of progress reports and the watchdog
that ends a stalled read on cancel or pause. `app.net.download` uses them for every attempt.
"""

from __future__ import annotations

import collections
import hashlib
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.base.http_open import shut

HASH_QUEUE = 4  # blocks waiting to be hashed
PROGRESS_EVERY = 0.1  # seconds between progress reports (and one at the end)
STOP_POLL = 0.1  # seconds between checks for cancel and pause while a read or a back-off waits


@dataclass
class Progress:
    done: int
    total: int | None
    speed: float  # bytes/s, averaged over the last seconds
    eta: float | None  # seconds

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None


class ParallelHasher:
    """SHA-256 on a second thread: hashlib releases the GIL on big buffers, so hashing overlaps
    with receiving and writing instead of adding to them. `hexdigest()` waits for what is queued.
    `on_hashed(n, h)` is called on that thread after each piece, with the bytes hashed so far and
    the hash object (whose digest is then that of those bytes); it must not raise."""

    def __init__(self, base: Any = None, on_hashed: Callable[[int, Any], None] | None = None) -> None:
        self._h = base or hashlib.sha256()
        self._on_hashed = on_hashed
        self._hashed = 0
        self._q: queue.Queue[bytes | memoryview | None] = queue.Queue(maxsize=HASH_QUEUE)
        self._thread = threading.Thread(target=self._work, name="sha256", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            chunk = self._q.get()
            try:
                if chunk is None:
                    return
                self._h.update(chunk)
                self._hashed += len(chunk)
                if self._on_hashed is not None:
                    self._on_hashed(self._hashed, self._h)
            finally:
                self._q.task_done()

    def update(self, chunk: bytes | memoryview) -> None:
        self._q.put(chunk)

    def hexdigest(self) -> str:
        self._q.join()
        return self._h.hexdigest()

    def close(self) -> hashlib._Hash:
        self._q.put(None)
        self._thread.join()
        return self._h


class SpeedMeter:
    def __init__(self, window: float = 3.0) -> None:
        self.window = window
        self.samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, done: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        t0, d0 = self.samples[0]
        return (done - d0) / (now - t0) if now > t0 else 0.0


class Reporter:
    """Progress at most every PROGRESS_EVERY seconds, and always for the last byte: a report per read
    would send the UI thousands of signals a second on a fast link."""

    def __init__(self, progress: Callable[[Progress], None] | None, total: int | None, meter: SpeedMeter,
                 start: int) -> None:
        self.progress, self.total, self.meter = progress, total, meter
        self.last, self.reported = 0.0, start

    def __call__(self, done: int, *, final: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if final and done == self.reported:
            return
        if final or now - self.last >= PROGRESS_EVERY or done == self.total:
            self.last, self.reported = now, done
            speed = self.meter.add(done, now)
            eta: float | None
            if done == self.total:
                eta = 0.0
            else:
                eta = (self.total - done) / speed if self.total and speed > 0 else None
            self.progress(Progress(done, self.total, speed, eta))


class Watchdog:
    """Checks cancel and pause every STOP_POLL seconds while a body is read, and shuts the sockets
    when one is asked for: a read blocked on a server that stopped sending then ends at once instead
    of at the timeout, and the reader sees the request at its next check."""

    def __init__(self, sockets: list[socket.socket], stop_asked: Callable[[], bool]) -> None:
        self._done = threading.Event()

        def watch() -> None:
            while not self._done.wait(STOP_POLL):
                if stop_asked():
                    shut(sockets)
                    return

        self._thread = threading.Thread(target=watch, name="download-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
