"""A reply's text, from what the model writes to what the engine gives back: one pipeline for every engine. No Qt.

The local engine feeds each token's bytes, the remote engine each streamed chunk of text; both get the
same pieces out, in the same order, whatever the cut: the bytes are decoded as UTF-8 incrementally (a
character may span tokens), stop strings are held back until they are known not to be one (a stop
string may span tokens too), the reasoning is split from the answer (`app.engine.reasoning`) and, where
the request offered tools, tool calls from the answer text (`app.engine.tool_calls`); with no tools
offered, tool-call markup is text like any other (reasoning inside the reasoning, answer after it), as
llama.cpp parses calls only where tools were given. Pieces go to the caller's `on_event` as they are
known, kinds named in `app.engine.reply_pieces` (REASONING_PIECE, ANSWER_PIECE, TOOL_CALL_PIECE); `finish`
flushes what was held and gives the reply's text fields. `check_reply` is what every engine does with
the reply then.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

from app.engine.contract import ChatRequest, Event, Reply
from app.engine.reasoning import BEFORE, THINKING, ReasoningSplitter, partial_suffix
from app.engine.reply_pieces import REASONING_PIECE
from app.engine.tool_calls import ToolCall, ToolCallSplitter, plain_json_calls, validate_call, validate_json


def check_reply(reply: Reply, request: ChatRequest) -> Reply:
    """What every engine does with a finished reply: tool calls written as plain JSON are taken as
    calls, calls are validated against the request's tools, structured output against its schema."""
    if request.tools:
        if not reply.tool_calls:
            plain = plain_json_calls(reply.text)
            if plain:
                reply.tool_calls, reply.text = plain, ""
        for call in reply.tool_calls:
            validate_call(call, request.tools)
    if request.json_schema is not None:
        reply.json_value, reply.json_errors = validate_json(reply.text, request.json_schema)
    return reply


class StopFilter:
    """Holds back text that could be the start of a stop string; says when one is complete."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self._held = ""
        self.hit = ""  # the stop string that was reached (the first in the text)

    def feed(self, text: str) -> tuple[str, bool]:
        """(text that is safe to show now, whether a stop string was reached)."""
        if not self.stops:
            return text, False
        text = self._held + text
        hits = [(i, s) for s in self.stops if (i := text.find(s)) >= 0]
        if hits:
            self._held = ""
            at, self.hit = min(hits)
            return text[:at], True
        keep = max(partial_suffix(text, s) for s in self.stops)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep], False

    def finish(self) -> str:
        held, self._held = self._held, ""
        return held


@dataclass(frozen=True)
class ReplyText:
    """The reply's text fields once the stream has ended."""

    text: str  # the answer, without reasoning and tool calls
    reasoning: str
    raw: str  # what the model wrote (and the engine wrote for it), after the stop strings' cut
    tool_calls: list[ToolCall]


class TextPipeline:
    """One reply's text: bytes or text in, pieces out to `on_event`, the reply's text fields at the end.

    `stops`: the request's stop strings (the remote engine passes none: its server cuts at them);
    `start`: where the reply starts, reasoning-wise (`reasoning.initial_state_for_prompt`)."""

    def __init__(self, tools: list[dict[str, Any]] | None, stops: tuple[str, ...] = (), start: str = BEFORE,
                 on_event: Event | None = None) -> None:
        self._reasoning = ReasoningSplitter(start, calls_end_it=bool(tools))
        self._calls = ToolCallSplitter(tools) if tools else None
        self._stops = StopFilter(stops)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._raw: list[str] = []
        self._on_event = on_event
        self.stopped = False  # a stop string was reached: what came after it is not the reply's

    @property
    def thinking(self) -> bool:
        """Whether the reply is inside its reasoning now (a token counts as reasoning when it is)."""
        return self._reasoning.state == THINKING

    @property
    def stop_hit(self) -> str:
        """The stop string that ended the reply ("" when none did)."""
        return self._stops.hit

    @property
    def raw(self) -> str:
        """What the model wrote so far (and the engine for it), less what is held back."""
        return "".join(self._raw)

    def feed_bytes(self, data: bytes) -> bool:
        """A token's bytes (a character may be cut between tokens); True when a stop string was reached."""
        text = self._decoder.decode(data)
        return self.feed_text(text) if text else False

    def feed_text(self, text: str) -> bool:
        """Text the model wrote; True when a stop string was reached (the text from it on is dropped)."""
        shown, hit = self._stops.feed(text)
        if shown:
            self._raw.append(shown)
            self._split(shown)
        self.stopped = self.stopped or hit
        return hit

    def feed_reasoning(self, text: str) -> None:
        """Reasoning a server already split from the answer (OpenAI-compatible `reasoning_content`)."""
        self._reasoning.reasoning += text
        self._send(REASONING_PIECE, text)

    def open_with(self, text: str) -> None:
        """Text the prompt already wrote as the reply's start (a forced tool call's opening): split
        like the model's, not held for stop strings, not part of the raw reply."""
        self._split(text)

    def write_for_model(self, text: str) -> None:
        """What was held back so far, then `text` the engine writes as if the model had (the end of a
        thinking whose budget is spent): into the raw reply and the splitters, past the stop strings."""
        text = self._held() + text
        self._raw.append(text)
        self._split(text)

    def finish(self) -> ReplyText:
        """Flush what was held back (nothing after a stop string) and give the reply's text fields."""
        if not self.stopped:
            tail = self._held()
            if tail:
                self._raw.append(tail)
                self._split(tail)
        for kind, text in self._reasoning.finish():
            self._answer(kind, text)
        if self._calls is None:
            return ReplyText(self._reasoning.answer, self._reasoning.reasoning, self.raw, [])
        for kind, text in self._calls.finish():
            self._send(kind, text)
        return ReplyText(self._calls.text, self._reasoning.reasoning, self.raw, list(self._calls.calls))

    def _held(self) -> str:
        """All that is held back, oldest first: text that might have begun a stop string, then the
        bytes of a character that never ended (one U+FFFD)."""
        return self._stops.finish() + self._decoder.decode(b"", final=True)

    def _split(self, text: str) -> None:
        for kind, piece in self._reasoning.feed(text):
            self._answer(kind, piece)

    def _answer(self, kind: str, text: str) -> None:
        """A piece from the reasoning splitter: the answer's go on through the tool-call splitter, where
        tools were offered."""
        if kind == REASONING_PIECE or self._calls is None:
            self._send(kind, text)
            return
        for k, t in self._calls.feed(text):
            self._send(k, t)

    def _send(self, kind: str, text: str) -> None:
        if self._on_event is not None:
            self._on_event(kind, text)
