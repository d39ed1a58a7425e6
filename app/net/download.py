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
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import IO, Any

from app import APP_ID, __version__
from app.base.fileio import AppendWriter, aligned_buffer, fsync_dir
from app.base.http_open import open_url, shut

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
CHECKPOINT_EVERY = 3.0  # seconds between resume checkpoints (also every DISK_CHECK_EVERY bytes)
MAX_ATTEMPTS = 1000  # attempts in all, progress or not: a bound for a link that drops forever
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


@dataclass(frozen=True)
class Layout:
    """Where the source's bytes go in the file written (an in-stream patch): the file starts with
    `prefix` (a new header); the source's first `skip` bytes (its own header, given as `skipped`)
    are hashed, so the source's SHA-256 is still checked, but not written; byte i >= skip of the
    source lands at len(prefix) + i - skip."""

    prefix: bytes
    skip: int
    skipped: bytes

    @property
    def shift(self) -> int:
        return len(self.prefix) - self.skip

    def fingerprint(self) -> str:
        return hashlib.sha256(self.prefix + self.skip.to_bytes(8, "little")).hexdigest()


class _Changed(Exception):
    """The server's object is not the one the part holds (its validator changed)."""


def _validator(headers: Message) -> str | None:
    """What identifies this version of the file: its ETag (a strong one), else Last-Modified."""
    etag = (headers.get("ETag") or "").strip()
    if etag and not etag.startswith("W/"):
        return etag
    return (headers.get("Last-Modified") or "").strip() or None


def _body_problem(headers: Message, target: Path, status: int) -> str | None:
    """What is wrong with a response's body before it is written, in words (None: fine)."""
    encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding not in ("identity", ""):
        return (f"the server compressed the file (Content-Encoding: {encoding}) although none was asked for; "
                "the bytes would not be the file's")
    ctype = (headers.get("Content-Type") or "").lower()
    if status in (200, 206) and "text/html" in ctype and target.suffix.lower() in (".gguf", ".whl"):
        return ("the server sent an HTML page, not the file: a login page, an expired link or a wrong URL "
                "(gated models need a token)")
    return None


