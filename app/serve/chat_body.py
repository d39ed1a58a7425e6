"""A chat-completions body as a Pydantic model: every field the API reads, typed and checked in the
words of a 400 (app/serve/body_check.py), messages as the engine's. What the fields mean for the
engine's request is app/serve/schema.py's. No I/O, no Qt."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from app.serve.body_check import integer, number_in, refused, refused_here

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}  # developer: system; function: tool


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise refused_here("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise refused_here("content must be a string or a list of text parts")


def _tool_calls(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise refused_here("tool_calls must be a list")
    calls = []
    for j, c in enumerate(value):
        if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
            raise refused_here(f"tool_calls[{j}] must be an object with a function")
        fn = c["function"]
        if not isinstance(fn.get("name"), str):
            raise refused_here(f"tool_calls[{j}].function.name must be a string")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args or "{}")
            except ValueError:
                raise refused_here(f"tool_calls[{j}] arguments are not JSON") from None
        if not isinstance(args, dict):
            raise refused_here(f"tool_calls[{j}] arguments must be a JSON object")
        call: dict[str, Any] = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
        if isinstance(c.get("id"), str):
            call["id"] = c["id"]
        calls.append(call)
    return calls


class ChatMessage(BaseModel):
    """One message, as the engine's (OpenAI chat) message: `developer` is read as `system`, a legacy
    `function` result as a tool's, content parts joined, the legacy `function_call` as a call, the
    earlier reasoning under any of the names clients give it as `reasoning_content`."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    reasoning_content: str | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read(cls, m: Any) -> dict[str, Any]:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise refused_here(f"needs a role, one of {sorted(ROLES)}")
        role = {"developer": "system", "function": "tool"}.get(m["role"], m["role"])
        out: dict[str, Any] = {"role": role, "content": _content_text(m.get("content"))}
        if role == "assistant":
            if m.get("tool_calls") is not None:
                out["tool_calls"] = _tool_calls(m["tool_calls"])
            elif m.get("function_call") is not None:  # the legacy form: one call
                out["tool_calls"] = _tool_calls([{"type": "function", "function": m["function_call"]}])
            for key in ("reasoning_content", "reasoning", "thinking"):  # the names clients use for it
                if isinstance(m.get(key), str) and m[key]:
                    out["reasoning_content"] = m[key]
                    break
        if role == "tool":
            out["tool_call_id"] = m.get("tool_call_id", "") if isinstance(m.get("tool_call_id"), str) else ""
            if isinstance(m.get("name"), str):
                out["name"] = m["name"]
        return out

    def engine(self) -> dict[str, Any]:
        """The message as the engine takes it (no key for what it does not have)."""
        return self.model_dump(exclude_none=True, include={"role", "content", "tool_calls", "reasoning_content",
                                                           "tool_call_id", "name"})


def _number_between(value: Any, name: str, lo: float, hi: float) -> float | None:
    """None (not sent: the default) or the number; refused outside [lo, hi] or not a number."""
    if value is None:
        return None
    if not number_in(value, lo, hi):
        raise refused(f"'{name}' must be a number from {lo} to {hi}")
    return float(value)


NUMBERS = {"temperature": (0, 2), "top_p": (0, 1), "min_p": (0, 1), "repeat_penalty": (0, 2),
           "frequency_penalty": (-2, 2), "presence_penalty": (-2, 2)}


