"""A Responses body as a Pydantic model: every field the API reads, typed and checked in the words of a
400 (app/serve/body_check.py), each `input` item read into one shape. What the fields mean for the
engine's request (the items as its messages, the previous response's turns, the tools offered) is
app/serve/openai_responses.py's. No I/O, no Qt."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from app.serve.body_check import integer, number_in, refused, refused_here
from app.serve.messages_body import IMAGE_TEXT, IMAGES_WARNING, unsigned

TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal")
ITEM_TYPES = ("message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, "
              "reasoning")


def parts_text(content: Any, notes: set[str], tail: str) -> str:
    """A string or a list of parts as text (images, files and audio become a note); `tail`: where the
    content stands in the item (".content", ".output")."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise refused_here("content must be a string or a list of parts", tail)
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            text = part.get("text", part.get("refusal"))
            if not isinstance(text, str):
                raise refused_here(f"a {kind} part needs its text", f"{tail}[{j}]")
            parts.append(text)
        elif kind in ("input_image", "input_file", "input_audio"):
            parts.append(IMAGE_TEXT)
            notes.add(IMAGES_WARNING)
        else:
            raise refused_here(f"a {kind!r} part is not supported", f"{tail}[{j}]")
    return "".join(parts)


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        args = json.loads(value or "{}") if isinstance(value, str) else None
    except ValueError:
        raise refused_here("not JSON", ".arguments") from None
    if not isinstance(args, dict):
        raise refused_here("must be a JSON object", ".arguments")
    return args


