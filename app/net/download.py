"""Resumable, verified downloads of big model files. No Qt.

HTTPS by default, redirects followed. Bytes go to `NAME.part` beside the target, with a record of the
expected size and hash and the part's running SHA-256 at each checkpoint, so a resume keeps the part
up to the last point it matches and asks for the rest with `Range`; a server that ignores `Range` or
answers another range is detected and the download starts over. The finished file is checked against
its size and SHA-256 (computed while downloading) before it is fsynced and renamed into place; a
mismatch deletes the part. Drops, timeouts and 5xx answers are retried with exponential backoff.

Every rule, and what happens after a crash: docs/architecture/files.md.
"""

from __future__ import annotations

import errno
import http.client
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import APP_ID, __version__
from app.base.fileio import AppendWriter, aligned_buffer, free_bytes
from app.base.http_open import open_url
from app.net.part_file import Layout, PartFile
from app.net.responses import (
    CONTENT_RANGE,
    DownloadError,
    body_problem,
    check_scheme,
    etag_hash,
    explain_transport_error,
    read_exactly,
    safe_url,
    validator_of,
)
from app.net.transfer import (
    HASH_QUEUE,
    PROGRESS_EVERY,
    STOP_POLL,
    ParallelHasher,
    Progress,
    Reporter,
    SpeedMeter,
    Watchdog,
)

__all__ = ["BLOCK", "CONTENT_RANGE", "DISK_MARGIN", "HASH_QUEUE", "PROGRESS_EVERY", "STOP_POLL", "DiskFull",
           "DownloadCancelled", "DownloadError", "DownloadPaused", "Downloader", "HashMismatch", "Layout", "PartFile",
           "Progress", "Result", "explain_transport_error", "free_bytes", "safe_url"]

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
DIRECT_WRITES = True  # False: everything through the page cache (the benchmark's --page-cache)
DISK_CHECK_EVERY = 256 << 20
CHECKPOINT_EVERY = 3.0  # seconds between fsynced resume checkpoints (also every DISK_CHECK_EVERY bytes)
MAX_ATTEMPTS = 1000  # attempts in all, progress or not: a bound for a link that drops forever
SILENT_REPLIES = 3  # answers in a row that send no byte of the body: the server is given up on
DISK_MARGIN = 512 << 20  # keep this much free beyond the file


class DownloadCancelled(DownloadError):
    pass


class DownloadPaused(DownloadError):
    pass


class HashMismatch(DownloadError):
    pass


class DiskFull(DownloadError):
    pass


class _Changed(Exception):
    """The server's object is not the one the part holds (its validator changed)."""


class _BadRange(Exception):
    """The server answered a resume with a range that is not the one asked for (another start, or
    another total size): its bytes cannot continue the part."""


@dataclass
class _Try:
    """What one attempt got: an answer (status and headers), and how many body bytes it kept."""

    answered: bool = False
    received: int = 0


@dataclass
class Result:
    path: Path
    size: int
    sha256: str
    hash_source: str  # "catalog", "server (X-Linked-Etag)", "server (ETag)", or "none"
    resumed_from: int
    attempts: int
    notes: list[str] = field(default_factory=list)  # what happened on the way (restarts), in words


@dataclass
class _Calls:
    """Who hears of progress and who may stop the download, with the speed meter all attempts share."""

    progress: Callable[[Progress], None] | None
    cancel: Callable[[], bool] | None
    pause: Callable[[], bool] | None
    meter: SpeedMeter = field(default_factory=SpeedMeter)

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel()

    def paused(self) -> bool:
        return self.pause is not None and self.pause()

    def stop_asked(self) -> bool:
        return self.cancelled() or self.paused()


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


def _cancelled(part: PartFile) -> DownloadCancelled:
    part.discard()
    return DownloadCancelled("cancelled; the partial file was deleted")


def _paused(done: int) -> DownloadPaused:
    return DownloadPaused(f"paused at {done:,} bytes; resume continues from there")


