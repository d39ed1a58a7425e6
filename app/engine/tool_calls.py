"""Tool calls in a model's answer: found while they stream, parsed, checked against the tools' schemas.
No Qt.

The forms the templates ask for: `<tool_call>` tags around `{"name": ..., "arguments": {...}}` (Qwen),
the XML form `<function=NAME><parameter=KEY>VALUE</parameter></function>` inside them (Qwen3.5/3.6,
Clover's), and the bare JSON call of templates without tags. A call that does not fit its tool's
schema keeps its arguments and carries the violations.

Each form and its edge cases: docs/architecture/server.md.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from app.engine.reasoning import partial_suffix
from app.engine.reply_pieces import ANSWER_PIECE, TOOL_CALL_PIECE

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    raw: str
    id: str = ""
    errors: list[str] = field(default_factory=list)  # parse or schema problems; empty means valid

    @property
    def valid(self) -> bool:
        return not self.errors

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}}

    def as_template(self) -> dict[str, Any]:
        """The shape chat templates read from an assistant message's `tool_calls`."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def new_call_id() -> str:
    """A call id no other call has (clients match results to calls by id, across rounds too)."""
    return f"call_{secrets.token_hex(8)}"


def parse_call(text: str, index: int = 0, tools: list[dict[str, Any]] | None = None) -> ToolCall:
    """One call's text (inside <tool_call> or alone), JSON or Qwen XML; `tools` types XML values."""
    raw = text.strip()
    if raw.startswith("<function="):
        return parse_xml_call(raw, tools)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return ToolCall("", {}, raw, new_call_id(), [f"not valid JSON: {exc}"])
    return _from_obj(data, raw, index)


_XML_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|\Z)", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)(?:\n?</parameter>|\Z)", re.S)


def _param_types(tools: list[dict[str, Any]] | None, name: str) -> dict[str, set[str]]:
    for tool in tools or ():
        fn = tool.get("function", {})
        if fn.get("name") == name:
            out = {}
            for key, schema in ((fn.get("parameters") or {}).get("properties") or {}).items():
                kind = schema.get("type") if isinstance(schema, dict) else None
                out[key] = set(kind) if isinstance(kind, list) else {kind} if kind else set()
            return out
    return {}


def _xml_value(raw: str, types: set[str] | None) -> tuple[Any, str | None]:
    """A parameter's value: raw text for a string parameter, JSON for the others (and, without a
    schema, JSON when the text is a JSON number, boolean, null, object or array)."""
    if types and types <= {"string"}:
        return raw, None
    try:
        value = json.loads(raw)
    except ValueError:
        if types and "string" not in types:
            return raw, f"{raw[:40]!r} is not valid JSON for a {'/'.join(sorted(types))} parameter"
        return raw, None
    if isinstance(value, str) and (not types or "string" in types):
        return raw, None  # a quoted string stays as written
    return value, None


def parse_xml_call(text: str, tools: list[dict[str, Any]] | None = None) -> ToolCall:
    m = _XML_FUNCTION.search(text)
    if m is None:
        return ToolCall("", {}, text, new_call_id(), ["no <function=NAME> in the tool call"])
    name, body = m.group(1), m.group(2)
    types = _param_types(tools, name)
    args: dict[str, Any] = {}
    errors = []
    for pm in _XML_PARAMETER.finditer(body):
        key, raw = pm.group(1), pm.group(2)
        if not pm.group(0).rstrip().endswith("</parameter>"):
            errors.append(f"parameter {key!r} is not closed")
        value, problem = _xml_value(raw, types.get(key))
        if problem:
            errors.append(f"{key}: {problem}")
        args[key] = value
    if "</function>" not in text:
        errors.append("the call is not closed (</function> missing)")
    return ToolCall(name, args, text, new_call_id(), errors)


def _from_obj(data: Any, raw: str, index: int) -> ToolCall:
    if isinstance(data, dict) and "function" in data and isinstance(data["function"], dict):
        data = data["function"]
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return ToolCall("", {}, raw, new_call_id(), ["a tool call needs a \"name\" string"])
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):  # OpenAI style: arguments as a JSON string
        try:
            args = json.loads(args)
        except ValueError as exc:
            return ToolCall(data["name"], {}, raw, new_call_id(), [f"arguments are not valid JSON: {exc}"])
    if not isinstance(args, dict):
        return ToolCall(data["name"], {}, raw, new_call_id(), ["arguments must be a JSON object"])
    return ToolCall(data["name"], args, raw, new_call_id())


