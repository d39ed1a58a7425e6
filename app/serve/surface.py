"""What every API the local server speaks has in common: a parsed request for the engine and how to
answer it, whole or as a stream, in that API's own shapes (errors included). One surface per API:
OpenAI chat completions here, Anthropic Messages (app/serve/anthropic_messages.py) and OpenAI
Responses (app/serve/openai_responses.py). The server (app/serve/server.py) runs every surface's
request down one path: parse, check the prompt without the engine's lock, wait in line, generate,
answer. A body's top-level fields that its surface does not read are named in the answer's
`X-Clover-Warning` (app/serve/unread.py: one rule for every API). No I/O here, no Qt."""

from __future__ import annotations

import json
import math
from typing import Any

from app.engine.contract import ChatRequest, ContextOverflow, Reply
from app.serve.schema import Chunks, ParsedRequest, completion_json, error_json

CTX_STEP = 1024  # a --ctx to suggest is rounded up to this
ANSWER_ROOM = 1024  # and leaves at least this many tokens for the answer


def warning_header(warnings: list[str]) -> str:
    """The `X-Clover-Warning` value: the warnings joined, in printable ASCII (they may quote a
    client's own names: a tool's, a field's), so no warning can break the header."""
    text = "; ".join(warnings)
    return "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii") for c in text)


def sse(payload: dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event: `event: NAME` (when the API names its events), then the JSON."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def needed_ctx(n: int) -> int:
    """The --ctx that holds an n-token prompt and ANSWER_ROOM tokens of answer, rounded up to CTX_STEP."""
    return math.ceil((n + ANSWER_ROOM) / CTX_STEP) * CTX_STEP


class Surface:
    """One request to one API. A subclass parses its body into `request` (the engine's) and answers
    with the API's JSON; a stream is a sequence of SSE frames: `opening` when the engine starts on
    it, `piece` per engine event, `ending` with the reply, `failure` for an error after the 200."""

    route = ""
    forced_words = "a forced tool call"  # how the API names a forced call, in a 400 about tools
    request: ChatRequest
    stream: bool = False
    warnings: list[str]

    @staticmethod
    def error_json(message: str, status: int, code: str = "invalid_request_error") -> dict[str, Any]:
        return error_json(message, status, code)

    def error_message(self, exc: Exception) -> str:
        """An engine or template error, in this API's words: a prompt past the context with the --ctx
        that would hold it."""
        if isinstance(exc, ContextOverflow):
            return f"{exc}; serve it with --ctx {needed_ctx(exc.n)} or more"
        return str(exc)

    def complete(self, reply: Reply, model: str) -> dict[str, Any]:
        raise NotImplementedError

    def opening(self, model: str, prompt_tokens: int) -> list[bytes]:
        return []

    def piece(self, kind: str, text: str) -> list[bytes]:
        return []

    def logprob(self, entry: dict[str, Any]) -> list[bytes]:
        return []

    def ending(self, reply: Reply) -> list[bytes]:
        return []

    def failure(self, message: str, status: int) -> list[bytes]:
        code = "server_error" if status >= 500 else "invalid_request_error"
        return [sse(self.error_json(message, status, code))]

    def finished(self, reply: Reply, answer: dict[str, Any] | None) -> None:
        """After a reply went out whole (`answer`: the JSON sent, None for a stream): a hook (a stored
        response)."""

    replied: Reply | None = None  # the reply, once made: the request inspector reads it (app/serve/recorder.py)

    def done(self, reply: Reply, answer: dict[str, Any] | None) -> None:
        """What the server calls once a reply is made, whatever the API: kept, then `finished`."""
        self.replied = reply
        self.finished(reply, answer)


class ChatSurface(Surface):
    """OpenAI chat completions (app/serve/schema.py parses and shapes it)."""

    route = "/v1/chat/completions"
    forced_words = "tool_choice / function_call"

    def __init__(self, parsed: ParsedRequest, cid: str, created: int) -> None:
        self.parsed, self.cid, self.created = parsed, cid, created
        self.request, self.stream = parsed.request, parsed.stream
        self.warnings = list(parsed.warnings)
        self._chunks: Chunks | None = None

    def complete(self, reply: Reply, model: str) -> dict[str, Any]:
        return completion_json(reply, self.parsed, self.cid, self.created, model, self.warnings)

    def opening(self, model: str, prompt_tokens: int) -> list[bytes]:
        self._chunks = Chunks(self.parsed, self.cid, self.created, model)
        return [sse(self._chunks.role(self.warnings))]

    def piece(self, kind: str, text: str) -> list[bytes]:
        assert self._chunks is not None
        payload = self._chunks.event(kind, text)
        return [] if payload is None else [sse(payload)]

    def logprob(self, entry: dict[str, Any]) -> list[bytes]:
        assert self._chunks is not None
        return [sse(self._chunks.delta({}, logprobs=[entry]))]

    def ending(self, reply: Reply) -> list[bytes]:
        assert self._chunks is not None
        return [sse(p) for p in self._chunks.ending(reply)] + [b"data: [DONE]\n\n"]