def _read_exactly(resp: IO[bytes], n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = resp.read(min(1 << 20, n - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def explain_transport_error(exc: BaseException, done: int) -> str:
    """A dropped connection in words, not an exception's repr."""
    if isinstance(exc, http.client.IncompleteRead):
        return f"the server closed the connection early, after {done:,} bytes"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "the server stopped sending (timed out)"
    if isinstance(exc, ConnectionResetError):
        return f"the connection was reset after {done:,} bytes"
    if isinstance(exc, ConnectionError):
        return f"the connection broke after {done:,} bytes ({type(exc).__name__})"
    if isinstance(exc, urllib.error.URLError):
        reason = str(getattr(exc, "reason", exc))
        if "redirect" in reason.lower():
            return "the server redirects in a loop (too many redirects)"
        return f"cannot reach the server: {reason.splitlines()[0] if reason else type(exc).__name__}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


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
    notes: list[str] = field(default_factory=list)  # what happened on the way (restarts), in words


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


def _etag_hash(headers: Message) -> tuple[str | None, str]:
    """Hugging Face sends the LFS object's SHA-256 as X-Linked-Etag (or ETag) on the file URL."""
    for name in ("X-Linked-Etag", "ETag"):
        value = (headers.get(name) or "").strip().strip('"').removeprefix("W/").strip('"')
        if re.fullmatch(r"[0-9a-f]{64}", value):
            return value, f"server ({name})"
    return None, "none"


def _hash_from(f: IO[bytes], length: int, h: Any) -> None:
    """Add the next `length` bytes of `f` (fewer at its end) to the hash `h`, 16 MiB at a time."""
    left = length
    while left > 0:
        chunk = f.read(min(16 << 20, left))
        if not chunk:
            break
        h.update(chunk)
        left -= len(chunk)


class _ParallelHasher:
    """SHA-256 on a second thread: hashlib releases the GIL on big buffers, so hashing overlaps
    with receiving and writing instead of adding to them. `hexdigest()` waits for what is queued."""

    def __init__(self, base: Any = None) -> None:
        self._h = base or hashlib.sha256()
        self._q: queue.Queue[bytes | memoryview | None] = queue.Queue(maxsize=HASH_QUEUE)
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

    def update(self, chunk: bytes | memoryview) -> None:
        self._q.put(chunk)

    def hexdigest(self) -> str:
        self._q.join()
        return self._h.hexdigest()

    def close(self) -> hashlib._Hash:
        self._q.put(None)
        self._thread.join()
        return self._h


class _SpeedMeter:
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


class _ReadSizer:
    """How much to ask of the socket per call: about READ_TARGET seconds' worth, between READ_MIN and
    BLOCK, so that a fast link gets big reads and a slow one still reaches the cancel check often."""

    def __init__(self) -> None:
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


class _Watchdog:
    """Checks cancel and pause every STOP_POLL seconds while a body is read, and shuts the sockets
    when one is asked for: a read blocked on a server that stopped sending then ends at once instead
    of at the timeout, and the reader sees the request at its next check."""

    def __init__(self, sockets: list[socket.socket], cancel: Callable[[], bool] | None,
                 pause: Callable[[], bool] | None) -> None:
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
                 allow_http: bool = False, free_space: Callable[[Path], int] = free_bytes) -> None:
        self.token = token if token is not None else (os.environ.get("HF_TOKEN") or None)
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        self.allow_http = allow_http
        self.free_space = free_space
        self.notes: list[str] = []  # what the last download had to say beside its result
        self._layout: Layout | None = None  # the last download's in-stream layout (its checkpoints record it)

    # ------------------------------------------------------------------ helpers

    def _request(self, url: str, start: int, validator: str | None = None) -> urllib.request.Request:
        headers = {"User-Agent": f"{APP_ID}/{__version__}", "Accept-Encoding": "identity"}
        if start:
            headers["Range"] = f"bytes={start}-"
            if validator:
                headers["If-Range"] = validator  # the rest of *this* version, or all of a new one
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return urllib.request.Request(url, headers=headers)

    def _ensure_space(self, folder: Path, needed: int) -> None:
        free = self.free_space(folder)
        if free < needed + DISK_MARGIN:
            raise DiskFull(f"not enough free disk in {folder}: {needed / 1e9:.2f} GB more needed "
                           f"(plus {DISK_MARGIN >> 20} MiB to spare), {free / 1e9:.2f} GB free")

    @staticmethod
    def _hash_file(path: Path, limit: int) -> hashlib._Hash:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            _hash_from(f, limit, h)
        return h

    # ------------------------------------------------------------------ the download

    def download(self, url: str, target: str | Path, *, sha256: str | None = None, size: int | None = None,
                 progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None,
                 pause: Callable[[], bool] | None = None, layout: Layout | None = None) -> Result:
        """Download `url` to `target`, verified; with a `layout`, the file written is the source with
        its header replaced (`size`, `sha256` and progress are still the source's)."""
        _check_scheme(url, self.allow_http)
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        meta_path = target.with_name(target.name + ".part.json")
        expected_hash = sha256.lower() if sha256 else None
        hash_source = "catalog" if expected_hash else "none"
        self.notes = []

        # `start` counts the source's bytes; the part file is `shift` bytes longer (or shorter)
        shift = layout.shift if layout is not None else 0
        self._layout = layout
        # resume: only a part whose recorded hash (of the source's bytes) still matches what it holds
        start, hasher = 0, hashlib.sha256()
        validator: str | None = None  # ETag or Last-Modified of what the part holds (If-Range)
        if part.exists():
            meta = {}
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                pass
            have = part.stat().st_size
            same_layout = meta.get("layout") == (layout.fingerprint() if layout is not None else None)
            if (meta.get("url") == safe_url(url) and meta.get("length") == have and have > max(shift, 0)
                    and same_layout):
                h = self._source_hash(part, have, layout)
                if h.hexdigest() == meta.get("part_sha256"):
                    start, hasher = have - shift, h
                    expected_hash = expected_hash or meta.get("expected_sha256")
                    hash_source = meta.get("hash_source", hash_source) if not sha256 else hash_source
                    size = size or meta.get("size")
                    validator = meta.get("validator")
        if start == 0:
            part.unlink(missing_ok=True)
            if layout is not None:  # the new header first; the source's own header is hashed, not written
                with open(part, "wb") as f:
                    f.write(layout.prefix)
                    f.flush()
                    os.fsync(f.fileno())
                start, hasher = layout.skip, hashlib.sha256(layout.skipped)
        resumed_from = start if layout is None or start > layout.skip else 0
        if size:
            self._ensure_space(target.parent, size - start)

        attempts = 0  # attempts since bytes last arrived: a flaky link that makes progress is not given up on
        total_attempts = 0
        restarted = False
        meter = _SpeedMeter()
        total = size
        while True:
            attempts += 1
            total_attempts += 1
            before = start
            sockets: list[socket.socket] = []  # for the watchdog that ends a stalled read on cancel
            try:
                with open_url(self._request(url, start, validator), timeout=self.timeout, sockets=sockets) as resp:
                    status = resp.status
                    problem = _body_problem(resp.headers, target, status)
                    if problem:
                        raise DownloadError(f"{safe_url(url)}: {problem}")
                    if start and status == 200:
                        # the server ignored Range, or the file changed since the part (If-Range): start over
                        changed = validator is not None and _validator(resp.headers) not in (None, validator)
                        self.notes.append("the file changed on the server since the partial download: started over"
                                          if changed else "the server does not resume (Range ignored): started over")
                        start, hasher = 0, hashlib.sha256()
                        if layout is not None:  # the body starts with the source's header: read past it
                            head = _read_exactly(resp, layout.skip)
                            if head != layout.skipped:
                                raise DownloadError("the file's header on the server is not the one this set-up "
                                                    "planned and patched from; run the set-up again")
                            hasher.update(head)
                            start = layout.skip
                            with open(part, "r+b") as f:
                                f.truncate(len(layout.prefix))
                    elif start and status == 206:
                        m = CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
                        if not m or int(m.group(1)) != start:
                            raise DownloadError(f"the server answered Range bytes={start}- with "
                                                f"{resp.headers.get('Content-Range')!r}")
                        now_validator = _validator(resp.headers)
                        if validator and now_validator and now_validator != validator:
                            raise _Changed()
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
                    validator = _validator(resp.headers) or validator
                    if total:
                        self._ensure_space(target.parent, total - start)
                    self._write_meta(meta_path, url, start + shift, hasher, expected_hash, hash_source, total,
                                     validator)
                    start, error = self._receive(resp, part, start, hasher, total, meter, progress, cancel, pause,
                                                 meta_path, url, expected_hash, hash_source, target.parent, sockets,
                                                 validator, shift)
                if before == 0 and start > 0 and not expected_hash:
                    self._check_magic(part, meta_path, target)
                if error is not None:
                    raise error  # retried below like any other drop, from where the part now ends
                if total is not None and start < total:
                    raise http.client.IncompleteRead(b"", total - start)  # the body ended early: resume
                break
            except (DownloadCancelled, DownloadPaused, DiskFull):
                raise
            except _Changed:
                self.notes.append("the file changed on the server since the partial download: started over")
                start, hasher, validator, total = self._fresh(part), hashlib.sha256(), None, size
                if layout is not None:
                    hasher = hashlib.sha256(layout.skipped)
                attempts = 0
                continue
            except urllib.error.HTTPError as exc:
                if exc.code == 416 and total is not None and start >= total:
                    break  # everything is here already
                if exc.code == 416 and start > (layout.skip if layout else 0) and not restarted:
                    # the server will not serve the rest (the object was replaced, or the part is longer
                    # than it): the same Range would fail forever, so the download starts over, once
                    self.notes.append(f"the server refused to resume at {start:,} bytes (HTTP 416): started over")
                    start, validator, restarted, attempts = self._fresh(part), None, True, 0
                    hasher = hashlib.sha256(layout.skipped) if layout is not None else hashlib.sha256()
                    continue
                if 300 <= exc.code < 400:
                    looped = "loop" in str(exc.reason).lower()
                    raise DownloadError(f"{safe_url(url)}: " + ("the server redirects in a loop (too many redirects)"
                                                                if looped else f"a redirect was refused: "
                                                                f"{str(exc.reason).splitlines()[0]}")) from None
                if exc.code < 500 or attempts > self.retries:
                    hint = " (a gated or private model: set HF_TOKEN)" if exc.code in (401, 403) else ""
                    reason = str(exc.reason).splitlines()[0] if exc.reason else ""
                    raise DownloadError(f"HTTP {exc.code} {reason} for {safe_url(url)}{hint}") from None
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as exc:
                if start > before:
                    attempts = 0  # bytes arrived before the drop: keep going
                if attempts > self.retries or total_attempts > MAX_ATTEMPTS:
                    raise DownloadError(f"download of {safe_url(url)} failed after {total_attempts} attempts: "
                                        f"{explain_transport_error(exc, start)}") from None
            self._back_off(self.backoff * 2 ** max(attempts - 1, 0), cancel, pause, part, meta_path, start)

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
        return Result(target, start, digest, hash_source if expected_hash else "none", resumed_from, total_attempts,
                      list(self.notes))

    def _fresh(self, part: Path) -> int:
        """Start the part over; the source offset to ask from (after the source's header with a layout)."""
        layout = self._layout
        if layout is None:
            part.unlink(missing_ok=True)
            return 0
        with open(part, "wb") as f:
            f.write(layout.prefix)
        return layout.skip

    @staticmethod
    def _source_hash(part: Path, have: int, layout: Layout | None) -> hashlib._Hash:
        """The SHA-256 of the source's bytes a part holds (with a layout: the skipped header, then the
        part after its new header)."""
        if layout is None:
            return Downloader._hash_file(part, have)
        h = hashlib.sha256(layout.skipped)
        with open(part, "rb") as f:
            f.seek(len(layout.prefix))
            _hash_from(f, have - len(layout.prefix), h)
        return h

    def _check_magic(self, part: Path, meta_path: Path, target: Path) -> None:
        """A .gguf target whose first bytes are not a GGUF file: refused (with no hash to check, a
        login page would otherwise be kept as the model)."""
        if target.suffix.lower() != ".gguf" or not part.exists():
            return
        with open(part, "rb") as f:
            head = f.read(4)
        if len(head) == 4 and head != b"GGUF":
            part.unlink(missing_ok=True)
            meta_path.unlink(missing_ok=True)
            raise DownloadError(f"{target.name}: the server sent something that is not a GGUF file "
                                f"(it starts with {head!r}); nothing was kept")

    @staticmethod
    def _back_off(seconds: float, cancel: Callable[[], bool] | None, pause: Callable[[], bool] | None, part: Path,
              meta_path: Path, done: int) -> None:
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

    def _write_meta(self, meta_path: Path, url: str, length: int, hasher: Any, expected: str | None, source: str,
                    total: int | None, validator: str | None = None) -> None:
        """The resume checkpoint: the part's length and the SHA-256 of the source's bytes it holds."""
        layout = self._layout
        tmp = meta_path.with_name(meta_path.name + ".tmp")
        tmp.write_text(json.dumps({"url": safe_url(url), "length": length, "part_sha256": hasher.hexdigest(),
                                   "expected_sha256": expected, "hash_source": source, "size": total,
                                   "validator": validator,
                                   "layout": layout.fingerprint() if layout is not None else None}))
        os.replace(tmp, meta_path)

    def _receive(self, resp: Any, part: Path, start: int, hasher: Any, total: int | None, meter: _SpeedMeter,
                 progress: Callable[[Progress], None] | None, cancel: Callable[[], bool] | None,
                 pause: Callable[[], bool] | None, meta_path: Path, url: str, expected: str | None, source: str,
                 folder: Path, sockets: list[socket.socket],
                 validator: str | None = None, shift: int = 0) -> tuple[int, BaseException | None]:
        """Write the body into `part` from `start`. Returns the length of the part now, and the transport
        error (reset, timeout) that ended the body early, if one did: the bytes before it are kept,
        and `hasher` has hashed exactly those, so a retry continues from there."""
        parallel = _ParallelHasher(hasher)  # updates the caller's hash object, on a second thread
        # Reused page-aligned buffers: a fresh object per block would cost page faults on every byte,
        # and direct writes need the alignment. The ring is longer than the hashing queue plus the
        # block in hand, so a buffer is refilled only after its hash was taken.
        ring = [aligned_buffer(BLOCK) for _ in range(HASH_QUEUE + 3)]
        done, error, ended, since_check = start, None, False, 0
        checkpoint_at = time.monotonic()
        sizer, report = _ReadSizer(), _Reporter(progress, total, meter, start)

        def stop_if_asked(pending: memoryview) -> None:
            if cancel is not None and cancel():
                out.close()
                raise _cancelled(part, meta_path)
            if pause is not None and pause():
                commit(pending)
                out.sync()
                self._write_meta(meta_path, url, done + shift, parallel, expected, source, total, validator)
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
                out.rewind(done + shift)  # drop the part of the block that fit: the checkpoint stays exact
                self._write_meta(meta_path, url, done + shift, parallel, expected, source, total, validator)
                raise DiskFull(f"the disk filled up at {done:,} bytes; free some space and resume") from None
            parallel.update(block)
            done += len(block)
            since_check += len(block)

        watchdog = _Watchdog(sockets, cancel, pause) if cancel is not None or pause is not None else None
        try:
            with AppendWriter(part, start + shift, direct=DIRECT_WRITES) as out:
                want = BLOCK - (start + shift) % BLOCK  # then every block starts at a multiple of BLOCK: aligned
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
                    now = time.monotonic()
                    if since_check >= DISK_CHECK_EVERY or now - checkpoint_at >= CHECKPOINT_EVERY:
                        # a kill loses at most a few seconds of download, not 256 MiB
                        out.sync()
                        self._write_meta(meta_path, url, done + shift, parallel, expected, source, total, validator)
                        if since_check >= DISK_CHECK_EVERY and total:
                            self._ensure_space(folder, total - done)
                        since_check, checkpoint_at = 0, now
                stop_if_asked(memoryview(b""))  # the watchdog may have ended the read for it
                report(done, final=True)
                self._write_meta(meta_path, url, done + shift, parallel, expected, source, total, validator)
        finally:
            if watchdog is not None:
                watchdog.stop()
            parallel.close()
        return done, error