class ToolCallSplitter:
    """Feeds on answer text; emits ("answer", text) and ("tool_call", call text) events."""

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        self.tools = tools
        self._held = ""
        self._inside = False
        self._call = ""
        self.text = ""
        self.calls: list[ToolCall] = []

    def feed(self, chunk: str) -> list[tuple[str, str]]:
        text = self._held + chunk
        self._held = ""
        events: list[tuple[str, str]] = []
        while text:
            if self._inside:
                i = text.find(CLOSE)
                if i < 0:
                    keep = partial_suffix(text, CLOSE)
                    self._call += text[:len(text) - keep]
                    self._held = text[len(text) - keep:]
                    return events
                self._call += text[:i]
                text = text[i + len(CLOSE):]
                self._inside = False
                self.calls.append(parse_call(self._call, len(self.calls), self.tools))
                events.append((TOOL_CALL_PIECE, self._call.strip()))
                self._call = ""
                continue
            i = text.find(OPEN)
            if i < 0:
                keep = partial_suffix(text, OPEN)
                self._text(events, text[:len(text) - keep])
                self._held = text[len(text) - keep:]
                return events
            self._text(events, text[:i])
            text = text[i + len(OPEN):]
            self._inside = True
        return events

    def finish(self) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        held, self._held = self._held, ""
        if self._inside:  # an unclosed call: keep it, marked invalid if it does not parse
            self._call += held
            call = parse_call(self._call, len(self.calls), self.tools)
            self.calls.append(call)
            events.append((TOOL_CALL_PIECE, self._call.strip()))
            self._inside, self._call = False, ""
        elif held:
            self._text(events, held)
        return events

    def _text(self, events: list[tuple[str, str]], text: str) -> None:
        if text:
            self.text += text
            events.append((ANSWER_PIECE, text))


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def plain_json_calls(answer: str) -> list[ToolCall]:
    """Tool calls written as plain JSON (templates without <tool_call> tags); [] when the answer is not one."""
    text = answer.strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1)
    if not text.startswith(("{", "[")):
        return []
    try:
        data = json.loads(text)
    except ValueError:
        return []
    if isinstance(data, dict) and isinstance(data.get("tool_calls"), list):
        data = data["tool_calls"]
    items = data if isinstance(data, list) else [data]
    calls = [_from_obj(item, json.dumps(item), i) for i, item in enumerate(items)]
    return calls if calls and all(c.name for c in calls) else []


# ----------------------------------------------------------------------------- tools and schemas


class ToolsError(ValueError):
    pass


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """Validate a list of OpenAI-style tool definitions; return it (normalised) or raise ToolsError."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError as exc:
            raise ToolsError(f"not valid JSON: {exc}") from None
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list):
        raise ToolsError("tools must be a JSON list of function definitions")
    out = []
    names = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ToolsError(f"tool {i} is not an object")
        fn = tool.get("function", tool if "name" in tool else None)
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolsError(f"tool {i}: needs {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", fn["name"]):
            raise ToolsError(f"tool {i}: name {fn['name']!r} may use letters, digits, '_', '.', '-' (64 at most)")
        if fn["name"] in names:
            raise ToolsError(f"tool {i}: the name {fn['name']!r} is used twice")
        names.add(fn["name"])
        params = fn.get("parameters", {"type": "object", "properties": {}})
        try:
            jsonschema.Draft202012Validator.check_schema(params)
        except jsonschema.SchemaError as exc:
            raise ToolsError(f"tool {fn['name']!r}: its parameters are not a valid JSON schema: "
                             f"{exc.message}") from None
        out.append({"type": "function", "function": {**fn, "parameters": params}})
    return out


def validate_call(call: ToolCall, tools: list[dict[str, Any]]) -> ToolCall:
    """Fill `call.errors` with what is wrong with it against the tools (nothing: it is valid)."""
    if call.errors:
        return call
    for tool in tools:
        fn = tool["function"]
        if fn["name"] == call.name:
            validator = jsonschema.Draft202012Validator(fn.get("parameters", {}))
            call.errors = [f"{'/'.join(map(str, e.path)) or 'arguments'}: {e.message}"
                           for e in sorted(validator.iter_errors(call.arguments), key=str)]
            return call
    call.errors = [f"no tool is named {call.name!r}"]
    return call


def validate_json(text: str, schema: dict[str, Any]) -> tuple[Any, list[str]]:
    """Parse structured output and validate it: (value or None, errors)."""
    raw = text.strip()
    m = _FENCE.match(raw)
    if m:
        raw = m.group(1)
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return None, [f"not valid JSON: {exc}"]
    errors = [f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}"
              for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]
    return value, errors