def _reasoning_text(item: dict[str, Any]) -> str:
    """An earlier reasoning item's text: its content, else this server's encrypted_content, else its summary."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list):
            text = "".join(p.get("text", "") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
            if text:
                return text
            if key == "content":
                text = unsigned(item.get("encrypted_content"))
                if text:
                    return text
    return unsigned(item.get("encrypted_content"))


class InputItem(BaseModel):
    """One `input` item in one shape: `kind` message (its `role` and `text`), call (`call_id`, `name`,
    `arguments`), result (`call_id`, its output as `text`) or reasoning (`text`)."""

    model_config = ConfigDict(extra="allow")

    kind: str
    role: str = ""
    text: str = ""
    call_id: str = ""
    name: str = ""
    arguments: dict[str, Any] = {}
    notes: set[str] = set()  # what the answer's X-Clover-Warning says of it

    @model_validator(mode="before")
    @classmethod
    def _read(cls, item: Any) -> dict[str, Any]:
        if not isinstance(item, dict):
            raise refused_here("must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        notes: set[str] = set()
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise refused_here("must be user, assistant, system or developer", ".role")
            return {"kind": "message", "role": role, "text": parts_text(item.get("content"), notes, ".content"),
                    "notes": notes}
        if kind in ("function_call", "custom_tool_call"):
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise refused_here(f"a {kind} needs its call_id and name")
            args = (_arguments(item.get("arguments")) if kind == "function_call"
                    else {"input": item.get("input") if isinstance(item.get("input"), str) else ""})
            return {"kind": "call", "call_id": call_id, "name": name, "arguments": args}
        if kind in ("function_call_output", "custom_tool_call_output"):
            if not isinstance(item.get("call_id"), str):
                raise refused_here(f"a {kind} needs the call_id of its call")
            return {"kind": "result", "call_id": item["call_id"],
                    "text": parts_text(item.get("output"), notes, ".output"), "notes": notes}
        if kind == "reasoning":
            return {"kind": "reasoning", "text": _reasoning_text(item)}
        raise refused_here(f"items of type {kind!r} are not supported ({ITEM_TYPES})")


class ResponsesTool(BaseModel):
    """One of `tools`: a function tool (as the engine's, and as the response lists it) or another
    type's name (not offered to the model)."""

    model_config = ConfigDict(extra="allow")

    function: dict[str, Any] | None = None
    listed: dict[str, Any] | None = None
    other: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read(cls, t: Any) -> dict[str, Any]:
        if not isinstance(t, dict):
            raise refused_here("must be an object")
        if t.get("type") != "function":
            return {"other": str(t.get("type")) + (f" {t['name']}" if isinstance(t.get("name"), str) else "")}
        fn = {"name": t.get("name"), "parameters": t.get("parameters") or {"type": "object", "properties": {}}}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        return {"function": fn, "listed": t}


def _text_format_schema(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema `text.format` holds the answer to (None: free text); refused if it holds none."""
    fmt = (text or {}).get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise refused("text.format.schema: must be a JSON schema object")
        return fmt["schema"]
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "object"}
    raise refused("text.format: must be {\"type\": \"text\" | \"json_schema\" | \"json_object\"}")


NUMBERS = {"temperature": (0, 2), "top_p": (0, 1)}


class ResponsesBody(BaseModel):
    """A `/v1/responses` body, in the order its checks are said. None is a field not sent."""

    model_config = ConfigDict(extra="allow")

    background: Any = None
    conversation: Any = None
    prompt: Any = None
    input: list[InputItem]
    instructions: str | None = None
    previous_response_id: Any = None
    tools: list[ResponsesTool] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] = []
    top_logprobs: int | None = None
    store: bool = True
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    prompt_cache_key: Any = None

    @model_validator(mode="before")
    @classmethod
    def _has_input(cls, body: Any) -> Any:
        if isinstance(body, dict) and "input" not in body:
            raise refused_here("must be a string or a list of items", "input")
        return body

    @field_validator("background", "conversation", "prompt", mode="before")
    @classmethod
    def _not_supported(cls, value: Any, info: Any) -> Any:
        if value:
            raise refused(f"'{info.field_name}' is not supported by this server")
        return value

    @field_validator("input", mode="before")
    @classmethod
    def _input(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [{"type": "message", "role": "user", "content": value}]
        if not isinstance(value, list):
            raise refused_here("must be a string or a list of items")
        return value

    @field_validator("instructions", mode="before")
    @classmethod
    def _instructions(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise refused("'instructions' must be a string")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, list):
            raise refused_here("must be a list")
        return value

    @field_validator("parallel_tool_calls", mode="before")
    @classmethod
    def _parallel(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, bool):
            raise refused("'parallel_tool_calls' must be true or false")
        return value

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise refused_here("must be an object")
        _text_format_schema(value)
        return value

    @field_validator("max_output_tokens", mode="before")
    @classmethod
    def _limit(cls, value: Any) -> Any:
        if value is not None and (not integer(value) or value < 1):
            raise refused("'max_output_tokens' must be a positive integer")
        return value

    @field_validator("reasoning", mode="before")
    @classmethod
    def _reasoning(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise refused("'reasoning' must be an object")
        return value

    @field_validator("include", mode="before")
    @classmethod
    def _include(cls, value: Any) -> Any:
        value = value or []
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise refused("'include' must be a list of strings")
        return value

    @field_validator("top_logprobs", mode="before")
    @classmethod
    def _top(cls, value: Any) -> Any:
        if value is not None and (not integer(value) or not 0 <= value <= 20):
            raise refused("'top_logprobs' must be an integer from 0 to 20")
        return value

    @field_validator("store", "stream", mode="before")
    @classmethod
    def _true_or_false(cls, value: Any, info: Any) -> Any:
        if not isinstance(value, bool):
            raise refused(f"'{info.field_name}' must be true or false")
        return value

    @field_validator(*NUMBERS, mode="before")
    @classmethod
    def _number(cls, value: Any, info: Any) -> Any:
        lo, hi = NUMBERS[info.field_name]
        if value is not None and not number_in(value, lo, hi):
            raise refused(f"'{info.field_name}' must be a number from {lo} to {hi}")
        return value

    @property
    def json_schema(self) -> dict[str, Any] | None:
        return _text_format_schema(self.text)

    @property
    def effort(self) -> Any:
        return (self.reasoning or {}).get("effort")
