"""The local server's HTTP guard: who may ask (loopback Host names, no foreign Origin, the API key)
and the request body, always read whole (or the connection closed), so keep-alive never desyncs.
No Qt; the routes are in app/serve/server.py."""

from __future__ import annotations

import http.server
import json
import secrets
import urllib.parse
from typing import Any, Protocol

from app.serve.schema import error_json

MAX_BODY = 16 << 20
MAX_DRAIN = 64 << 20  # a larger body is not read: the connection is closed after the 413
READ_TIMEOUT = 30.0  # seconds a connection may stay silent mid-request (a body shorter than its length)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class GuardConfig(Protocol):
    """What the guard needs to know of its server."""

    read_timeout: float
    allowed_hosts: set[str]
    api_key: str | None


class GuardedHandler(http.server.BaseHTTPRequestHandler):
    """JSON answers, the body read, Host/Origin and the API key checked. A subclass sets `config`."""

    config: GuardConfig
    protocol_version = "HTTP/1.1"
    server_version = "CloverLauncher"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- no request log (prompts are private)
        pass

    def _json(self, status: int, payload: dict[str, Any], close: bool = False,
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, code: str = "invalid_request_error", close: bool = False) -> None:
        self._json(status, error_json(message, status, code), close)

    # -- the body ---------------------------------------------------------------

    def _read_body(self) -> bytes | None:
        """The request body, always consumed (or the connection marked to close); None after an
        error answer was sent. A body that stops coming for `read_timeout` seconds gets a 408."""
        try:
            return self._read_body_bytes()
        except TimeoutError:
            self._error(408, f"the request body stopped coming: no byte for {self.config.read_timeout:g} s "
                             f"(Content-Length says {self.headers.get('Content-Length', '?')})",
                        "timeout_error", close=True)
            return None

    def _read_body_bytes(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        if not raw.strip().isdigit():
            self._error(400, f"Content-Length {raw!r} is not a number", close=True)
            return None
        length = int(raw)
        if length > MAX_BODY:
            if length <= MAX_DRAIN:  # read it away, so the client sees the answer, not a broken pipe
                left = length
                while left > 0:
                    chunk = self.rfile.read(min(1 << 20, left))
                    if not chunk:
                        break
                    left -= len(chunk)
            self._error(413, f"the body is larger than {MAX_BODY >> 20} MiB", close=True)
            return None
        body = self.rfile.read(length)
        if len(body) < length:  # the client closed its side early
            self._error(400, f"the body ended after {len(body)} of the {length} bytes its Content-Length "
                             "says", close=True)
            return None
        return body

    def _read_chunked(self) -> bytes | None:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip() or b"x", 16)
            except ValueError:
                self._error(400, "malformed chunked body", close=True)
                return None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                self._error(413, f"the body is larger than {MAX_BODY >> 20} MiB", close=True)
                return None
            parts.append(self.rfile.read(size))
            self.rfile.readline(16)  # the chunk's CRLF

    # -- who asks -----------------------------------------------------------------

    def _host_allowed(self) -> bool:
        """DNS rebinding and drive-by pages: only loopback Host names (plus `allowed_hosts`), no
        foreign Origin. A server listening beyond loopback (`"*"` in `allowed_hosts`: every address, with
        an API key or --insecure-no-key) takes any Host name, the one its clients use to reach it."""
        allowed = self.config.allowed_hosts
        host = self.headers.get("Host", "")
        name = urllib.parse.urlsplit(f"//{host}").hostname or ""
        if name not in allowed and "*" not in allowed:
            self._error(403, f"Host {host!r} is not allowed: this server answers only loopback names",
                        "permission_error")
            return False
        origin = self.headers.get("Origin")
        if origin and origin != "null" and urllib.parse.urlsplit(origin).hostname not in allowed - {"*"}:
            self._error(403, f"requests from the web page {origin!r} are not allowed", "permission_error")
            return False
        return True

    def _authorised(self) -> bool:
        """The key as a Bearer token (OpenAI's clients) or in `x-api-key` (Anthropic's)."""
        key = self.config.api_key
        if key is None:
            return True
        scheme, _, token = self.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), key.encode()):
            return True  # the scheme's name is case-insensitive (RFC 9110, 11.1)
        other = self.headers.get("x-api-key")
        if other is not None and secrets.compare_digest(other.strip().encode(), key.encode()):
            return True
        self._error(401, "invalid API key", "authentication_error")
        return False

    def _admitted(self, key: bool = True) -> bytes | None:
        """The body of a request that may be answered: read, then Host, Origin and (unless `key` is
        False: the health check and the metrics) the key checked; None once a refusal was sent."""
        raw = self._read_body()
        if raw is None or not self._host_allowed() or (key and not self._authorised()):
            return None
        return raw
