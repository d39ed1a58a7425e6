"""OpenAI's Responses API on the local server (`POST /v1/responses`, `GET /v1/responses/{id}`): a body
(parsed and checked by its Pydantic model, app/serve/responses_body.py) as the engine's request, and the
response object and its stream events in OpenAI's shapes. No I/O but the response store's, no Qt.

It reads `input` as a string or items, instructions, function tools, tool_choice, text formats,
reasoning, `store` and `previous_response_id`, and the sampling fields; fields it does not read are
named in the answer's warnings. Codex works against it unchanged.

Every field read, ignored or refused: docs/architecture/server.md.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from app.engine.contract import ChatRequest, Reply, SamplingParams
from app.engine.reply_pieces import ANSWER_PIECE, REASONING_PIECE
from app.engine.tool_calls import ToolsError, check_tools
from app.serve.body_check import BadRequest, parse
from app.serve.messages_body import signature
from app.serve.response_store import ResponseStore
from app.serve.responses_body import InputItem, ResponsesBody, ResponsesTool
from app.serve.schema import choose_tools
from app.serve.surface import Surface, sse
from app.serve.thinking import Thinking, from_effort
from app.serve.unread import unread_fields

NO_LIMIT = 1 << 30  # max_output_tokens not sent: the engine cuts it to what the context leaves
FIELDS = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "max_output_tokens",
    "temperature", "top_p", "reasoning", "include", "top_logprobs", "store", "previous_response_id",
    "prompt_cache_key", "metadata", "user", "safety_identifier", "service_tier", "truncation", "stream",
    "background", "conversation", "prompt",  # these three: a 400
    "client_metadata"})  # accepted with no effect: Codex's own, naming the client (the module's docstring)


def convert_input(items: list[InputItem], notes: set[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """(system texts, the other messages) of an `input`, as the engine's (OpenAI chat) messages."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    reasoning: list[str] = []  # reasoning items wait for the assistant turn they belong to

    def assistant() -> dict[str, Any]:
        """The assistant message a call or a reasoning joins: the last one, unless a result followed it."""
        if not out or out[-1]["role"] != "assistant":
            out.append({"role": "assistant", "content": ""})
        msg = out[-1]
        if reasoning:
            msg["reasoning_content"] = "\n\n".join(reasoning)
            reasoning.clear()
        return msg

    for item in items:
        notes |= item.notes
        if item.kind == "message":
            if item.role in ("system", "developer"):
                system.append(item.text)
            elif item.role == "assistant":
                msg = assistant()
                msg["content"] = (msg["content"] or "") + item.text
            else:
                out.append({"role": "user", "content": item.text})
        elif item.kind == "call":
            msg = assistant()
            msg.setdefault("tool_calls", []).append({"type": "function", "id": item.call_id,
                                                     "function": {"name": item.name, "arguments": item.arguments}})
        elif item.kind == "result":
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text})
        elif item.text:  # reasoning
            reasoning.append(item.text)
    return system, out


def _tools(raw: list[ResponsesTool] | None,
           notes: set[str]) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """(the function tools as the engine's, as the response lists them)."""
    if raw is None:
        return None, []
    tools = [{"type": "function", "function": t.function} for t in raw if t.function is not None]
    listed = [t.listed for t in raw if t.listed is not None]
    other = {t.other for t in raw if t.other is not None}
    if other:
        notes.add("tools of other types than function are not run by this server and were not offered to the "
                  f"model: {', '.join(sorted(other))}")
    try:
        return (check_tools(tools) if tools else None), listed
    except ToolsError as exc:
        raise BadRequest(f"tools: {exc}") from None


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]] | None, str | None]:
    named = isinstance(value, dict) and value.get("type") == "function"
    return choose_tools(value, tools, value.get("name") if named else None, among="function tools",
                        shape="tool_choice: must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                              "\"name\": ...} (hosted tools are not run by this server)")