class ChatBody(BaseModel):
    """A chat-completions body. None is a field not sent; app/serve/schema.py gives the defaults."""

    model_config = ConfigDict(extra="allow")

    messages: list[ChatMessage]
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    n: Any = None
    max_tokens: Any = None
    max_completion_tokens: Any = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: Any = None
    prompt_cache_key: Any = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _has_messages(cls, body: Any) -> Any:
        if isinstance(body, dict) and "messages" not in body:
            raise refused("'messages' must be a non-empty list")
        return body

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, value: Any) -> Any:
        if not isinstance(value, list) or not value:
            raise refused("'messages' must be a non-empty list")
        return value

    @field_validator("parallel_tool_calls", "logprobs", "stream", mode="before")
    @classmethod
    def _true_or_false(cls, value: Any, info: Any) -> Any:
        if (value is not None or info.field_name == "stream") and not isinstance(value, bool):
            raise refused(f"'{info.field_name}' must be true or false")  # stream: null too, as before
        return value

    @field_validator("response_format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise refused("response_format must be an object")
        return value

    @field_validator(*NUMBERS, mode="before")
    @classmethod
    def _number(cls, value: Any, info: Any) -> float | None:
        lo, hi = NUMBERS[info.field_name]
        return _number_between(value, info.field_name, lo, hi)

    @field_validator("top_k", mode="before")
    @classmethod
    def _top_k(cls, value: Any) -> Any:
        if value is not None and (not integer(value) or value < 0):
            raise refused("'top_k' must be a non-negative integer (0: no limit)")
        return value

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _logit_bias(cls, value: Any) -> tuple[tuple[int, float], ...]:
        """OpenAI's {"token id": bias from -100 to 100} as (token, bias) pairs."""
        if value is None:
            return ()
        if not isinstance(value, dict):
            raise refused("'logit_bias' must be an object mapping token ids to a bias from -100 to 100")
        out = []
        for key, bias in value.items():
            if not (isinstance(key, str) and key.isascii() and key.isdigit()):
                raise refused(f"logit_bias: {key!r} is not a token id (a non-negative integer)")
            if not isinstance(bias, (int, float)) or isinstance(bias, bool) or not -100 <= bias <= 100:
                raise refused(f"logit_bias[{key!r}] must be a number from -100 to 100")
            out.append((int(key), float(bias)))
        return tuple(out)

    @field_validator("n", mode="before")
    @classmethod
    def _one_choice(cls, value: Any) -> Any:
        if value is not None and value != 1:
            raise refused("'n' must be 1: one model answers one choice per request (as llama-server)")
        return value

    @field_validator("stop", mode="before")
    @classmethod
    def _stop(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if value is not None and (not isinstance(value, list) or not all(isinstance(s, str) and s for s in value)
                                  or len(value) > 16):
            raise refused("'stop' must be a string or a list of up to 16 non-empty strings")
        return tuple(value or ())

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, value: Any) -> Any:
        if value is not None and (not integer(value) or not 0 <= value < 2**32):
            raise refused("'seed' must be an integer from 0 to 2**32-1")
        return value

    @field_validator("top_logprobs", mode="before")
    @classmethod
    def _top_logprobs(cls, value: Any) -> Any:
        if value is not None and (not integer(value) or not 0 <= value <= 20):
            raise refused("'top_logprobs' must be an integer from 0 to 20")
        return value

    @field_validator("chat_template_kwargs", mode="before")
    @classmethod
    def _template_kwargs(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise refused("'chat_template_kwargs' must be an object")
        if value is not None and "enable_thinking" in value and value["enable_thinking"] is not None \
                and not isinstance(value["enable_thinking"], bool):
            raise refused("chat_template_kwargs.enable_thinking must be true or false")
        return value

    @field_validator("stream_options", mode="before")
    @classmethod
    def _stream_options(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise refused("'stream_options' must be an object")
        if value is not None and not isinstance(value.get("include_usage", False), bool):
            raise refused("stream_options.include_usage must be true or false")
        return value

    @model_validator(mode="after")
    def _together(self) -> ChatBody:
        """The checks of one field against another."""
        name = self.limit_name
        value = getattr(self, name)
        if value is not None and (not integer(value) or value < 1):
            raise refused(f"'{name}' must be a positive integer")
        if self.top_logprobs and not self.logprobs:
            raise refused("'top_logprobs' needs 'logprobs': true")
        if self.stream_options is not None and not self.stream:
            raise refused("'stream_options' is only allowed when 'stream' is true")
        return self

    @property
    def limit_name(self) -> str:
        """The field that holds the reply's token limit: max_completion_tokens, else max_tokens."""
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    @property
    def limit(self) -> int | None:
        value = getattr(self, self.limit_name)
        return value if isinstance(value, int) else None

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage", False))
