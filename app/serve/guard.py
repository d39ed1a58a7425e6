"""The local server's guard, an ASGI middleware in front of its routes: the request body read whole
(or refused: 413 past MAX_BODY, 408 when it stops coming), then who may ask (loopback Host names, no
foreign Origin, the API key), and every answer counted for /metrics and its header names written as
HTTP spells them. No Qt; the routes are in
app/serve/server.py, the connection below HTTP in app/serve/connection.py.

The body is read before anything is decided, as the server always did: a refused request's answer
never races a client still sending, and a body larger than MAX_BODY (but not MAX_DRAIN) is read away
before its 413, so the client sees the answer, not a broken pipe. The routes find it in
`scope["state"]["body"]`."""

from __future__ import annotations

import asyncio
import json
import secrets
import urllib.parse
from collections.abc import Mapping
from typing import Any, Protocol

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.serve.anthropic_messages import MessagesSurface
from app.serve.surface import Surface

MAX_BODY = 16 << 20
MAX_DRAIN = 64 << 20  # a larger body is not read: the connection is closed after the 413
READ_TIMEOUT = 30.0  # seconds a connection may stay silent mid-request (a body shorter than its length)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
OPEN_PATHS = ("/health", "/metrics")  # answered without the key (a prober, a scraper), still behind Host/Origin


class GuardConfig(Protocol):
    """What the guard needs to know of its server."""

    read_timeout: float
    allowed_hosts: set[str]
    api_key: str | None

    def answered(self, path: str, status: int) -> None: ...


def json_response(status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None) -> Response:
    return Response(json.dumps(payload, ensure_ascii=False).encode(), status, headers, "application/json")


def error_response(path: str, status: int, message: str, code: str = "invalid_request_error",
                   headers: Mapping[str, str] | None = None, close: bool = False) -> Response:
    """An error in the shape of the API the path belongs to (Anthropic's under /v1/messages); `close`:
    the connection closes after it (the request's body was not read whole)."""
    shape = MessagesSurface if path.startswith("/v1/messages") else Surface
    if close:
        headers = {**(headers or {}), "Connection": "close"}
    return json_response(status, shape.error_json(message, status, code), headers)


class Guard:
    """The body, Host, Origin and key of every request, before its route."""

    def __init__(self, app: ASGIApp, config: GuardConfig) -> None:
        self.app, self.config = app, config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"].rstrip("/") or "/"
        scope["path"] = path  # /v1/models/ is /v1/models, as a route

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.config.answered(path, message["status"])
                # names as HTTP writes them (Starlette lowers them): clients that read headers into a
                # plain dict find X-Clover-Warning under its name
                message["headers"] = [(name.title(), value) for name, value in message.get("headers", ())]
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        body = await self._body(path, headers, receive, scope, counted)
        if body is None:
            return
        refusal = self._refusal(path, headers)
        if refusal is not None:
            await refusal(scope, receive, counted)
            return
        scope.setdefault("state", {})["body"] = body
        await self.app(scope, receive, counted)

    # -- the body ---------------------------------------------------------------------------

    async def _body(self, path: str, headers: dict[str, str], receive: Receive, scope: Scope,
                    send: Send) -> bytes | None:
        """The request body, read whole; None after an error answer was sent (or the client left).
        A body that stops coming for `read_timeout` seconds gets a 408."""
        length = int(headers.get("content-length") or 0)  # h11 refused one that is not a number
        if length > MAX_BODY:
            if length <= MAX_DRAIN:  # read it away, so the client sees the answer, not a broken pipe
                while (message := await self._receive(receive)) is not None and message.get("more_body"):
                    pass
            await self._too_large(path)(scope, receive, send)
            return None
        parts: list[bytes] = []
        total = 0
        while True:
            message = await self._receive(receive)
            if message is None:
                await error_response(path, 408, f"the request body stopped coming: no byte for "
                                                 f"{self.config.read_timeout:g} s (Content-Length says "
                                                 f"{headers.get('content-length', '?')})",
                                     "timeout_error", close=True)(scope, receive, send)
                return None
            if message["type"] == "http.disconnect":
                return None  # nobody to answer
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > MAX_BODY:  # chunked: no length said beforehand
                await self._too_large(path)(scope, receive, send)
                return None
            parts.append(chunk)
            if not message.get("more_body"):
                return b"".join(parts)

    async def _receive(self, receive: Receive) -> Message | None:
        """The next piece of the body, or None when none came within the read timeout."""
        try:
            async with asyncio.timeout(self.config.read_timeout):
                return await receive()
        except TimeoutError:
            return None

    @staticmethod
    def _too_large(path: str) -> Response:
        return error_response(path, 413, f"the body is larger than {MAX_BODY >> 20} MiB", close=True)

    # -- who asks -----------------------------------------------------------------------------

    def _refusal(self, path: str, headers: dict[str, str]) -> Response | None:
        """403 for a foreign Host or Origin, 401 without the key (the health check and the metrics
        need none); None when the request may go on."""
        return self._foreign(path, headers) or (None if path in OPEN_PATHS else self._unauthorised(path, headers))

    def _foreign(self, path: str, headers: dict[str, str]) -> Response | None:
        """DNS rebinding and drive-by pages: only loopback Host names (plus `allowed_hosts`), no
        foreign Origin. A server listening beyond loopback (`"*"` in `allowed_hosts`: every address, with
        an API key or --insecure-no-key) takes any Host name, the one its clients use to reach it."""
        allowed = self.config.allowed_hosts
        host = headers.get("host", "")
        name = urllib.parse.urlsplit(f"//{host}").hostname or ""
        if name not in allowed and "*" not in allowed:
            return error_response(path, 403, f"Host {host!r} is not allowed: this server answers only loopback "
                                             "names", "permission_error")
        origin = headers.get("origin")
        if origin and origin != "null" and urllib.parse.urlsplit(origin).hostname not in allowed - {"*"}:
            return error_response(path, 403, f"requests from the web page {origin!r} are not allowed",
                                  "permission_error")
        return None

    def _unauthorised(self, path: str, headers: dict[str, str]) -> Response | None:
        """The key as a Bearer token (OpenAI's clients) or in `x-api-key` (Anthropic's)."""
        key = self.config.api_key
        if key is None:
            return None
        scheme, _, token = headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), key.encode()):
            return None  # the scheme's name is case-insensitive (RFC 9110, 11.1)
        other = headers.get("x-api-key")
        if other is not None and secrets.compare_digest(other.strip().encode(), key.encode()):
            return None
        return error_response(path, 401, "invalid API key", "authentication_error")