class ResponsesSurface(Surface):
    """One `/v1/responses` request."""

    route = "/v1/responses"
    forced_words = "tool_choice"

    def __init__(self, body: Any, store: ResponseStore) -> None:
        fields = parse(ResponsesBody, body)
        self.body, self.store = body, store
        notes: set[str] = set()
        system, messages = convert_input(fields.input, notes)
        previous = fields.previous_response_id
        history: list[dict[str, Any]] = []
        if previous is not None:
            stored = store.get(previous) if isinstance(previous, str) else None
            if stored is None:
                raise BadRequest(f"Previous response with id {previous!r} not found (responses are kept when "
                                 f"created with store true, the latest {store.limit})")
            history = list(stored.get("messages") or [])
        self.history = history + messages  # the conversation without its system prompt: what is stored
        system_text = "\n\n".join(p for p in [fields.instructions or "", *system] if p)
        full = ([{"role": "system", "content": system_text}] if system_text else []) + self.history
        if not self.history:
            raise BadRequest("'input' must hold at least one message")
        tools, self.listed_tools = _tools(fields.tools, notes)
        tools, forced = _tool_choice(fields.tool_choice, tools)
        self.one_call = fields.parallel_tool_calls is False
        schema = fields.json_schema
        if forced and schema is not None:
            raise BadRequest("a forced tool call and text.format cannot be combined")
        effort = fields.effort
        try:
            thinking = Thinking() if effort is None else from_effort(effort, "reasoning.effort")
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        self.encrypted = "reasoning.encrypted_content" in fields.include
        top = fields.top_logprobs
        logprobs = (top or 0) if "message.output_text.logprobs" in fields.include else None
        self.store_it, self.stream = fields.store, fields.stream
        sampling = SamplingParams(temperature=0.7 if fields.temperature is None else fields.temperature,
                                  top_p=0.9 if fields.top_p is None else fields.top_p,
                                  max_tokens=fields.max_output_tokens or NO_LIMIT)
        self.request = ChatRequest(full, enable_thinking=thinking.enabled, tools=tools, sampling=sampling,
                                   json_schema=schema, tool_choice=forced, logprobs=logprobs, client="api",
                                   thinking_budget=thinking.budget if thinking.enabled else None,
                                   keep_cache=bool(fields.prompt_cache_key))
        unread = unread_fields(body, FIELDS)
        self.warnings = sorted(notes) + ([unread] if unread else [])
        self.rid = f"resp_{secrets.token_hex(24)}"
        self.created = int(time.time())
        self.model = ""
        self._seq = 0
        self._items: list[dict[str, Any]] = []  # output items streamed so far (the open one last)
        self._open: str | None = None
        self._text: list[str] = []
        self.response: dict[str, Any] | None = None

    # -- the response object -------------------------------------------------------------------

    def _ids(self) -> dict[str, str]:
        return {"rs": f"rs_{secrets.token_hex(16)}", "msg": f"msg_{secrets.token_hex(16)}",
                "fc": f"fc_{secrets.token_hex(16)}"}

    def calls(self, reply: Reply) -> list[Any]:
        return reply.tool_calls[:1] if self.one_call else list(reply.tool_calls)

    def _reasoning_item(self, rid: str, text: str, status: str = "completed") -> dict[str, Any]:
        item: dict[str, Any] = {"type": "reasoning", "id": rid, "summary": [], "status": status,
                                "content": [{"type": "reasoning_text", "text": text}] if text else []}
        if self.encrypted:
            item["encrypted_content"] = signature(text)
        return item

    @staticmethod
    def _message_item(mid: str, text: str, logprobs: list[dict[str, Any]] | None,
                      status: str = "completed") -> dict[str, Any]:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
        return {"type": "message", "id": mid, "status": status, "role": "assistant", "content": [part]}

    @staticmethod
    def _call_item(call: Any, status: str = "completed") -> dict[str, Any]:
        item = {"type": "function_call", "id": f"fc_{secrets.token_hex(16)}", "call_id": call.id, "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False), "status": status}
        if call.errors:
            item["x_clover_errors"] = list(call.errors)
        return item

    def usage(self, reply: Reply | None) -> dict[str, Any] | None:
        if reply is None:
            return None
        s = reply.stats
        return {"input_tokens": s.prompt_tokens,
                "input_tokens_details": {"cached_tokens": max(0, s.prompt_tokens - s.prompt_evaluated)},
                "output_tokens": s.generated_tokens,
                "output_tokens_details": {"reasoning_tokens": s.reasoning_tokens},
                "total_tokens": s.prompt_tokens + s.generated_tokens}

    def envelope(self, output: list[dict[str, Any]], reply: Reply | None, status: str) -> dict[str, Any]:
        body = self.body
        reasoning: dict[str, Any] = body["reasoning"] if isinstance(body.get("reasoning"), dict) else {}
        payload: dict[str, Any] = {
            "id": self.rid, "object": "response", "created_at": self.created, "status": status, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "model": self.model, "output": output, "parallel_tool_calls": not self.one_call,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "store": self.store_it, "temperature": self.request.sampling.temperature,
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"), "tools": self.listed_tools,
            "top_p": self.request.sampling.top_p, "truncation": body.get("truncation", "disabled"),
            "usage": self.usage(reply), "metadata": body.get("metadata") or {},
            "prompt_cache_key": body.get("prompt_cache_key"), "user": body.get("user")}
        if self.warnings:
            payload["warnings"] = self.warnings
        return payload

    def status(self, reply: Reply) -> str:
        """`incomplete` for a reply the token limit cut (max_output_tokens, or the context's end), while
        thinking or answering alike, unless it ended in calls to run."""
        return "incomplete" if reply.stats.stop_reason == "length" and not self.calls(reply) else "completed"

    def complete(self, reply: Reply, model: str) -> dict[str, Any]:
        """The whole response. A reply cut by the token limit is `incomplete`, its last item too; cut
        while thinking, it has no message item (OpenAI's: output_text is empty, the reasoning says why),
        as its stream has none."""
        self.model = model
        ids = self._ids()
        status = self.status(reply)
        cut = status == "incomplete"
        with_message = bool(reply.text) or not (reply.tool_calls or (cut and reply.reasoning))
        output = []
        if reply.reasoning:
            last = cut and not with_message
            output.append(self._reasoning_item(ids["rs"], reply.reasoning, "incomplete" if last else "completed"))
        if with_message:
            output.append(self._message_item(ids["msg"], reply.text, reply.logprobs,
                                             "incomplete" if cut else "completed"))
        output.extend(self._call_item(c) for c in self.calls(reply))
        self.response = self.envelope(output, reply, status)
        return self.response

    def finished(self, reply: Reply, answer: dict[str, Any] | None) -> None:
        """A stored response keeps the conversation it ends: its history, then its own turn."""
        if not self.store_it or self.response is None:
            return
        turn: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.reasoning:
            turn["reasoning_content"] = reply.reasoning
        calls = self.calls(reply)
        if calls:
            turn["tool_calls"] = [{"type": "function", "id": c.id, "function": {"name": c.name,
                                                                                 "arguments": c.arguments}}
                                  for c in calls]
        self.store.put(self.rid, self.response, self.history + [turn])

    # -- the stream -----------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return sse(payload, kind)

    def opening(self, model: str, prompt_tokens: int) -> list[bytes]:
        self.model = model
        response = self.envelope([], None, "in_progress")
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response)]

    def _add(self, item: dict[str, Any]) -> list[bytes]:
        frames = self._close()
        self._items.append(item)
        return frames + [self._event("response.output_item.added", output_index=len(self._items) - 1, item=item)]

    def _close(self, status: str = "completed") -> list[bytes]:
        """The open reasoning or message item, done (`incomplete` where the token limit cut it)."""
        if self._open is None:
            return []
        index, item = len(self._items) - 1, self._items[-1]
        text = "".join(self._text)
        frames = []
        if self._open == "reasoning":
            frames.append(self._event("response.reasoning_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=text))
            item.update(self._reasoning_item(item["id"], text, status))
        else:
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            frames.append(self._event("response.output_text.done", item_id=item["id"], output_index=index,
                                      content_index=0, text=text, logprobs=[]))
            frames.append(self._event("response.content_part.done", item_id=item["id"], output_index=index,
                                      content_index=0, part=part))
            item.update(self._message_item(item["id"], text, None, status))
        frames.append(self._event("response.output_item.done", output_index=index, item=item))
        self._open, self._text = None, []
        return frames

    def piece(self, kind: str, text: str) -> list[bytes]:
        frames: list[bytes] = []
        if kind not in (REASONING_PIECE, ANSWER_PIECE):
            return frames  # tool calls go out whole at the end, from the reply
        wanted = "reasoning" if kind == REASONING_PIECE else "message"
        if self._open != wanted:
            if wanted == "reasoning":
                frames += self._add({"type": "reasoning", "id": self._ids()["rs"], "summary": [], "content": [],
                                     "status": "in_progress"})
            else:
                item = {"type": "message", "id": self._ids()["msg"], "status": "in_progress", "role": "assistant",
                        "content": []}
                frames += self._add(item)
                frames.append(self._event("response.content_part.added", item_id=item["id"],
                                          output_index=len(self._items) - 1, content_index=0,
                                          part={"type": "output_text", "text": "", "annotations": [],
                                                "logprobs": []}))
            self._open = wanted
        self._text.append(text)
        item_id, index = self._items[-1]["id"], len(self._items) - 1
        if wanted == "reasoning":
            frames.append(self._event("response.reasoning_text.delta", item_id=item_id, output_index=index,
                                      content_index=0, delta=text))
        else:
            frames.append(self._event("response.output_text.delta", item_id=item_id, output_index=index,
                                      content_index=0, delta=text, logprobs=[]))
        return frames

    def ending(self, reply: Reply) -> list[bytes]:
        status = self.status(reply)
        frames = self._close(status)
        if reply.logprobs is not None:  # streamed without them: the whole list goes on the message item
            for item in self._items:
                if item["type"] == "message":
                    item["content"][0]["logprobs"] = reply.logprobs
        for call in self.calls(reply):
            item = self._call_item(call)
            pending = {**item, "arguments": "", "status": "in_progress"}
            frames += self._add(pending)
            index = len(self._items) - 1
            frames.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=index, delta=item["arguments"]))
            frames.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                      output_index=index, name=call.name, arguments=item["arguments"]))
            self._items[-1] = item
            frames.append(self._event("response.output_item.done", output_index=index, item=item))
        self.response = self.envelope(self._items, reply, status)
        frames.append(self._event("response.completed" if status == "completed" else "response.incomplete",
                                  response=self.response))
        return frames

    def failure(self, message: str, status: int) -> list[bytes]:
        code = "server_error" if status >= 500 else "invalid_request"
        response = {**self.envelope(self._items, None, "failed"), "error": {"code": code, "message": message}}
        return [self._event("error", code=code, message=message, param=None),
                self._event("response.failed", response=response)]
