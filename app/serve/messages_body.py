"""An Anthropic Messages body as a Pydantic model: every field the API reads, typed and checked in the
words of a 400 (app/serve/body_check.py), its turns as the engine's (OpenAI-shaped) messages. What the
fields mean for the engine's request is app/serve/anthropic_messages.py's. No I/O, no Qt.

A `/v1/messages/count_tokens` body is the same but for `max_tokens`, which it need not send."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator, model_validator

from app.serve.body_check import integer, number_in, refused_here

SIGNATURE = "clover1:"  # a thinking block's signature: this prefix, then the reasoning in base64
IMAGE_TEXT = "[image not shown: this model reads text only]"
IMAGES_WARNING = "images and documents were not shown to the model: it reads text only (each is a note in its place)"
MAX_STOPS = 64


def signature(reasoning: str) -> str:
    return SIGNATURE + base64.b64encode(reasoning.encode()).decode()


def unsigned(sig: Any) -> str:
    """The reasoning a signature of this server's carries ("" for another's)."""
    if not isinstance(sig, str) or not sig.startswith(SIGNATURE):
        return ""
    try:
        return base64.b64decode(sig[len(SIGNATURE):], validate=True).decode()
    except (ValueError, binascii.Error):
        return ""


def text_of(content: Any, notes: set[str], tail: str = "") -> str:
    """A string or a list of blocks as text (image and document blocks become a note); `tail`: where
    the content stands inside the value checked."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise refused_here("content must be a string or a list of content blocks", tail)
    parts = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind in ("image", "document"):
            parts.append(IMAGE_TEXT)
            notes.add(IMAGES_WARNING)
        else:
            raise refused_here(f"a {kind!r} block cannot stand here (text, image or document)", f"{tail}[{j}]")
    return "\n".join(parts) if any(p == IMAGE_TEXT for p in parts) else "".join(parts)


