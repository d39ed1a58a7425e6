"""Grammars that hold a reply to what the request asked for, in llama.cpp's GBNF. No Qt.

- Structured output (`response_format`): the answer is JSON that fits the schema; where the template
  opens the reasoning, the grammar holds what comes after `</think>` (lazily when thinking was asked
  for, else with the think block closed in the prompt).
- Forced tool calls (`tool_choice` naming a function, or "required"): the rest of the call is held to
  the tools' schemas in the template's own call syntax (Qwen3.5/3.6's XML form, the JSON form in
  `<tool_call>` tags, or a bare call object); after the call only an end of generation is allowed.

Each form in detail: docs/architecture/server.md.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from app.engine.reasoning import THINKING

THINK_CLOSE = "</think>"
PARAM_CLOSE = "\n</parameter>\n"
XML_CLOSERS = ("</parameter>", "</function>", "</tool_call>")  # never inside a raw value: they would end it


class GrammarError(ValueError):
    pass


@dataclass(frozen=True)
class Grammar:
    """A GBNF grammar (root rule `root`); with `triggers` (regular expressions) it is lazy: nothing is
    constrained until one matches the generated text, then the grammar holds the text from the match on."""

    gbnf: str
    triggers: tuple[str, ...] = ()

    @property
    def lazy(self) -> bool:
        return bool(self.triggers)


def _converter() -> Any:
    """llama-cpp-python's JSON-schema converter (pure Python, reached the one way into llama_cpp)."""
    from app.machine.llama_backend import llama

    return llama().llama_grammar.SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


# llama.cpp's own JSON string character (common/json-schema-to-grammar.cpp): llama-cpp-python's converter
# lets raw control characters into strings, which no JSON parser takes
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'


def _format(conv: Any) -> str:
    """The converter's grammar, its string character made llama.cpp's."""
    return "\n".join(f"char ::= {JSON_CHAR}" if line.startswith("char ::= ") else line
                     for line in conv.format_grammar().splitlines())


def _add(conv: Any, name: str, rule: str) -> str:
    """A rule in the converter's set (renamed if the name is taken by another rule); its name."""
    return str(conv._add_rule(name, rule))  # noqa: SLF001 (llama-cpp-python's converter has no public way)


def literal(text: str) -> str:
    """A GBNF string literal."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _char_class(chars: list[str], negate: bool = False) -> str:
    body = "".join("\\n" if c == "\n" else "\\r" if c == "\r" else "\\t" if c == "\t"
                   else "\\x5e" if c == "^" else "\\" + c if c in "]-\\[" else c for c in chars)
    return ("[^" if negate else "[") + body + "]"


def excluding(conv: Any, name: str, strings: tuple[str, ...]) -> str:
    """A rule for any text that contains none of `strings` (llama.cpp's `gbnf_excluding_grammar`:
    every state of their Aho-Corasick automaton accepts; a character that would complete one of
    them has no alternative)."""
    goto: list[dict[str, int]] = [{}]
    terminal = [False]
    for text in strings:
        q = 0
        for c in text:
            if c not in goto[q]:
                goto.append({})
                terminal.append(False)
                goto[q][c] = len(goto) - 1
            q = goto[q][c]
        terminal[q] = True
    fail = [0] * len(goto)
    order = list(goto[0].values())
    for q in order:  # breadth first: a state's failure link is settled before its children's
        for c, d in goto[q].items():
            f = fail[q]
            while f and c not in goto[f]:
                f = fail[f]
            fail[d] = goto[f][c] if c in goto[f] and goto[f][c] != d else 0
            terminal[d] = terminal[d] or terminal[fail[d]]
            order.append(d)

    def step(q: int, c: str) -> int:
        while q and c not in goto[q]:
            q = fail[q]
        return goto[q].get(c, 0)

    alphabet = sorted({c for text in strings for c in text})
    live = [q for q in range(len(goto)) if not terminal[q]]
    names = {q: name if q == 0 else f"{name}-{q}" for q in live}
    for q in live:
        buckets: dict[int, list[str]] = {}
        specific = []
        for c in alphabet:
            d = step(q, c)
            if terminal[d]:
                specific.append(c)
            elif d:
                buckets.setdefault(d, []).append(c)
                specific.append(c)
        alts = [""] + [f"{_char_class(chars)} {names[d]}" for d, chars in sorted(buckets.items())]
        alts.append(f"{_char_class(specific, negate=True)} {names[0]}")
        if _add(conv, names[q], " | ".join(alts).strip()) != names[q]:
            raise GrammarError(f"grammar rule {names[q]!r} is taken")
    return names[0]


def regex_escape(text: str) -> str:
    """A literal for llama.cpp's trigger patterns (std::regex, ECMAScript)."""
    return re.sub(r"[.^$|()\[\]{}*+?\\/-]", lambda m: "\\" + m.group(0), text)


def _visit(conv: Any, schema: dict[str, Any], name: str, url: str) -> str:
    try:
        resolved = conv.resolve_refs(copy.deepcopy(schema), url)  # it rewrites $refs in place
        return str(conv.visit(resolved, name))
    except GrammarError:
        raise
    except Exception as exc:  # the converter raises several kinds (and asserts) for what it cannot express
        raise GrammarError(f"this JSON schema cannot be turned into a grammar: {exc}") from None


# ----------------------------------------------------------------------------- structured output


