"""The OpenAI chat-completions schema, on the server's side: a request body (parsed and checked by its
Pydantic model, app/serve/chat_body.py) as the engine's request, every parameter applied or refused
with a 400, and replies shaped as OpenAI's JSON. No I/O.

Read: `messages`, `tools`, `tool_choice`, `parallel_tool_calls`, the legacy `functions` and
`function_call`, `response_format`, `temperature`, `top_p`, `top_k`, `min_p`, `repeat_penalty`
(llama-server's and llama-cpp-python's own), `frequency_penalty`, `presence_penalty`, `logit_bias`,
`max_tokens` / `max_completion_tokens` (cut to what the context leaves), `stop`, `seed`, `logprobs`,
`top_logprobs`, `chat_template_kwargs`, `reasoning_effort`, `prompt_cache_key` (marks the prefixes to
keep, app/engine/prompt_cache.py), `stream`, `stream_options`; `n` above 1 is a 400. Accepted with no
effect: `model` (the server answers with its own), `user`, `safety_identifier`, `metadata`, `store`
(nothing is kept: the answer is not stored), `service_tier`. Any other top-level field is named in
the answer's `X-Clover-Warning` (app/serve/unread.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.engine.contract import ChatRequest, Reply, SamplingParams
from app.engine.reply_pieces import ANSWER_PIECE, REASONING_PIECE
from app.engine.tool_calls import ToolCall, ToolsError, check_tools
from app.serve.body_check import BadRequest, parse
from app.serve.chat_body import ChatBody
from app.serve.thinking import from_effort
from app.serve.unread import unread_fields

FIELDS = frozenset({
    "messages", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "response_format",
    "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "frequency_penalty", "presence_penalty",
    "logit_bias", "n", "max_tokens", "max_completion_tokens", "stop", "seed", "logprobs", "top_logprobs",
    "chat_template_kwargs", "reasoning_effort", "prompt_cache_key", "stream", "stream_options",
    # accepted with no effect (the module's docstring says why)
    "model", "user", "safety_identifier", "metadata", "store", "service_tier"})
TOOLS_UNREAD = ("tools were not shown to the model: its chat template does not read tools, so the model "
                "answers without knowing them")


def choose_tools(value: Any, tools: list[dict[str, Any]] | None, name: str | None, *, what: str = "tool_choice",
                 among: str = "tools", shape: str = "") -> tuple[list[dict[str, Any]] | None, str | None]:
    """(tools to offer, the call that must be made: None, "required", or a function name), for
    chat completions' and Responses' `tool_choice` alike: `name` is the function a named choice asks
    for (each API spells that object its own way; None when `value` names none), `among` what the
    tools are called in the errors, `shape` the error for a value of no known form."""
    if value is None or value == "auto":
        return tools, None
    if value == "none":
        return None, None
    if value == "required":
        if not tools:
            raise BadRequest(f"tool_choice 'required' needs {among}")
        return tools, "required"
    if name is not None:
        chosen = [t for t in tools or () if t["function"]["name"] == name]
        if not chosen:
            raise BadRequest(f"{what} names {name!r}, which is not among the {among}")
        return chosen, name
    raise BadRequest(shape)


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None,
                 what: str = "tool_choice") -> tuple[list[dict[str, Any]] | None, str | None]:
    named = isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict)
    return choose_tools(value, tools, value["function"].get("name") if named else None, what=what,
                        among="functions" if what == "function_call" else "tools",
                        shape="tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                              "\"function\": {\"name\": ...}}")


def _legacy_functions(fields: ChatBody) -> tuple[Any, Any]:
    """The legacy `functions` and `function_call` as `tools` and `tool_choice` (or the body's own)."""
    functions, call = fields.functions, fields.function_call
    if functions is None:
        if call is not None:
            raise BadRequest("'function_call' needs 'functions' (with 'tools', use 'tool_choice')")
        return fields.tools, fields.tool_choice
    if fields.tools is not None or fields.tool_choice is not None:
        raise BadRequest("'functions' and 'function_call' (the legacy form) cannot be mixed with 'tools' and "
                         "'tool_choice'")
    if not isinstance(functions, list):
        raise BadRequest("'functions' must be a list of function definitions")
    tools = [{"type": "function", "function": f} for f in functions]
    if call is None or call in ("auto", "none"):
        return tools, call
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        return tools, {"type": "function", "function": {"name": call["name"]}}
    raise BadRequest("function_call must be 'none', 'auto' or {\"name\": ...}")


@dataclass(frozen=True)
class ParsedRequest:
    """A chat-completions body: the engine's request and how to answer it."""

    request: ChatRequest
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a usage-only chunk ends the stream
    one_call: bool = False  # parallel_tool_calls false, or the legacy functions: at most one call is returned
    legacy_functions: bool = False  # the request used `functions`: the call is answered as `function_call`
    logit_bias: tuple[tuple[int, float], ...] = ()
    warnings: tuple[str, ...] = ()  # for the answer's X-Clover-Warning: fields it does not read


def parse_request(body: Any) -> tuple[ChatRequest, bool]:
    """An OpenAI chat-completions body as the engine's request, and whether to stream."""
    parsed = parse_body(body)
    return parsed.request, parsed.stream


def parse_body(body: Any) -> ParsedRequest:
    """An OpenAI chat-completions body, checked (app/serve/chat_body.py): every parameter is applied or
    refused with a 400."""
    fields = parse(ChatBody, body)
    messages = [m.engine() for m in fields.messages]
    legacy = fields.functions is not None
    raw_tools, choice = _legacy_functions(fields)
    tools = None
    if raw_tools:
        try:
            tools = check_tools(raw_tools)
        except ToolsError as exc:
            raise BadRequest(f"'{'functions' if legacy else 'tools'}': {exc}") from None
    tools, forced = _tool_choice(choice, tools, "function_call" if legacy else "tool_choice")
    schema = None
    fmt = fields.response_format
    if fmt is not None:
        if fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema")
            if not isinstance(schema, dict):
                raise BadRequest("response_format.json_schema.schema must be a JSON schema object")
        elif fmt.get("type") == "json_object":
            schema = {"type": "object"}
        elif fmt.get("type") not in (None, "text"):
            raise BadRequest(f"response_format type {fmt.get('type')!r} is not supported")
    if forced and schema is not None:
        raise BadRequest("a forced tool call and response_format cannot be combined")
    kwargs = dict(fields.chat_template_kwargs or {})
    thinking = kwargs.pop("enable_thinking", None)
    budget = None
    effort = fields.reasoning_effort
    if effort is not None:
        try:
            control = from_effort(effort, "'reasoning_effort'")
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if thinking is not None and thinking != control.enabled:
            raise BadRequest(f"chat_template_kwargs.enable_thinking {str(thinking).lower()} and reasoning_effort "
                             f"{effort!r} disagree")
        thinking, budget = control.enabled, control.budget
    reserved = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"} & set(kwargs)
    if reserved:
        raise BadRequest(f"chat_template_kwargs cannot set {', '.join(sorted(reserved))}")
    defaults = SamplingParams()

    def given(value: float | None, default: float) -> float:
        return default if value is None else value

    sampling = SamplingParams(temperature=given(fields.temperature, 0.7), top_p=given(fields.top_p, 0.9),
                              top_k=defaults.top_k if fields.top_k is None else fields.top_k,
                              min_p=given(fields.min_p, defaults.min_p),
                              repeat_penalty=given(fields.repeat_penalty, defaults.repeat_penalty),
                              max_tokens=fields.limit or defaults.max_tokens, stop=fields.stop, seed=fields.seed,
                              frequency_penalty=given(fields.frequency_penalty, 0.0),
                              presence_penalty=given(fields.presence_penalty, 0.0), logit_bias=fields.logit_bias)
    top = fields.top_logprobs
    request = ChatRequest(messages, enable_thinking=thinking, tools=tools, sampling=sampling, json_schema=schema,
                          template_kwargs=kwargs, tool_choice=forced,
                          logprobs=(top or 0) if fields.logprobs else None,
                          client="api", thinking_budget=budget, keep_cache=bool(fields.prompt_cache_key))
    unread = unread_fields(body, FIELDS)
    return ParsedRequest(request, fields.stream, fields.include_usage,
                         one_call=fields.parallel_tool_calls is False or legacy, legacy_functions=legacy,
                         logit_bias=fields.logit_bias, warnings=(unread,) if unread else ())


def finish_reason(reply: Reply, calls: list[ToolCall], legacy: bool = False) -> str:
    if calls:
        return "function_call" if legacy else "tool_calls"
    return "length" if reply.stats.stop_reason == "length" else "stop"


def returned_calls(reply: Reply, parsed: ParsedRequest) -> list[ToolCall]:
    """The calls to answer with: the first only when the client allows one (parallel_tool_calls false,
    or the legacy `function_call`, which holds one)."""
    return reply.tool_calls[:1] if parsed.one_call else list(reply.tool_calls)


def call_json(call: ToolCall) -> dict[str, Any]:
    """A call in OpenAI's shape; one that did not validate against its tool's schema (or did not parse)
    carries the violations in `x_clover_errors`, so a client never takes it for a valid call."""
    out = call.as_openai()
    if call.errors:
        out["x_clover_errors"] = list(call.errors)
    return out


def function_call_json(call: ToolCall) -> dict[str, Any]:
    """The legacy `function_call` shape of a call."""
    out = dict(call.as_openai()["function"])
    if call.errors:
        out["x_clover_errors"] = list(call.errors)
    return out


def usage_json(reply: Reply) -> dict[str, Any]:
    s = reply.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": max(0, s.prompt_tokens - s.prompt_evaluated)}}


def logprobs_json(reply: Reply) -> dict[str, Any] | None:
    if reply.logprobs is None:
        return None
    return {"content": reply.logprobs, "refusal": None}


def completion_json(reply: Reply, parsed: ParsedRequest, cid: str, created: int, model: str,
                    warnings: list[str]) -> dict[str, Any]:
    """A whole reply as a `chat.completion` object."""
    calls = returned_calls(reply, parsed)
    message: dict[str, Any] = {"role": "assistant", "content": None if calls and not reply.text else reply.text}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if calls and parsed.legacy_functions:
        message["function_call"] = function_call_json(calls[0])
    elif calls:
        message["tool_calls"] = [call_json(c) for c in calls]
    payload: dict[str, Any] = {
        "id": cid, "object": "chat.completion", "created": created, "model": model, "usage": usage_json(reply),
        "choices": [{"index": 0, "message": message, "logprobs": logprobs_json(reply),
                     "finish_reason": finish_reason(reply, calls, parsed.legacy_functions)}]}
    if warnings:
        payload["warnings"] = warnings
    return payload


class Chunks:
    """A stream's `chat.completion.chunk` objects. OpenAI: with include_usage, every chunk has
    "usage": null and a last chunk with no choices carries the usage; without it, no chunk mentions
    usage."""

    def __init__(self, parsed: ParsedRequest, cid: str, created: int, model: str) -> None:
        self.parsed, self.cid, self.created, self.model = parsed, cid, created, model
        self._usage: dict[str, Any] = {"usage": None} if parsed.include_usage else {}

    def chunk(self, choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"id": self.cid, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": choices, **self._usage, **(extra or {})}

    def delta(self, delta: dict[str, Any], finish: str | None = None, extra: dict[str, Any] | None = None,
              logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if logprobs is not None:
            choice["logprobs"] = {"content": logprobs}
        return self.chunk([choice], extra)

    def role(self, warnings: list[str]) -> dict[str, Any]:
        """The first chunk: the role (and the warnings, when there are some)."""
        return self.delta({"role": "assistant", "content": ""}, extra={"warnings": warnings} if warnings else None)

    def event(self, kind: str, text: str) -> dict[str, Any] | None:
        """An engine event as a chunk: reasoning or answer text (tool calls come whole at the end)."""
        if kind == REASONING_PIECE:
            return self.delta({"reasoning_content": text})
        if kind == ANSWER_PIECE:
            return self.delta({"content": text})
        return None

    def ending(self, reply: Reply) -> list[dict[str, Any]]:
        """The chunks after the text: the calls, the finish reason, the usage-only chunk."""
        calls = returned_calls(reply, self.parsed)
        out = []
        if calls and self.parsed.legacy_functions:
            out.append(self.delta({"function_call": function_call_json(calls[0])}))
        else:
            out.extend(self.delta({"tool_calls": [{"index": i, **call_json(call)}]}) for i, call in enumerate(calls))
        out.append(self.delta({}, finish_reason(reply, calls, self.parsed.legacy_functions)))
        if self.parsed.include_usage:
            out.append(self.chunk([], {"usage": usage_json(reply)}))
        return out


def error_json(message: str, status: int, code: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": status}}