class Downloader:
    def __init__(self, *, token: str | None = None, retries: int = 5, backoff: float = 1.0, timeout: float = 30.0,
                 allow_http: bool = False, free_space: Callable[[Path], int] = free_bytes) -> None:
        self.token = token if token is not None else (os.environ.get("HF_TOKEN") or None)
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        self.allow_http = allow_http
        self.free_space = free_space
        self.notes: list[str] = []  # what the last download had to say beside its result

    # ------------------------------------------------------------------ helpers

    def _note(self, text: str) -> None:
        if text not in self.notes:  # a restart that happens again is said once
            self.notes.append(text)

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

    # ------------------------------------------------------------------ the download

    def download(self, url: str, target: str | Path, *, sha256: str | None = None, size: int | None = None,
                 progress: Callable[[Progress], None] | None = None, cancel: Callable[[], bool] | None = None,
                 pause: Callable[[], bool] | None = None, layout: Layout | None = None) -> Result:
        """Download `url` to `target`, verified; with a `layout`, the file written is the source with
        its header replaced (`size`, `sha256` and progress are still the source's)."""
        check_scheme(url, self.allow_http)
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.notes = []
        part = PartFile(target, url, layout)
        part.expected = sha256.lower() if sha256 else None
        part.hash_source = "catalog" if part.expected else "none"
        record = part.resume()  # only as much of a part as its recorded hashes vouch for
        self.notes.extend(part.notes)
        if record is not None:
            part.expected = part.expected or record.get("expected_sha256")
            if not sha256:
                part.hash_source = record.get("hash_source", part.hash_source)
            size = size or record.get("size")
        resumed_from = part.start if layout is None or part.start > layout.skip else 0
        if size:
            self._ensure_space(target.parent, size - part.start)
        part.total = size
        calls = _Calls(progress, cancel, pause)

        attempts = 0  # attempts since bytes last arrived: a flaky link that makes progress is not given up on
        total_attempts = 0
        silent = 0  # answers in a row that sent no byte
        restarted = False
        ranges = True  # False once the server answered a Range with a range it was not asked for
        while True:
            attempts += 1
            total_attempts += 1
            before = part.start
            tried = _Try()
            try:
                error = self._attempt(part, calls, size, target, tried, ranges)
                if before == 0 and part.start > 0 and not part.expected:
                    self._check_magic(part, target)
                if error is not None:
                    raise error  # retried below like any other drop, from where the part now ends
                if part.total is not None and part.start < part.total:
                    raise http.client.IncompleteRead(b"", part.total - part.start)  # the body ended early: resume
                break
            except (DownloadCancelled, DownloadPaused, DiskFull):
                raise
            except _Changed:
                self._note("the file changed on the server since the partial download: started over")
                part.start_over()
                part.total, attempts = size, 0
                continue
            except _BadRange as exc:
                if not ranges:  # it was asked for no range: starting over again would ask the same
                    raise DownloadError(f"{safe_url(url)}: {exc}") from None
                # like a server that ignores Range: from the start, and no Range asked of it again
                self._note(f"{exc}: started over from the beginning")
                part.start_over()
                part.total, attempts, ranges = size, 0, False
                continue
            except urllib.error.HTTPError as exc:
                if exc.code == 416 and part.total is not None and part.start >= part.total:
                    break  # everything is here already
                if exc.code == 416 and part.start > (layout.skip if layout else 0) and not restarted:
                    # the server will not serve the rest (the object was replaced, or the part is longer
                    # than it): the same Range would fail forever, so the download starts over, once
                    self._note(f"the server refused to resume at {part.start:,} bytes (HTTP 416): started over")
                    part.start_over()
                    restarted, attempts = True, 0
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
                if part.start > before:
                    attempts = 0  # bytes arrived before the drop: keep going
                silent = silent + 1 if tried.answered and not tried.received else 0
                if silent >= SILENT_REPLIES:  # it answers, and sends nothing: backing off longer will not help
                    total = f" of {part.total:,}" if part.total else ""
                    raise DownloadError(f"download of {safe_url(url)} given up at {part.start:,}{total} bytes: the "
                                        f"server answered {silent} times in a row without sending a byte "
                                        f"({explain_transport_error(exc, part.start)})") from None
                if attempts > self.retries or total_attempts > MAX_ATTEMPTS:
                    raise DownloadError(f"download of {safe_url(url)} failed after {total_attempts} attempts: "
                                        f"{explain_transport_error(exc, part.start)}") from None
            self._back_off(self.backoff * 2 ** max(attempts - 1, 0), calls, part)

        digest = part.hasher.hexdigest()
        if part.total is not None and part.start != part.total:
            raise DownloadError(f"received {part.start:,} of {part.total:,} bytes")
        if part.expected and digest != part.expected:
            part.discard()
            raise HashMismatch(f"SHA-256 mismatch for {target.name}: got {digest}, expected {part.expected} "
                               f"({part.hash_source}); the download was deleted")
        part.finish(target)
        return Result(target, part.start, digest, part.hash_source if part.expected else "none", resumed_from,
                      total_attempts, list(self.notes))

    def _attempt(self, part: PartFile, calls: _Calls, size: int | None, target: Path, tried: _Try,
                 ranges: bool = True) -> BaseException | None:
        """One request for what the part lacks (all of the file, without `ranges`), its body written
        into the part; `tried` says whether the server answered and how many bytes were kept. Returns
        the transport error (reset, timeout) that ended the body early, if one did."""
        url = part.url
        sockets: list[socket.socket] = []  # for the watchdog that ends a stalled read on cancel
        asked = part.start if ranges else 0
        with open_url(self._request(url, asked, part.validator), timeout=self.timeout, sockets=sockets) as resp:
            tried.answered = True
            status = resp.status
            problem = body_problem(resp.headers, target, status)
            if problem:
                raise DownloadError(f"{safe_url(url)}: {problem}")
            if part.start and status == 200:
                # the server ignored Range, or the file changed since the part (If-Range): start over
                changed = part.validator is not None and validator_of(resp.headers) not in (None, part.validator)
                if asked:  # (without `ranges`, the wrong Content-Range that stopped them was said already)
                    self._note("the file changed on the server since the partial download: started over"
                               if changed else "the server does not resume (Range ignored): started over")
                if part.layout is not None:  # the body starts with the source's header: read past it
                    if read_exactly(resp, part.layout.skip) != part.layout.skipped:
                        raise DownloadError("the file's header on the server is not the one this set-up "
                                            "planned and patched from; run the set-up again")
                part.start_over()
            elif part.start and status == 206:
                now_validator = validator_of(resp.headers)
                if part.validator and now_validator and now_validator != part.validator:
                    raise _Changed()
                m = CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
                total = int(m.group(3)) if m and m.group(3) != "*" else None
                if not m or int(m.group(1)) != part.start or (None not in (total, part.total) and total != part.total):
                    expected = f"bytes {part.start}-" + (f"…/{part.total}" if part.total else "")
                    raise _BadRange(f"the server answered a resume at {part.start:,} bytes with the wrong range "
                                    f"(Content-Range {resp.headers.get('Content-Range')!r}, not {expected!r})")
                if total is not None:
                    part.total = total
            elif status not in (200, 206):
                raise DownloadError(f"unexpected HTTP status {status} from {safe_url(url)}")
            if status == 200:
                length = resp.headers.get("Content-Length")
                part.total = int(length) if length is not None else part.total
            if size is not None and part.total is not None and part.total != size:
                raise DownloadError(f"the server's file is {part.total:,} bytes, the catalog says {size:,}")
            if not part.expected:
                part.expected, part.hash_source = etag_hash(resp.headers)
            part.validator = validator_of(resp.headers) or part.validator
            if part.total:
                self._ensure_space(part.folder, part.total - part.start)
            part.checkpoint()
            began = part.start
            try:
                return self._receive(resp, part, calls, sockets)
            finally:
                tried.received = part.start - began

    def _check_magic(self, part: PartFile, target: Path) -> None:
        """A .gguf target whose first bytes are not a GGUF file: refused (with no hash to check, a
        login page would otherwise be kept as the model)."""
        if target.suffix.lower() != ".gguf" or not part.path.exists():
            return
        with open(part.path, "rb") as f:
            head = f.read(4)
        if len(head) == 4 and head != b"GGUF":
            part.discard()
            raise DownloadError(f"{target.name}: the server sent something that is not a GGUF file "
                                f"(it starts with {head!r}); nothing was kept")

    @staticmethod
    def _back_off(seconds: float, calls: _Calls, part: PartFile) -> None:
        """Wait before the next attempt, answering a cancel or a pause at once."""
        until = time.monotonic() + seconds
        while True:
            if calls.cancelled():
                raise _cancelled(part)
            if calls.paused():  # the part and its checkpoint are consistent between attempts
                raise _paused(part.start)
            left = until - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, STOP_POLL))

    def _receive(self, resp: Any, part: PartFile, calls: _Calls,
                 sockets: list[socket.socket]) -> BaseException | None:
        """Write the body into the part from where it ends. Returns the transport error (reset,
        timeout) that ended the body early, if one did: the bytes before it are kept, and the part's
        hash has hashed exactly those, so a retry continues from there."""
        base = part.start + part.shift  # the part's length when this body starts

        def hashed(n: int, h: Any) -> None:  # a block is on disk and hashed: a resume may start after it
            part.mark(base + n, h.hexdigest())

        parallel = ParallelHasher(part.hasher, hashed)  # updates the part's hash object, on a second thread
        # Reused page-aligned buffers: a fresh object per block would cost page faults on every byte,
        # and direct writes need the alignment. The ring is longer than the hashing queue plus the
        # block in hand, so a buffer is refilled only after its hash was taken.
        ring = [aligned_buffer(BLOCK) for _ in range(HASH_QUEUE + 3)]
        error: BaseException | None = None
        ended, since_check = False, 0
        checkpoint_at = time.monotonic()
        sizer, report = _ReadSizer(), Reporter(calls.progress, part.total, calls.meter, part.start)

        def stop_if_asked(pending: memoryview) -> None:
            if calls.cancelled():
                out.close()
                raise _cancelled(part)
            if calls.paused():
                commit(pending)
                out.sync()
                part.checkpoint(parallel)
                raise _paused(part.start)

        def commit(block: memoryview) -> None:
            nonlocal since_check
            if not len(block):
                return
            try:
                out.write(block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                out.rewind(part.start + part.shift)  # drop the part of the block that fit: the checkpoint stays exact
                part.checkpoint(parallel)
                raise DiskFull(f"the disk filled up at {part.start:,} bytes; free some space and resume") from None
            parallel.update(block)
            part.start += len(block)
            since_check += len(block)

        watchdog = Watchdog(sockets, calls.stop_asked) if calls.cancel is not None or calls.pause is not None else None
        try:
            with AppendWriter(part.path, part.start + part.shift, direct=DIRECT_WRITES) as out:
                want = BLOCK - (part.start + part.shift) % BLOCK  # then every block starts at a multiple of BLOCK
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
                        report(part.start + filled)
                    commit(view[:filled])
                    want = BLOCK
                    now = time.monotonic()
                    if since_check >= DISK_CHECK_EVERY or now - checkpoint_at >= CHECKPOINT_EVERY:
                        # a kill loses at most a few seconds of download, not 256 MiB
                        out.sync()
                        part.checkpoint(parallel)
                        if since_check >= DISK_CHECK_EVERY and part.total:
                            self._ensure_space(part.folder, part.total - part.start)
                        since_check, checkpoint_at = 0, now
                stop_if_asked(memoryview(b""))  # the watchdog may have ended the read for it
                report(part.start, final=True)
                part.checkpoint(parallel)
        finally:
            if watchdog is not None:
                watchdog.stop()
            parallel.close()
        return error
