"""What a server's answer to a download says, read without touching the part file. No Qt.

The URL rules (https, a URL safe to show), the headers that decide a resume (the validator,
Content-Range), what is wrong with a body before it is written, the SHA-256 a server vouches for,
and a dropped connection in words. `app.net.download` re-exports the public names.
"""

from __future__ import annotations

import http.client
import re
import socket
import urllib.error
import urllib.parse
from email.message import Message
from pathlib import Path
from typing import IO


class DownloadError(Exception):
    pass


CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def safe_url(url: str) -> str:
    url = re.sub(r"//[^/@]*@", "//", url)
    return url.split("?", 1)[0]


def check_scheme(url: str, allow_http: bool) -> None:
    parts = urllib.parse.urlparse(url)
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and (allow_http or parts.hostname in ("127.0.0.1", "localhost", "::1")):
        return
    raise DownloadError(f"refusing {parts.scheme or 'a schemeless'} URL {safe_url(url)}: use https")


def validator_of(headers: Message) -> str | None:
    """What identifies this version of the file: its ETag (a strong one), else Last-Modified."""
    etag = (headers.get("ETag") or "").strip()
    if etag and not etag.startswith("W/"):
        return etag
    return (headers.get("Last-Modified") or "").strip() or None


def body_problem(headers: Message, target: Path, status: int) -> str | None:
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


def etag_hash(headers: Message) -> tuple[str | None, str]:
    """Hugging Face sends the LFS object's SHA-256 as X-Linked-Etag (or ETag) on the file URL."""
    for name in ("X-Linked-Etag", "ETag"):
        value = (headers.get(name) or "").strip().strip('"').removeprefix("W/").strip('"')
        if re.fullmatch(r"[0-9a-f]{64}", value):
            return value, f"server ({name})"
    return None, "none"


def read_exactly(resp: IO[bytes], n: int) -> bytes:
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