def _user_blocks(blocks: list[Any], notes: set[str]) -> list[dict[str, Any]]:
    """A user turn: its tool results as tool messages (in order), then its text as a user message."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        at = f".content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise refused_here("a text block needs its text", at)
            texts.append(block["text"])
        elif kind in ("image", "document"):
            texts.append(IMAGE_TEXT)
            notes.add(IMAGES_WARNING)
        elif kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise refused_here("a tool_result needs the tool_use_id of its call", at)
            result = text_of(block.get("content", ""), notes, f"{at}.content")
            if block.get("is_error"):
                result = f"Error: {result}"
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": result})
        else:
            raise refused_here(f"a {kind!r} block is not supported in a user turn (text, image, document, "
                               "tool_result)", at)
    if texts:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _assistant_blocks(blocks: list[Any]) -> dict[str, Any]:
    text, reasoning, calls = [], [], []
    for j, block in enumerate(blocks):
        at = f".content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text.append(block.get("text") or "")
        elif kind == "thinking":
            reasoning.append(block.get("thinking") or unsigned(block.get("signature")))
        elif kind == "redacted_thinking":
            continue  # another server's encrypted reasoning: nothing this model can read
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise refused_here("a tool_use needs its id and name", at)
            args = block.get("input", {})
            if not isinstance(args, dict):
                raise refused_here("a tool_use's input must be an object", at)
            calls.append({"type": "function", "id": block["id"], "function": {"name": block["name"],
                                                                                "arguments": args}})
        else:
            raise refused_here(f"a {kind!r} block is not supported in an assistant turn (text, thinking, "
                               "redacted_thinking, tool_use)", at)
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        msg["tool_calls"] = calls
    if any(reasoning):
        msg["reasoning_content"] = "\n\n".join(r for r in reasoning if r)
    return msg


class Turn(BaseModel):
    """One message of `messages`: a system one joins the system prompt (Claude Code sends one); a user
    one is its tool results, then its text; an assistant one is its text, thinking and calls."""

    model_config = ConfigDict(extra="allow")

    role: str
    system: str | None = None  # a system turn's text
    engine: list[dict[str, Any]] = []  # the engine's messages this turn is
    notes: set[str] = set()  # what the answer's X-Clover-Warning says of it

    @model_validator(mode="before")
    @classmethod
    def _read(cls, m: Any) -> dict[str, Any]:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
            raise refused_here("needs a role, user or assistant")
        role, content = m["role"], m.get("content")
        notes: set[str] = set()
        if role == "system":
            return {"role": role, "system": text_of(content, notes), "notes": notes}
        if isinstance(content, str):
            return {"role": role, "engine": [{"role": role, "content": content}]}
        if not isinstance(content, list):
            raise refused_here("content must be a string or a list of content blocks")
        engine = _user_blocks(content, notes) if role == "user" else [_assistant_blocks(content)]
        return {"role": role, "engine": engine, "notes": notes}


class Tool(BaseModel):
    """One of `tools`: a custom tool as the engine's function tool, or a server tool's name (left out)."""

    model_config = ConfigDict(extra="allow")

    function: dict[str, Any] | None = None
    server_name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read(cls, t: Any) -> dict[str, Any]:
        if not isinstance(t, dict):
            raise refused_here("must be an object")
        if t.get("type") not in (None, "custom"):
            return {"server_name": str(t.get("name") or t.get("type"))}
        if not isinstance(t.get("input_schema"), dict):
            raise refused_here("a JSON schema object is required", ".input_schema")
        fn = {"name": t.get("name"), "parameters": t["input_schema"]}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        return {"function": fn}


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    name: Any = None
    disable_parallel_tool_use: bool = False

    @model_validator(mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        if not isinstance(value, dict) or value.get("type") not in ("auto", "any", "tool", "none"):
            raise refused_here("must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}")
        return value

    @field_validator("disable_parallel_tool_use", mode="before")
    @classmethod
    def _one(cls, value: Any) -> Any:
        if not isinstance(value, bool):
            raise refused_here("must be true or false")
        return value


class ThinkingConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    budget_tokens: Any = None
    display: str = "summarized"

    @model_validator(mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        if not isinstance(value, dict) or value.get("type") not in ("enabled", "adaptive", "between_tools",
                                                                     "disabled"):
            raise refused_here("must be {\"type\": \"enabled\" | \"adaptive\" | \"between_tools\" | \"disabled\"}")
        return value

    @field_validator("display", mode="before")
    @classmethod
    def _display(cls, value: Any) -> Any:
        value = value or "summarized"
        if value not in ("summarized", "omitted"):
            raise refused_here("must be \"summarized\" or \"omitted\"")
        return value


def _number(value: Any, lo: float, hi: float) -> float | None:
    if value is None:
        return None
    if not number_in(value, lo, hi):
        raise refused_here(f"must be a number from {lo} to {hi}")
    return float(value)


class MessagesBody(BaseModel):
    """A `/v1/messages` body, in the order its checks are said. None is a field not sent."""

    model_config = ConfigDict(extra="allow")

    mcp_servers: Any = None
    messages: list[Turn]
    system: str | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    output_config: dict[str, Any] | None = None
    output_format: Any = None
    thinking: ThinkingConfig | None = None
    max_tokens: int
    stop_sequences: tuple[str, ...] = ()
    top_k: int | None = None
    metadata: dict[str, Any] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    _schema: dict[str, Any] | None = PrivateAttr(None)

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _no_mcp(cls, value: Any) -> Any:
        if value:
            raise refused_here("the MCP connector (remote MCP servers run by the API) is not supported; run the "
                               "MCP servers in the client")
        return value

    @model_validator(mode="before")
    @classmethod
    def _has_messages(cls, body: Any) -> Any:
        if isinstance(body, dict) and "messages" not in body:
            raise refused_here("must be a non-empty list", "messages")
        return body

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, value: Any) -> Any:
        if not isinstance(value, list) or not value:
            raise refused_here("must be a non-empty list")
        return value

    @field_validator("system", mode="before")
    @classmethod
    def _system(cls, value: Any) -> Any:
        return None if value is None else text_of(value, set())

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, list):
            raise refused_here("must be a list")
        return value

    @field_validator("output_config", mode="before")
    @classmethod
    def _config(cls, value: Any) -> Any:
        if value and not isinstance(value, dict):
            raise refused_here("must be an object")
        return value or None

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _max_tokens(cls, value: Any) -> Any:
        if value is None and cls.model_fields["max_tokens"].is_required():
            raise refused_here("Field required")  # sent as null: as if not sent
        if value is not None and (not integer(value) or value < 1):
            raise refused_here("must be a positive integer")
        return value

    @field_validator("stop_sequences", mode="before")
    @classmethod
    def _stops(cls, value: Any) -> Any:
        stops = value or []
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOPS:
            raise refused_here(f"must be a list of up to {MAX_STOPS} non-empty strings")
        return tuple(stops)

    @field_validator("top_k", mode="before")
    @classmethod
    def _top_k(cls, value: Any) -> Any:
        if value is not None and (not integer(value) or value < 0):
            raise refused_here("must be a non-negative integer")
        return value

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise refused_here("must be an object")
        return value

    @field_validator("stream", mode="before")
    @classmethod
    def _stream(cls, value: Any) -> Any:
        if not isinstance(value, bool):
            raise refused_here("must be true or false")
        return value

    @field_validator("temperature", "top_p", mode="before")
    @classmethod
    def _unit(cls, value: Any) -> float | None:
        return _number(value, 0, 1)

    @model_validator(mode="after")
    def _format(self) -> MessagesBody:
        """Structured output: output_config.format, else output_format."""
        fmt = (self.output_config or {}).get("format")
        fmt = fmt if fmt is not None else self.output_format
        if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "json_schema"
                                or not isinstance(fmt.get("schema"), dict)):
            raise refused_here("must be {\"type\": \"json_schema\", \"schema\": {...}}", "output_config.format")
        self._schema = None if fmt is None else fmt["schema"]
        return self

    @property
    def json_schema(self) -> dict[str, Any] | None:
        return self._schema

    @property
    def effort(self) -> Any:
        return (self.output_config or {}).get("effort")

    def engine_messages(self, notes: set[str]) -> list[dict[str, Any]]:
        """The system prompt (the top-level one, then system turns') and the turns, as the engine's
        messages; what the answer must say of them goes into `notes`."""
        parts = [] if self.system is None else [self.system]
        out: list[dict[str, Any]] = []
        for turn in self.messages:
            notes |= turn.notes
            if turn.system is not None:
                parts.append(turn.system)
            out.extend(turn.engine)
        if self.system is not None and IMAGE_TEXT in self.system:
            notes.add(IMAGES_WARNING)
        text = "\n\n".join(p for p in parts if p)
        return ([{"role": "system", "content": text}] if text else []) + out


class CountTokensBody(MessagesBody):
    """A `/v1/messages/count_tokens` body: `max_tokens` may be left out."""

    max_tokens: int | None = None  # type: ignore[assignment]
