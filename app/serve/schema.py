"""The OpenAI chat-completions schema, on the server's side: a request body parsed and checked
(every parameter applied or refused with a 400), and replies shaped as OpenAI's JSON. No I/O.

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

import json
from dataclasses import dataclass
from typing import Any

from app.engine.contract import ChatRequest, Reply, SamplingParams
from app.engine.reply_pieces import ANSWER_PIECE, REASONING_PIECE
from app.engine.tool_calls import ToolCall, ToolsError, check_tools
from app.serve.thinking import from_effort
from app.serve.unread import unread_fields

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}  # developer: system; function: tool
FIELDS = frozenset({
    "messages", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "response_format",
    "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "frequency_penalty", "presence_penalty",
    "logit_bias", "n", "max_tokens", "max_completion_tokens", "stop", "seed", "logprobs", "top_logprobs",
    "chat_template_kwargs", "reasoning_effort", "prompt_cache_key", "stream", "stream_options",
    # accepted with no effect (the module's docstring says why)
    "model", "user", "safety_identifier", "metadata", "store", "service_tier"})
TOOLS_UNREAD = ("tools were not shown to the model: its chat template does not read tools, so the model "
                "answers without knowing them")


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.code = status, code


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise BadRequest(f"{where}: only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise BadRequest(f"{where}: content must be a string or a list of text parts")


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise BadRequest(f"{where}: tool_calls must be a list")
    calls = []
    for j, c in enumerate(value):
        if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
            raise BadRequest(f"{where}: tool_calls[{j}] must be an object with a function")
        fn = c["function"]
        if not isinstance(fn.get("name"), str):
            raise BadRequest(f"{where}: tool_calls[{j}].function.name must be a string")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args or "{}")
            except ValueError:
                raise BadRequest(f"{where}: tool_calls[{j}] arguments are not JSON") from None
        if not isinstance(args, dict):
            raise BadRequest(f"{where}: tool_calls[{j}] arguments must be a JSON object")
        call: dict[str, Any] = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
        if isinstance(c.get("id"), str):
            call["id"] = c["id"]
        calls.append(call)
    return calls


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"{where}: needs a role, one of {sorted(ROLES)}")
        # OpenAI's clients send the system prompt as "developer" now; a legacy "function" result is a tool's
        role = {"developer": "system", "function": "tool"}.get(m["role"], m["role"])
        msg: dict[str, Any] = {"role": role, "content": _content_text(m.get("content"), where)}
        if role == "assistant":
            if m.get("tool_calls") is not None:
                msg["tool_calls"] = _tool_calls(m["tool_calls"], where)
            elif m.get("function_call") is not None:  # the legacy form: one call
                msg["tool_calls"] = _tool_calls([{"type": "function", "function": m["function_call"]}], where)
            for key in ("reasoning_content", "reasoning", "thinking"):  # the names clients use for it
                if isinstance(m.get(key), str) and m[key]:
                    msg["reasoning_content"] = m[key]
                    break
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id", "") if isinstance(m.get("tool_call_id"), str) else ""
            if isinstance(m.get("name"), str):
                msg["name"] = m["name"]
        out.append(msg)
    return out


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


def _legacy_functions(body: dict[str, Any]) -> tuple[Any, Any]:
    """The legacy `functions` and `function_call` as `tools` and `tool_choice` (or the body's own)."""
    functions, call = body.get("functions"), body.get("function_call")
    if functions is None:
        if call is not None:
            raise BadRequest("'function_call' needs 'functions' (with 'tools', use 'tool_choice')")
        return body.get("tools"), body.get("tool_choice")
    if body.get("tools") is not None or body.get("tool_choice") is not None:
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


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """OpenAI's `logit_bias` ({"token id": bias from -100 to 100}) as (token, bias) pairs, checked."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise BadRequest("'logit_bias' must be an object mapping token ids to a bias from -100 to 100")
    out = []
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise BadRequest(f"logit_bias: {key!r} is not a token id (a non-negative integer)")
        if not isinstance(bias, (int, float)) or isinstance(bias, bool) or not -100 <= bias <= 100:
            raise BadRequest(f"logit_bias[{key!r}] must be a number from -100 to 100")
        out.append((int(key), float(bias)))
    return tuple(out)


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
    """An OpenAI chat-completions body, checked: every parameter is applied or refused with a 400."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    messages = _messages(body.get("messages"))
    legacy = body.get("functions") is not None
    raw_tools, choice = _legacy_functions(body)
    tools = None
    if raw_tools:
        try:
            tools = check_tools(raw_tools)
        except ToolsError as exc:
            raise BadRequest(f"'{'functions' if legacy else 'tools'}': {exc}") from None
    tools, forced = _tool_choice(choice, tools, "function_call" if legacy else "tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise BadRequest("'parallel_tool_calls' must be true or false")
    schema = None
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema")
            if not isinstance(schema, dict):
                raise BadRequest("response_format.json_schema.schema must be a JSON schema object")
        elif fmt.get("type") == "json_object":
            schema = {"type": "object"}
        elif fmt.get("type") not in (None, "text"):
            raise BadRequest(f"response_format type {fmt.get('type')!r} is not supported")
    elif fmt is not None:
        raise BadRequest("response_format must be an object")
    if forced and schema is not None:
        raise BadRequest("a forced tool call and response_format cannot be combined")

    def number(name: str, default: float, lo: float, hi: float) -> float:
        value = body.get(name, default)
        if value is None:
            return default
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not lo <= value <= hi:
            raise BadRequest(f"'{name}' must be a number from {lo} to {hi}")
        return float(value)

    n = body.get("n")
    if n is not None and n != 1:
        raise BadRequest("'n' must be 1: one model answers one choice per request (as llama-server)")
    limit_name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(limit_name)
    if max_tokens is None:
        max_tokens = SamplingParams().max_tokens
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest(f"'{limit_name}' must be a positive integer")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)
                             or len(stop) > 16):
        raise BadRequest("'stop' must be a string or a list of up to 16 non-empty strings")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32):
        raise BadRequest("'seed' must be an integer from 0 to 2**32-1")
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise BadRequest("'logprobs' must be true or false")
    top = body.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20):
        raise BadRequest("'top_logprobs' must be an integer from 0 to 20")
    if top and not logprobs:
        raise BadRequest("'top_logprobs' needs 'logprobs': true")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise BadRequest("'chat_template_kwargs' must be an object")
    thinking = kwargs.pop("enable_thinking", None)
    if thinking is not None and not isinstance(thinking, bool):
        raise BadRequest("chat_template_kwargs.enable_thinking must be true or false")
    budget = None
    effort = body.get("reasoning_effort")
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
    top_k = body.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0):
        raise BadRequest("'top_k' must be a non-negative integer (0: no limit)")
    defaults = SamplingParams()
    sampling = SamplingParams(temperature=number("temperature", 0.7, 0, 2), top_p=number("top_p", 0.9, 0, 1),
                              top_k=defaults.top_k if top_k is None else top_k,
                              min_p=number("min_p", defaults.min_p, 0, 1),
                              repeat_penalty=number("repeat_penalty", defaults.repeat_penalty, 0, 2),
                              max_tokens=max_tokens, stop=tuple(stop or ()), seed=seed,
                              frequency_penalty=number("frequency_penalty", 0.0, -2, 2),
                              presence_penalty=number("presence_penalty", 0.0, -2, 2),
                              logit_bias=_logit_bias(body.get("logit_bias")))
    request = ChatRequest(messages, enable_thinking=thinking, tools=tools, sampling=sampling, json_schema=schema,
                          template_kwargs=kwargs, tool_choice=forced, logprobs=(top or 0) if logprobs else None,
                          client="api", thinking_budget=budget, keep_cache=bool(body.get("prompt_cache_key")))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise BadRequest("'stream_options' is only allowed when 'stream' is true")
        if not isinstance(options, dict):
            raise BadRequest("'stream_options' must be an object")
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise BadRequest("stream_options.include_usage must be true or false")
    unread = unread_fields(body, FIELDS)
    return ParsedRequest(request, stream, include_usage, one_call=parallel is False or legacy,
                         legacy_functions=legacy, logit_bias=_logit_bias(body.get("logit_bias")),
                         warnings=(unread,) if unread else ())


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