def json_grammar(schema: dict[str, Any], *, after_think: bool = False) -> Grammar:
    """The answer as JSON fitting `schema`; `after_think`: lazy, from the end of the reasoning on."""
    conv = _converter()
    if not after_think:
        _visit(conv, schema, "", "input")
        return Grammar(_format(conv))
    answer = _visit(conv, schema, "answer", "input")
    _add(conv, "root", f'{literal(THINK_CLOSE)} [ \\n]{{0,3}} {answer}')
    return Grammar(_format(conv), triggers=(regex_escape(THINK_CLOSE),))


# ----------------------------------------------------------------------------- tool calls


def _function(tool: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    fn = tool["function"]
    params = fn.get("parameters")
    return fn["name"], params if isinstance(params, dict) else {"type": "object", "properties": {}}


def _string_only(schema: Any) -> list[str] | None:
    """For a parameter written as raw text: [] (any text) or its allowed values; None: a JSON value."""
    if not isinstance(schema, dict):
        return []
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    kind = schema.get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()
    if isinstance(values, list) and values and all(isinstance(v, str) for v in values) and kinds <= {"string"}:
        return list(values)
    if kinds == {"string"}:
        return []
    if not kinds or "string" in kinds:
        # no type (any value) or a string among others: the value is raw text the parser types afterwards
        return [] if not any(k in schema for k in ("properties", "items", "enum", "const", "anyOf", "oneOf",
                                                    "$ref", "allOf")) else None
    return None


def _xml_params(conv: Any, fname: str, params: dict[str, Any], index: int, text_rule: str) -> str:
    """The parameters of one XML call, in order: the required ones, then any of the optional ones."""
    props = params.get("properties") or {}
    required = [p for p in params.get("required") or () if p in props]
    parts = []
    for key in [*required, *(p for p in props if p not in required)]:
        schema = props[key]
        raw = _string_only(schema)
        if raw is None:
            sub = dict(schema) if isinstance(schema, dict) else {}
            if "$defs" in params or "definitions" in params:  # references point at the tool's schema
                sub = {**{k: params[k] for k in ("$defs", "definitions") if k in params}, **sub}
            value = f"{_visit(conv, sub, f'tool{index}-{key}', f'tool{index}-{key}')} {literal(PARAM_CLOSE)}"
        elif raw:
            value = "(" + " | ".join(literal(v + PARAM_CLOSE) for v in raw) + ")"
        else:
            value = text_rule
        rule = _add(conv, f"tool{index}-param-{key}", f"{literal(f'<parameter={key}>' + chr(10))} {value}")
        parts.append(rule if key in required else f"{rule}?")
    return " ".join(parts) if parts else '""'


def call_grammar(tools: list[dict[str, Any]], *, xml: bool, tagged: bool, name: str | None) -> Grammar:
    """The rest of a forced call after the prompt's prefix (`Engine._forced_call_prefix`): for a named
    tool, from its arguments on; for "required" (`name` None), from the call's opening on."""
    chosen = [t for t in tools if _function(t)[0] == name] if name else list(tools)
    if not chosen:
        raise GrammarError(f"no tool is named {name!r}")
    conv = _converter()
    if not tagged:
        alts = [{"type": "object", "properties": {"name": {"const": n}, "arguments": p},
                 "required": ["name", "arguments"], "additionalProperties": False}
                for n, p in map(_function, chosen)]
        _visit(conv, alts[0] if len(alts) == 1 else {"anyOf": alts}, "", "call")
        return Grammar(_format(conv))
    close = literal("</tool_call>")
    bodies = []
    if xml:
        text_rule = f'{excluding(conv, "xml-text", XML_CLOSERS)} {literal(PARAM_CLOSE)}'
        for i, tool in enumerate(chosen):
            fname, params = _function(tool)
            args = _xml_params(conv, fname, params, i, text_rule)
            opening = "" if name else literal(f"<function={fname}>\n") + " "
            bodies.append(f"{opening}{args} {literal('</function>' + chr(10))} {close}")
    else:
        for i, tool in enumerate(chosen):
            fname, params = _function(tool)
            args = _visit(conv, params, f"tool{i}-arguments", f"tool{i}")
            opening = "" if name else (f'"{{" space {literal(json.dumps("name"))} space ":" space '
                                       f'{literal(json.dumps(fname))} space "," space '
                                       f'{literal(json.dumps("arguments"))} space ":" space ')
            bodies.append(f'{opening}{args} space "}}" "\\n"? {close}')
    _add(conv, "root", bodies[0] if len(bodies) == 1 else " | ".join(f"( {b} )" for b in bodies))
    return Grammar(_format(conv))


# ----------------------------------------------------------------------------- a request's grammar


def closes_think_first(request: Any, state: str) -> bool:
    """Whether a structured answer's prompt gets `</think>\\n\\n` after it: the template opened the
    reasoning (`state` is reasoning.THINKING) and the client did not ask for thinking explicitly."""
    return (request.json_schema is not None and not request.tool_choice and state == THINKING
            and request.enable_thinking is not True)


def reply_grammar(request: Any, *, tagged: bool, xml: bool, state: str) -> Grammar | None:
    """The grammar for a `ChatRequest` whose whole prompt (the forced call's start or the closed think
    block included) leaves the reply in `state` (app.engine.reasoning); None when nothing is forced."""
    if request.tool_choice:
        name = None if request.tool_choice == "required" else request.tool_choice
        return call_grammar(request.tools or [], xml=xml, tagged=tagged, name=name)
    if request.json_schema is not None:
        return json_grammar(request.json_schema, after_think=state == THINKING)
    return None
