"""Resumable, verified downloads of big model files. No Qt.

- HTTPS by default (plain HTTP only to loopback, or when allowed), redirects followed.
- Bytes go to `NAME.part` beside the target; `NAME.part.json` records the expected size and hash
  and the part's own SHA-256 at the last checkpoint. A resume re-hashes the part and compares it
  with that record before asking the server for the rest with `Range`; a mismatch starts over.
- A server that ignores `Range` (answers 200) is detected: the part is discarded and the file
  fetched from the start. A server whose `Content-Range` does not start where we asked is refused.
- Drops, timeouts and 5xx answers are retried with exponential backoff; 4xx are not.
- The SHA-256 is computed while downloading, on a second thread. Whole blocks are written straight to
  disk (O_DIRECT, Linux) where the file system allows; on success the part is fsynced and renamed to
  the target atomically. A hash or size mismatch deletes the part: nothing half-trusted is kept.
- Free disk is checked before starting and every 256 MiB while writing.
- Cancel (the part is deleted) and pause (the part is kept for a later resume) through callbacks.
- A token (HF_TOKEN) goes in the Authorization header; it never appears in a message or log.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import http.client
import json
import os
import queue
import re
import shutil
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from app import APP_ID, __version__
from app.fileio import AppendWriter, aligned_buffer, fsync_dir
from app.http_open import open_url, shut

# Why direct writes (measured with tests/bench/download_speed.py on a 2-core VM): through the page
# cache, one run in two or three took twice as long, the time all in the kernel's copy into freshly
# allocated page-cache memory, whatever the chunk size; the final fsync then added the writeback.
# 4 MiB O_DIRECT writes from reused buffers skip that copy, leave the data on disk as they go, and
# ran at the same speed every time. Writing gigabytes this way also leaves the user's page cache
# (and the desktop's responsiveness) alone.
BLOCK = 4 << 20  # written (straight to disk where the OS allows) and hashed as one piece
# Bytes asked of the socket per call; cancel, pause and progress are checked between calls. The size
# adapts so that a call takes about READ_TARGET seconds: big reads on a fast link (at 256 KiB per call
# a loopback download took 1.2 s instead of 0.8 s), small ones on a slow link, so that a cancel is
# answered in a fraction of a second whatever the speed.
READ_MIN, READ_START = 64 << 10, 256 << 10
READ_TARGET = 0.05
HASH_QUEUE = 4  # blocks waiting to be hashed
DIRECT_WRITES = True  # False: everything through the page cache (the benchmark's --page-cache)
PROGRESS_EVERY = 0.1  # seconds between progress reports (and one at the end)
STOP_POLL = 0.1  # seconds between checks for cancel and pause while a read or a back-off waits
DISK_CHECK_EVERY = 256 << 20
DISK_MARGIN = 512 << 20  # keep this much free beyond the file
CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class DownloadError(Exception):
    pass


class DownloadCancelled(DownloadError):
    pass


class DownloadPaused(DownloadError):
    pass


class HashMismatch(DownloadError):
    pass


class DiskFull(DownloadError):
    pass


@dataclass
class Progress:
    done: int
    total: int | None
    speed: float  # bytes/s, averaged over the last seconds
    eta: float | None  # seconds

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None


@dataclass
class Result:
    path: Path
    size: int
    sha256: str
    hash_source: str  # "catalog", "server (X-Linked-Etag)", "server (ETag)", or "none"
    resumed_from: int
    attempts: int


def safe_url(url: str) -> str:
    url = re.sub(r"//[^/@]*@", "//", url)
    return url.split("?", 1)[0]


def _check_scheme(url: str, allow_http: bool) -> None:
    parts = urllib.parse.urlparse(url)
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and (allow_http or parts.hostname in ("127.0.0.1", "localhost", "::1")):
        return
    raise DownloadError(f"refusing {parts.scheme or 'a schemeless'} URL {safe_url(url)}: use https")


def _etag_hash(headers) -> tuple[str | None, str]:
    """Hugging Face sends the LFS object's SHA-256 as X-Linked-Etag (or ETag) on the file URL."""
    for name in ("X-Linked-Etag", "ETag"):
        value = (headers.get(name) or "").strip().strip('"').removeprefix("W/").strip('"')
        if re.fullmatch(r"[0-9a-f]{64}", value):
            return value, f"server ({name})"
    return None, "none"


