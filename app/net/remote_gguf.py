"""Read a GGUF header over HTTP(S) with Range requests, so a plan exists before a 20 GB download. No Qt.

Asks for the first 1 MiB (`Range: bytes=0-1048575`) and, while the header is longer, for the
bytes after what it has, four times as many each time (up to 256 MiB in all, for very large
vocabularies): nothing is read twice, and a small header (a split model's later part) costs one
request. A server that ignores Range and sends the whole file is read only as far as needed, then
the connection is closed. A 429 is waited out when its Retry-After is short. A token
(Hugging Face's HF_TOKEN) goes in the Authorization header and is never logged or shown.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import IO

from app import APP_ID, __version__
from app.base.http_open import open_url
from app.gguf.gguf_file import GGUFError, GGUFHeader, parse_header
from app.net.download import CONTENT_RANGE, safe_url

FIRST_READ = 1 << 20
GROWTH = 4
MAX_HEADER = 256 << 20
MAX_RATE_WAIT = 30.0  # seconds of Retry-After waited out; longer is reported


class RemoteError(Exception):
    """The header could not be fetched: the message says why, without the token."""


def _request(url: str, start: int, end: int, token: str | None) -> urllib.request.Request:
    headers = {"Range": f"bytes={start}-{end}", "User-Agent": f"{APP_ID}/{__version__}",
               "Accept-Encoding": "identity"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return urllib.request.Request(url, headers=headers)


def _not_gguf(prefix: bytes, content_type: str) -> str | None:
    if len(prefix) < 4 or prefix[:4] == b"GGUF":
        return None
    if "html" in content_type.lower() or prefix.lstrip()[:1] == b"<":
        return "the server sent an HTML page, not a GGUF file (a login page, or a wrong address)"
    return f"not a GGUF file (it starts with {prefix[:4]!r})"


class _Reader:
    """Bytes [0, n) of a remote file, fetched in Range requests that never repeat a byte."""

    def __init__(self, url: str, token: str | None, timeout: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url, self.token, self.timeout, self._sleep = url, token, timeout, sleep
        self.data = bytearray()
        self.total: int | None = None
        self.bytes_read = 0
        self.requests = 0
        self._stream = None  # a 200 response to a server that ignores Range: read on from it

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def ensure(self, length: int) -> None:
        length = min(length, self.total) if self.total is not None else length
        if len(self.data) >= length:
            return
        if self._stream is not None:
            self._read_body(self._stream, length - len(self.data))
            return
        for attempt in range(3):
            try:
                resp = open_url(_request(self.url, len(self.data), length - 1, self.token), timeout=self.timeout)
                break
            except urllib.error.HTTPError as exc:
                wait = exc.headers.get("Retry-After") if exc.headers else None
                if exc.code == 429 and attempt < 2 and wait and wait.isdigit() and float(wait) <= MAX_RATE_WAIT:
                    self._sleep(float(wait))
                    continue
                raise _http_error(exc, self.url) from None
            except urllib.error.URLError as exc:
                raise RemoteError(f"cannot reach {safe_url(self.url)}: {exc.reason}") from None
            except (TimeoutError, OSError) as exc:
                raise RemoteError(f"timed out or failed reading {safe_url(self.url)}: {exc}") from None
        self.requests += 1
        try:
            if resp.status == 206:
                m = CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
                if not m or m.group(3) == "*" or int(m.group(1)) != len(self.data):
                    raise RemoteError(f"the server sent a partial response without a usable Content-Range "
                                      f"({resp.headers.get('Content-Range')!r})")
                self.total = int(m.group(3))
                self._read_body(resp, int(m.group(2)) - int(m.group(1)) + 1)
                resp.close()
            elif resp.status == 200:  # Range ignored: read what we need of the full body, keep it open
                size = resp.headers.get("Content-Length")
                if size is None:
                    raise RemoteError("the server ignores Range requests and sends no Content-Length")
                self.total = int(size)
                self.data.clear()
                self._stream = resp
                self._read_body(resp, length)
            else:
                raise RemoteError(f"unexpected HTTP status {resp.status}")
            problem = _not_gguf(bytes(self.data[:64]), resp.headers.get("Content-Type", ""))
            if problem:
                raise RemoteError(f"{safe_url(self.url)}: {problem}")
        except BaseException:
            resp.close()
            self._stream = None
            raise

    def _read_body(self, resp: IO[bytes], want: int) -> None:
        try:
            while want > 0:
                chunk = resp.read(min(1 << 20, want))
                if not chunk:
                    break
                self.data += chunk
                self.bytes_read += len(chunk)
                want -= len(chunk)
        except (TimeoutError, OSError) as exc:
            raise RemoteError(f"timed out reading {safe_url(self.url)}: {exc}") from None


def _http_error(exc: urllib.error.HTTPError, url: str) -> RemoteError:
    hint = ""
    if exc.code in (401, 403):
        hint = " (a gated or private model: accept its licence on the model page, then set a token or HF_TOKEN)"
    elif exc.code == 429:
        hint = " (rate limited: try again later)"
    return RemoteError(f"HTTP {exc.code} {exc.reason} for {safe_url(url)}{hint}")


def fetch_header_counted(url: str, token: str | None = None, *, timeout: float = 30.0) -> tuple[GGUFHeader, int]:
    """The header, and how many bytes were read to get it."""
    if token is None:
        token = os.environ.get("HF_TOKEN") or None
    reader = _Reader(url, token, timeout)
    try:
        return _read_header(reader, url), reader.bytes_read
    finally:
        reader.close()


def _read_header(reader: _Reader, url: str) -> GGUFHeader:
    """Read more of the file (growing the read each time) until its header parses whole."""
    length = FIRST_READ
    while True:
        reader.ensure(length)
        try:
            return parse_header(bytes(reader.data), file_size=reader.total or len(reader.data))
        except GGUFError as exc:
            if exc.field != "incomplete" or len(reader.data) >= (reader.total or 0):
                raise
            if length >= MAX_HEADER:
                raise RemoteError(f"the header of {safe_url(url)} is larger than {MAX_HEADER >> 20} MiB") from None
            length = min(length * GROWTH, MAX_HEADER)


def fetch_header(url: str, token: str | None = None, *, timeout: float = 30.0) -> GGUFHeader:
    return fetch_header_counted(url, token, timeout=timeout)[0]


def fetch_head(url: str, token: str | None = None, *, timeout: float = 30.0) -> tuple[GGUFHeader, bytes]:
    """The header and the file's bytes up to its data section (what an in-stream patch replaces)."""
    if token is None:
        token = os.environ.get("HF_TOKEN") or None
    reader = _Reader(url, token, timeout)
    try:
        header = _read_header(reader, url)
        reader.ensure(header.data_offset)
        return header, bytes(reader.data[:header.data_offset])
    finally:
        reader.close()
