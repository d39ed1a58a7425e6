"""Read a GGUF header over HTTP(S) with Range requests, so a plan exists before a 20 GB download. No Qt.

Asks for the first 8 MiB (`Range: bytes=0-8388607`), parses, and asks for four times more while
the header is longer (up to 256 MiB, for very large vocabularies). A server that ignores Range and
starts sending the whole file is read only as far as needed, then the connection is closed.
A token (Hugging Face's HF_TOKEN) goes in the Authorization header and is never logged or shown.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

from app import APP_ID, __version__
from app.download import CONTENT_RANGE, safe_url
from app.gguf_file import GGUFError, GGUFHeader, parse_header
from app.http_open import open_url

FIRST_READ = 8 << 20
MAX_HEADER = 256 << 20


class RemoteError(Exception):
    """The header could not be fetched: the message says why, without the token."""


def _request(url: str, start: int, end: int, token: str | None) -> urllib.request.Request:
    headers = {"Range": f"bytes={start}-{end}", "User-Agent": f"{APP_ID}/{__version__}"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return urllib.request.Request(url, headers=headers)


def _fetch_prefix(url: str, length: int, token: str | None, timeout: float) -> tuple[bytes, int]:
    """The first `length` bytes (fewer if the file is shorter) and the file's total size."""
    try:
        with open_url(_request(url, 0, length - 1, token), timeout=timeout) as resp:
            if resp.status == 206:
                m = CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
                if not m or m.group(3) == "*":
                    raise RemoteError(f"the server sent a partial response without a usable Content-Range "
                                      f"({resp.headers.get('Content-Range')!r})")
                total = int(m.group(3))
            elif resp.status == 200:  # Range ignored: read what we need of the full body, then stop
                size = resp.headers.get("Content-Length")
                if size is None:
                    raise RemoteError("the server ignores Range requests and sends no Content-Length")
                total = int(size)
            else:
                raise RemoteError(f"unexpected HTTP status {resp.status}")
            want = min(length, total)
            chunks, got = [], 0
            while got < want:
                chunk = resp.read(min(1 << 20, want - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks), total
    except urllib.error.HTTPError as exc:
        hint = " (a gated or private model: set HF_TOKEN)" if exc.code in (401, 403) else ""
        raise RemoteError(f"HTTP {exc.code} {exc.reason} for {safe_url(url)}{hint}") from None
    except urllib.error.URLError as exc:
        raise RemoteError(f"cannot reach {safe_url(url)}: {exc.reason}") from None
    except TimeoutError:
        raise RemoteError(f"timed out reading {safe_url(url)}") from None


def fetch_header(url: str, token: str | None = None, *, timeout: float = 30.0) -> GGUFHeader:
    if token is None:
        token = os.environ.get("HF_TOKEN") or None
    length = FIRST_READ
    while True:
        prefix, total = _fetch_prefix(url, length, token, timeout)
        try:
            return parse_header(prefix, file_size=total)
        except GGUFError as exc:
            if exc.field != "incomplete" or len(prefix) >= total:
                raise
            if length >= MAX_HEADER:
                raise RemoteError(f"the header of {safe_url(url)} is larger than {MAX_HEADER >> 20} MiB") from None
            length = min(length * 4, MAX_HEADER)