class _ParallelHasher:
    """SHA-256 on a second thread: hashlib releases the GIL on big buffers, so hashing overlaps
    with receiving and writing instead of adding to them. `hexdigest()` waits for what is queued."""

    def __init__(self, base=None):
        self._h = base or hashlib.sha256()
        self._q: "queue.Queue[bytes | None]" = queue.Queue(maxsize=HASH_QUEUE)
        self._thread = threading.Thread(target=self._work, name="sha256", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            chunk = self._q.get()
            if chunk is None:
                self._q.task_done()
                return
            self._h.update(chunk)
            self._q.task_done()

    def update(self, chunk: bytes) -> None:
        self._q.put(chunk)

    def hexdigest(self) -> str:
        self._q.join()
        return self._h.hexdigest()

    def close(self) -> "hashlib._Hash":
        self._q.put(None)
        self._thread.join()
        return self._h


class _SpeedMeter:
    def __init__(self, window: float = 3.0):
        self.window = window
        self.samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, done: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        t0, d0 = self.samples[0]
        return (done - d0) / (now - t0) if now > t0 else 0.0


class _ReadSizer:
    """How much to ask of the socket per call: about READ_TARGET seconds' worth, between READ_MIN and
    BLOCK, so that a fast link gets big reads and a slow one still reaches the cancel check often."""

    def __init__(self):
        self.size = READ_START

    def ask(self, room: int) -> int:
        return min(room, self.size)

    def took(self, asked: int, got: int, seconds: float) -> None:
        if seconds < READ_TARGET / 2 and got == asked == self.size:
            self.size = min(self.size * 2, BLOCK)
        elif seconds > READ_TARGET * 2:
            self.size = max(self.size // 2, READ_MIN)


class _Reporter:
    """Progress at most every PROGRESS_EVERY seconds, and always for the last byte: a report per read
    would send the UI thousands of signals a second on a fast link."""

    def __init__(self, progress: Callable[[Progress], None] | None, total: int | None, meter: _SpeedMeter,
                 start: int):
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
            if done == self.total:
                eta = 0.0
            else:
                eta = (self.total - done) / speed if self.total and speed > 0 else None
            self.progress(Progress(done, self.total, speed, eta))


class _Watchdog:
    """Checks cancel and pause every STOP_POLL seconds while a body is read, and shuts the sockets
    when one is asked for: a read blocked on a server that stopped sending then ends at once instead
    of at the timeout, and the reader sees the request at its next check."""

    def __init__(self, sockets: list[socket.socket], cancel, pause):
        self._done = threading.Event()

        def watch() -> None:
            while not self._done.wait(STOP_POLL):
                if (cancel is not None and cancel()) or (pause is not None and pause()):
                    shut(sockets)
                    return

        self._thread = threading.Thread(target=watch, name="download-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _cancelled(part: Path, meta_path: Path) -> DownloadCancelled:
    part.unlink(missing_ok=True)
    meta_path.unlink(missing_ok=True)
    return DownloadCancelled("cancelled; the partial file was deleted")


def _paused(done: int) -> DownloadPaused:
    return DownloadPaused(f"paused at {done:,} bytes; resume continues from there")


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


class Downloader:
    def __init__(self, *, token: str | None = None, retries: int = 5, backoff: float = 1.0, timeout: float = 30.0,
                 allow_http: bool = False, free_space: Callable[[Path], int] = free_bytes):
        self.token = token if token is not None else (os.environ.get("HF_TOKEN") or None)
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        self.allow_http = allow_http
        self.free_space = free_space

    # ------------------------------------------------------------------ helpers

    def _request(self, url: str, start: int) -> urllib.request.Request:
        headers = {"User-Agent": f"{APP_ID}/{__version__}", "Accept-Encoding": "identity"}
        if start:
            headers["Range"] = f"bytes={start}-"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return urllib.request.Request(url, headers=headers)

    def _ensure_space(self, folder: Path, needed: int) -> None:
        free = self.free_space(folder)
        if free < needed + DISK_MARGIN:
            raise DiskFull(f"not enough free disk in {folder}: {needed / 1e9:.2f} GB more needed "
                           f"(plus {DISK_MARGIN >> 20} MiB to spare), {free / 1e9:.2f} GB free")

    @staticmethod
    def _hash_file(path: Path, limit: int) -> "hashlib._Hash":
        h = hashlib.sha256()
        with open(path, "rb") as f:
            left = limit
            while left > 0:
                chunk = f.read(min(16 << 20, left))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
        return h

    # ------------------------------------------------------------------ the download

    def download(self, url: str, target: str | Path, *, sha256: str | None = None, size: int | None = None,
                 progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None,
                 pause: Callable[[], bool] | None = None) -> Result:
        _check_scheme(url, self.allow_http)
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        meta_path = target.with_name(target.name + ".part.json")
        expected_hash = sha256.lower() if sha256 else None
        hash_source = "catalog" if expected_hash else "none"

        # resume: only a part whose recorded hash still matches its bytes
        start, hasher = 0, hashlib.sha256()
        if part.exists():
            meta = {}
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                pass
            have = part.stat().st_size
            if meta.get("url") == safe_url(url) and meta.get("length") == have and have > 0:
                h = self._hash_file(part, have)
                if h.hexdigest() == meta.get("part_sha256"):
                    start, hasher = have, h
                    expected_hash = expected_hash or meta.get("expected_sha256")
                    hash_source = meta.get("hash_source", hash_source) if not sha256 else hash_source
                    size = size or meta.get("size")
        if start == 0:
            part.unlink(missing_ok=True)
        resumed_from = start
        if size:
            self._ensure_space(target.parent, size - start)

        attempts = 0
        meter = _SpeedMeter()
        total = size
        while True:
            attempts += 1
            sockets: list[socket.socket] = []  # for the watchdog that ends a stalled read on cancel
            try:
                with open_url(self._request(url, start), timeout=self.timeout, sockets=sockets) as resp:
                    status = resp.status
                    if start and status == 200:
                        # the server ignored Range: start over from the first byte
                        start, hasher = 0, hashlib.sha256()
                    elif start and status == 206:
                        m = CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
                        if not m or int(m.group(1)) != start:
                            raise DownloadError(f"the server answered Range bytes={start}- with "
                                                f"{resp.headers.get('Content-Range')!r}")
                        if m.group(3) != "*":
                            total = int(m.group(3))
                    elif status not in (200, 206):
                        raise DownloadError(f"unexpected HTTP status {status} from {safe_url(url)}")
                    if status == 200:
                        length = resp.headers.get("Content-Length")
                        total = int(length) if length is not None else total
                    if size is not None and total is not None and total != size:
                        raise DownloadError(f"the server's file is {total:,} bytes, the catalog says {size:,}")
                    if not expected_hash:
                        expected_hash, hash_source = _etag_hash(resp.headers)
                    if total:
                        self._ensure_space(target.parent, total - start)
                    self._write_meta(meta_path, url, start, hasher, expected_hash, hash_source, total)
                    start, error = self._receive(resp, part, start, hasher, total, meter, progress, cancel, pause,
                                                 meta_path, url, expected_hash, hash_source, target.parent, sockets)
                if error is not None:
                    raise error  # retried below like any other drop, from where the part now ends
                if total is not None and start < total:
                    raise http.client.IncompleteRead(b"", total - start)  # the body ended early: resume
                break
            except (DownloadCancelled, DownloadPaused, DiskFull):
                raise
            except urllib.error.HTTPError as exc:
                if exc.code == 416 and total is not None and start >= total:
                    break  # everything is here already
                if exc.code < 500 or attempts > self.retries:
                    hint = " (a gated or private model: set HF_TOKEN)" if exc.code in (401, 403) else ""
                    raise DownloadError(f"HTTP {exc.code} {exc.reason} for {safe_url(url)}{hint}") from None
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout,
                    TimeoutError) as exc:
                if attempts > self.retries:
                    reason = getattr(exc, "reason", exc)
                    raise DownloadError(f"download of {safe_url(url)} failed after {attempts} attempts: "
                                        f"{reason or type(exc).__name__}") from None
            self._back_off(self.backoff * 2 ** (attempts - 1), cancel, pause, part, meta_path, start)

        digest = hasher.hexdigest()
        if total is not None and start != total:
            raise DownloadError(f"received {start:,} of {total:,} bytes")
        if expected_hash and digest != expected_hash:
            part.unlink(missing_ok=True)
            meta_path.unlink(missing_ok=True)
            raise HashMismatch(f"SHA-256 mismatch for {target.name}: got {digest}, expected {expected_hash} "
                               f"({hash_source}); the download was deleted")
        with open(part, "rb+") as f:
            os.fsync(f.fileno())  # what went through the page cache (direct writes are on disk already)
        os.replace(part, target)
        fsync_dir(target.parent)
        meta_path.unlink(missing_ok=True)
        return Result(target, start, digest, hash_source if expected_hash else "none", resumed_from, attempts)

    @staticmethod
    def _back_off(seconds: float, cancel, pause, part: Path, meta_path: Path, done: int) -> None:
        """Wait before the next attempt, answering a cancel or a pause at once."""
        until = time.monotonic() + seconds
        while True:
            if cancel is not None and cancel():
                raise _cancelled(part, meta_path)
            if pause is not None and pause():  # the part and its checkpoint are consistent between attempts
                raise _paused(done)
            left = until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, STOP_POLL))

    def _write_meta(self, meta_path: Path, url: str, length: int, hasher, expected: str | None, source: str,
                    total: int | None) -> None:
        tmp = meta_path.with_name(meta_path.name + ".tmp")
        tmp.write_text(json.dumps({"url": safe_url(url), "length": length, "part_sha256": hasher.hexdigest(),
                                   "expected_sha256": expected, "hash_source": source, "size": total}))
        os.replace(tmp, meta_path)

    def _receive(self, resp, part: Path, start: int, hasher, total: int | None, meter: _SpeedMeter,
                 progress, cancel, pause, meta_path: Path, url: str, expected: str | None, source: str,
                 folder: Path, sockets: list[socket.socket]) -> tuple[int, BaseException | None]:
        """Write the body into `part` from `start`. Returns the length of the part now, and the transport
        error (reset, timeout) that ended the body early, if one did: the bytes before it are kept,
        and `hasher` has hashed exactly those, so a retry continues from there."""
        parallel = _ParallelHasher(hasher)  # updates the caller's hash object, on a second thread
        # Reused page-aligned buffers: a fresh object per block would cost page faults on every byte,
        # and direct writes need the alignment. The ring is longer than the hashing queue plus the
        # block in hand, so a buffer is refilled only after its hash was taken.
        ring = [aligned_buffer(BLOCK) for _ in range(HASH_QUEUE + 3)]
        done, error, ended, since_check = start, None, False, 0
        sizer, report = _ReadSizer(), _Reporter(progress, total, meter, start)

        def stop_if_asked(pending: memoryview) -> None:
            if cancel is not None and cancel():
                out.close()
                raise _cancelled(part, meta_path)
            if pause is not None and pause():
                commit(pending)
                out.sync()
                self._write_meta(meta_path, url, done, parallel, expected, source, total)
                raise _paused(done)

        def commit(block: memoryview) -> None:
            nonlocal done, since_check
            if not len(block):
                return
            try:
                out.write(block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                out.rewind(done)  # drop the part of the block that fit: the checkpoint stays exact
                self._write_meta(meta_path, url, done, parallel, expected, source, total)
                raise DiskFull(f"the disk filled up at {done:,} bytes; free some space and resume") from None
            parallel.update(block)
            done += len(block)
            since_check += len(block)

        watchdog = _Watchdog(sockets, cancel, pause) if cancel is not None or pause is not None else None
        try:
            with AppendWriter(part, start, direct=DIRECT_WRITES) as out:
                want = BLOCK - start % BLOCK  # then every block starts at a multiple of BLOCK: aligned
                slot = 0
                while not ended:
                    view = memoryview(ring[slot])
                    slot = (slot + 1) % len(ring)
                    filled = 0
                    while filled < want:
                        stop_if_asked(view[:filled])
                        began, asked = time.monotonic(), sizer.ask(want - filled)
                        try:
                            n = resp.readinto(view[filled:filled + asked])
                        except (OSError, http.client.HTTPException) as exc:  # reset, timeout, bad chunk
                            error, n = exc, 0
                        if not n:
                            ended = True
                            break
                        filled += n
                        sizer.took(asked, n, time.monotonic() - began)
                        report(done + filled)
                    commit(view[:filled])
                    want = BLOCK
                    if since_check >= DISK_CHECK_EVERY:
                        since_check = 0
                        self._write_meta(meta_path, url, done, parallel, expected, source, total)
                        if total:
                            self._ensure_space(folder, total - done)
                stop_if_asked(memoryview(b""))  # the watchdog may have ended the read for it
                report(done, final=True)
                self._write_meta(meta_path, url, done, parallel, expected, source, total)
        finally:
            if watchdog is not None:
                watchdog.stop()
            parallel.close()
        return done, error
