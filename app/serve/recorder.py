"""The request inspector's ear on the local server: an ASGI middleware in front of the guard that turns
each request to one of the three APIs, once its answer's last byte is out (a stream's too), into an
entry of the server's request log (app/serve/request_log.py). It keeps a copy of the body as the guard
reads it, the answer's status and last bytes (an error's message), and the reply the route left on
the request's surface (`Surface.replied`), the one place every API's reply passes through. Requests
the guard refused (a wrong key, a foreign Host) are listed too: a client set up wrong shows up. No Qt."""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.engine.contract import Reply
from app.serve.guard import MAX_BODY
from app.serve.request_log import APIS, CallSeen, Entry, RequestLog, stop_words

NO_ANSWER = "no answer: the client left first"
CUT = "the reply did not reach its end: the client left, or the server stopped"


class Recorded(Protocol):
    """What the recorder needs of its server."""

    requests: RequestLog

    def model_id(self) -> str | None: ...


class Recorder:
    """Every POST to an API's route, recorded after its answer."""

    def __init__(self, app: ASGIApp, server: Recorded) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"].rstrip("/") if scope["type"] == "http" else ""
        if scope["type"] != "http" or scope["method"] != "POST" or path not in APIS:
            await self.app(scope, receive, send)
            return
        at, started = time.time(), time.monotonic()
        status, last, recorded = 0, b"", False
        parts: list[bytes] = []  # the body as the guard reads it (up to MAX_BODY: a larger one is refused)
        size = 0

        async def teed() -> Message:
            nonlocal size
            message = await receive()
            chunk = message.get("body", b"")
            if chunk and size + len(chunk) <= MAX_BODY:
                parts.append(chunk)
                size += len(chunk)
            return message

        def record() -> None:
            nonlocal recorded
            if recorded:
                return
            recorded = True
            state = scope.get("state", {})
            reply = getattr(state.get("surface"), "replied", None)
            self.server.requests.add(entry(
                self.server.requests.next_number(), at, {**scope, "path": path}, state.get("body") or b"".join(parts),
                status, time.monotonic() - started, self.server.model_id() or "", reply, last))

        async def watched(message: Message) -> None:
            nonlocal status, last
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message.get("body"):  # an error's answer, or a stream's error event, comes in one piece
                last = message["body"]
            if message["type"] == "http.response.body" and not message.get("more_body"):
                record()  # before the client has its last byte: it finds the request in the log
            await send(message)

        try:
            await self.app(scope, teed, watched)
        finally:
            record()  # no answer, or not to its end

def entry(number: int, at: float, scope: Scope, body: bytes, status: int, seconds: float, served: str,
          reply: Reply | None, last: bytes) -> Entry:
    """The log's entry of one request: with the reply's figures when there was one, else the error."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
    common: dict[str, Any] = dict(number=number, at=at, user_agent=headers.get("user-agent", ""),
                                  path=scope["path"], query=scope.get("query_string", b"").decode("latin-1"),
                                  body=body, status=status, seconds=seconds, served=served)
    stream = _streams(body)
    if reply is None or status >= 400:
        return Entry(**common, stream=stream, error=error_text(last) or (CUT if status == 200 else NO_ANSWER))
    stats = reply.stats
    calls = tuple(CallSeen(c.name, c.arguments, tuple(c.errors)) for c in reply.tool_calls)
    return Entry(**common, stream=stream, prompt_tokens=stats.prompt_tokens,
                 cached_tokens=max(0, stats.prompt_tokens - stats.prompt_evaluated),
                 generated_tokens=stats.generated_tokens, ttft=stats.ttft_seconds, tps=stats.generation_tps,
                 stop=stop_words(stats.stop_reason, stats.stop_sequence, len(calls)), calls=calls,
                 text=reply.text, reasoning=reply.reasoning)


def _streams(body: bytes) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True


def error_text(last: bytes) -> str:
    """The message of an error answer (JSON) or of a stream's error event (its last `data:` line), in
    any API's shape; "" when the last bytes hold none."""
    text = last.decode("utf-8", "replace").strip()
    candidates = [text] + [line[6:] for line in reversed(text.splitlines()) if line.startswith("data: ")]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if not isinstance(value, dict):
            continue
        response: dict[str, Any] = value["response"] if isinstance(value.get("response"), dict) else {}
        for error in (value.get("error"), response.get("error"), value if value.get("type") == "error" else None):
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return error["message"]
    return ""
