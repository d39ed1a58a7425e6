"""Anthropic's Messages API on the local server (`POST /v1/messages`, `/v1/messages/count_tokens`):
a body (parsed and checked by its Pydantic model, app/serve/messages_body.py) as the engine's request,
and replies and stream events in Anthropic's shapes. No I/O, no Qt.

It reads the system prompt, messages with text, tool_use, tool_result and thinking blocks, tools,
tool_choice, thinking, output formats, stop sequences and sampling; fields it does not read are named
in the answer's warnings. Claude Code works against it unchanged.

Every field read, ignored or refused: docs/architecture/server.md.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from app.engine.contract import ChatRequest, ContextOverflow, Reply, SamplingParams
from app.engine.reply_pieces import ANSWER_PIECE, REASONING_PIECE
from app.engine.tool_calls import ToolsError, check_tools
from app.serve.body_check import BadRequest, parse
from app.serve.messages_body import CountTokensBody, MessagesBody, Tool, ToolChoice, signature
from app.serve.messages_body import unsigned as unsigned  # this API's own signature, read back: said here too
from app.serve.surface import Surface, needed_ctx, sse
from app.serve.thinking import Thinking, from_budget, from_effort
from app.serve.unread import unread_fields

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error", 411: "invalid_request_error",
               413: "request_too_large", 415: "invalid_request_error", 429: "rate_limit_error"}
FIELDS = frozenset({
    "model", "messages", "system", "max_tokens", "tools", "tool_choice", "thinking", "output_config",
    "output_format", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream", "cache_control",
    "context_management", "mcp_servers",
    # accepted with no effect (the module's docstring says why)
    "service_tier", "speed", "inference_geo", "container", "diagnostics", "user_profile_id", "workspace_id"})


def _marks_cache(value: Any) -> bool:
    """Whether a `cache_control` stands anywhere in the request (top level, system, tools, blocks)."""
    if isinstance(value, dict):
        return value.get("cache_control") is not None or any(_marks_cache(v) for v in value.values())
    if isinstance(value, list):
        return any(_marks_cache(v) for v in value)
    return False


def _tools(raw: list[Tool] | None, notes: set[str]) -> tuple[list[dict[str, Any]] | None, set[str]]:
    """(the custom tools as the engine's function tools, the names of the server tools left out)."""
    if raw is None:
        return None, set()
    tools = [{"type": "function", "function": t.function} for t in raw if t.function is not None]
    server = {t.server_name for t in raw if t.server_name is not None}
    if server:
        notes.add(f"server tools are not run by this server and were not offered to the model: "
                  f"{', '.join(sorted(server))}")
    try:
        return (check_tools(tools) if tools else None), server
    except ToolsError as exc:
        raise BadRequest(f"tools: {exc}") from None


def _tool_choice(value: ToolChoice | None, tools: list[dict[str, Any]] | None,
                 server: set[str]) -> tuple[list[dict[str, Any]] | None, str | None, bool]:
    """(tools to offer, the call that must be made, at most one call)."""
    if value is None:
        return tools, None, False
    kind, one = value.type, value.disable_parallel_tool_use
    if kind == "none":
        return None, None, one
    if kind == "auto":
        return tools, None, one
    if not tools:
        raise BadRequest(f"tool_choice {kind!r} needs tools")
    if kind == "any":
        return tools, "required", one
    name = value.name
    if name in server:
        raise BadRequest(f"tool_choice names {name!r}, a server tool this server does not run")
    chosen = [t for t in tools if t["function"]["name"] == name]
    if not chosen:
        raise BadRequest(f"tool_choice names {name!r}, which is not among the tools")
    return chosen, name, one


def _thinking(fields: MessagesBody) -> tuple[Thinking, bool]:
    """(the thinking control, whether the thinking text is shown: display "omitted" hides it)."""
    value = fields.thinking
    if value is None:
        return Thinking(False), True  # Anthropic's default: no extended thinking
    shown = value.display != "omitted"
    try:
        if value.type == "disabled":
            return Thinking(False), shown
        if value.type == "enabled":
            return from_budget(value.budget_tokens, "thinking.budget_tokens"), shown
        # adaptive and between_tools: the model decides when, the effort how much (Anthropic's default: high)
        effort = fields.effort
        return from_effort(effort if effort is not None else "high", "output_config.effort"), shown
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


class MessagesSurface(Surface):
    """One `/v1/messages` (or `count_tokens`) request."""

    route = "/v1/messages"
    forced_words = "tool_choice any or tool"

    def __init__(self, body: Any, count_only: bool = False) -> None:
        fields = parse(CountTokensBody if count_only else MessagesBody, body)
        notes: set[str] = set()
        messages = fields.engine_messages(notes)
        tools, server = _tools(fields.tools, notes)
        tools, forced, self.one_call = _tool_choice(fields.tool_choice, tools, server)
        schema = fields.json_schema
        if forced and schema is not None:
            raise BadRequest("a forced tool call and output_config.format cannot be combined")
        thinking, self.show_thinking = _thinking(fields)
        defaults = SamplingParams()
        sampling = SamplingParams(temperature=0.7 if fields.temperature is None else fields.temperature,
                                  top_p=0.9 if fields.top_p is None else fields.top_p,
                                  top_k=defaults.top_k if fields.top_k is None else fields.top_k,
                                  max_tokens=fields.max_tokens or 1, stop=fields.stop_sequences)
        self.request = ChatRequest(messages, enable_thinking=thinking.enabled, tools=tools, sampling=sampling,
                                   json_schema=schema, tool_choice=forced, client="api",
                                   thinking_budget=thinking.budget if thinking.enabled else None,
                                   keep_cache=_marks_cache(body))
        stream = fields.stream
        self.stream = stream and not count_only
        unread = unread_fields(body, FIELDS)
        self.warnings = sorted(notes) + ([unread] if unread else [])
        self.mid = f"msg_{secrets.token_hex(12)}"
        self._open: str | None = None  # the kind of the content block being streamed
        self._index = -1
        self._reasoning: list[str] = []

    @staticmethod
    def error_json(message: str, status: int, code: str = "invalid_request_error") -> dict[str, Any]:
        kind = ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def error_message(self, exc: Exception) -> str:
        if isinstance(exc, ContextOverflow):  # Anthropic's words, which Claude Code reads to compact
            least = "at least " if exc.at_least else ""
            return (f"prompt is too long: {least}{exc.n} tokens > {exc.n_ctx} maximum (the context the model was "
                    f"loaded with); serve it with --ctx {needed_ctx(exc.n)} or more, or shorten the conversation")
        return str(exc)

    # -- the answer -------------------------------------------------------------------------

    def calls(self, reply: Reply) -> list[Any]:
        return reply.tool_calls[:1] if self.one_call else list(reply.tool_calls)

    def stop_reason(self, reply: Reply) -> tuple[str, str | None]:
        if self.calls(reply):
            return "tool_use", None
        if reply.stats.stop_sequence:
            return "stop_sequence", reply.stats.stop_sequence
        if reply.stats.stop_reason == "length":  # cut by max_tokens, or by the context it was cut to fit
            full = reply.stats.generated_tokens < self.request.sampling.max_tokens
            return ("model_context_window_exceeded" if full else "max_tokens"), None
        return "end_turn", None

    def usage(self, reply: Reply) -> dict[str, Any]:
        s = reply.stats
        cached = max(0, s.prompt_tokens - s.prompt_evaluated)
        return {"input_tokens": s.prompt_tokens - cached, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached, "output_tokens": s.generated_tokens}

    def _thinking_block(self, reasoning: str) -> dict[str, Any]:
        return {"type": "thinking", "thinking": reasoning if self.show_thinking else "",
                "signature": signature(reasoning)}

    @staticmethod
    def _tool_block(call: Any) -> dict[str, Any]:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        if call.errors:
            block["x_clover_errors"] = list(call.errors)
        return block

    def complete(self, reply: Reply, model: str) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.reasoning:
            content.append(self._thinking_block(reply.reasoning))
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        content.extend(self._tool_block(c) for c in self.calls(reply))
        reason, sequence = self.stop_reason(reply)
        payload: dict[str, Any] = {"id": self.mid, "type": "message", "role": "assistant", "model": model,
                                   "content": content,
                   "stop_reason": reason, "stop_sequence": sequence, "usage": self.usage(reply)}
        if self.warnings:
            payload["warnings"] = self.warnings
        return payload

    # -- the stream ------------------------------------------------------------------------

    @staticmethod
    def _event(payload: dict[str, Any]) -> bytes:
        return sse(payload, payload["type"])

    def opening(self, model: str, prompt_tokens: int) -> list[bytes]:
        message: dict[str, Any] = {"id": self.mid, "type": "message", "role": "assistant", "model": model,
                                   "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": prompt_tokens, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "output_tokens": 0}}
        return [self._event({"type": "message_start", "message": message}), self._event({"type": "ping"})]

    def _start(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        frames = self._close()
        self._index += 1
        self._open = kind
        return frames + [self._event({"type": "content_block_start", "index": self._index, "content_block": block})]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self._event({"type": "content_block_delta", "index": self._index, "delta": delta})

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        frames = []
        if self._open == "thinking":
            frames.append(self._delta({"type": "signature_delta", "signature": signature("".join(self._reasoning))}))
        frames.append(self._event({"type": "content_block_stop", "index": self._index}))
        self._open = None
        return frames

    def piece(self, kind: str, text: str) -> list[bytes]:
        if kind == REASONING_PIECE:
            frames = [] if self._open == "thinking" else self._start("thinking", {"type": "thinking", "thinking": "",
                                                                                 "signature": ""})
            self._reasoning.append(text)
            if self.show_thinking:
                frames.append(self._delta({"type": "thinking_delta", "thinking": text}))
            return frames
        if kind == ANSWER_PIECE:
            frames = [] if self._open == "text" else self._start("text", {"type": "text", "text": ""})
            return frames + [self._delta({"type": "text_delta", "text": text})]
        return []  # tool calls go out whole at the end, from the reply

    def ending(self, reply: Reply) -> list[bytes]:
        frames = []
        if reply.reasoning and not self._reasoning:  # a reply whose reasoning came without events
            self._reasoning.append(reply.reasoning)
            frames += self._start("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        for call in self.calls(reply):
            block = self._tool_block(call)
            frames += self._start("tool_use", {**{k: v for k, v in block.items() if k != "input"}, "input": {}})
            frames.append(self._delta({"type": "input_json_delta",
                                       "partial_json": json.dumps(call.arguments, ensure_ascii=False)}))
        frames += self._close()
        reason, sequence = self.stop_reason(reply)
        frames.append(self._event({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                   "usage": self.usage(reply)}))
        frames.append(self._event({"type": "message_stop"}))
        return frames

    def failure(self, message: str, status: int) -> list[bytes]:
        return [self._event(self.error_json(message, status))]

