"""Split a streamed reply into reasoning (`<think> ... </think>`) and answer, chunk by chunk. No Qt.

Tags may arrive cut anywhere ("<thi" + "nk>"), so text that could be the start of a tag is held
back until the next chunk decides. Qwen-style templates either let the model open `<think>`
itself, or open it in the prompt (then the reply starts inside the reasoning), or, with thinking
off, put an empty `<think></think>` in the prompt (then the reply is all answer): `start_state`
says which, and `initial_state_for_prompt` works it out from the rendered prompt. Qwen3.5/3.6 may start
a tool call without closing its reasoning, so where tools were offered (`calls_end_it`) a `<tool_call>`
ends the reasoning too; where none were, it is reasoning text like any other.
"""

from __future__ import annotations

from app.engine.reply_pieces import ANSWER_PIECE, REASONING_PIECE

OPEN, CLOSE = "<think>", "</think>"
TOOL_OPEN = "<tool_call>"  # Qwen3.5/3.6 may start a call without closing its reasoning: that ends it too
BEFORE, THINKING, ANSWER = "before", "thinking", "answer"


def initial_state_for_prompt(prompt: str) -> str:
    """Where a reply to this rendered prompt starts."""
    last_open, last_close = prompt.rfind(OPEN), prompt.rfind(CLOSE)
    tail = prompt[max(prompt.rfind("<|im_start|>assistant"), 0):]
    if last_open > last_close and OPEN in tail:
        return THINKING  # the template opened the reasoning for the model
    if CLOSE in tail:
        return ANSWER  # thinking switched off: an empty block is already there
    return BEFORE


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper start of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ReasoningSplitter:
    def __init__(self, start_state: str = BEFORE, calls_end_it: bool = True) -> None:
        self.state = start_state
        self._ends = (CLOSE, OPEN, TOOL_OPEN) if calls_end_it else (CLOSE, OPEN)
        self._held = ""
        self._strip_next = start_state == ANSWER
        self.reasoning = ""
        self.answer = ""

    def feed(self, chunk: str) -> list[tuple[str, str]]:
        """Events ("reasoning" | "answer", text) that this chunk completes."""
        text = self._held + chunk
        self._held = ""
        events: list[tuple[str, str]] = []
        while text:
            if self.state == BEFORE:
                stripped = text.lstrip()
                if not stripped:
                    self._held = text
                    return events
                if stripped.startswith(OPEN):
                    text = stripped[len(OPEN):]
                    self.state = THINKING
                    continue
                if OPEN.startswith(stripped):  # could still become <think>
                    self._held = text
                    return events
                self.state = ANSWER
                self._strip_next = True
                continue
            if self.state == THINKING:
                # the first of: the end of the reasoning, a re-opened <think> (dropped: no literal tag in
                # the reasoning), or a tool call where tools were offered (it ends the reasoning and goes on
                # as the answer)
                found = [(i, tag) for tag in self._ends if (i := text.find(tag)) >= 0]
                if found:
                    i, tag = min(found)
                    self._emit(events, REASONING_PIECE, text[:i])
                    if tag == OPEN:
                        text = text[i + len(OPEN):]
                        continue
                    text = text[i + len(CLOSE):] if tag == CLOSE else text[i:]
                    self.state = ANSWER
                    self._strip_next = True
                    continue
                keep = max(partial_suffix(text, tag) for tag in self._ends)
                self._emit(events, REASONING_PIECE, text[:len(text) - keep])
                self._held = text[len(text) - keep:]
                return events
            # ANSWER
            if self._strip_next:
                text = text.lstrip()
                if not text:
                    return events
                self._strip_next = False
            self._emit(events, ANSWER_PIECE, text)
            return events
        return events

    def finish(self) -> list[tuple[str, str]]:
        """Flush what was held back at the end of the stream."""
        held, self._held = self._held, ""
        events: list[tuple[str, str]] = []
        if held:
            kind = REASONING_PIECE if self.state == THINKING else ANSWER_PIECE
            if kind == ANSWER_PIECE and self._strip_next:
                held = held.lstrip()
            self._emit(events, kind, held)
        return events

    def _emit(self, events: list[tuple[str, str]], kind: str, text: str) -> None:
        if not text:
            return
        if kind == REASONING_PIECE:
            if not self.reasoning:
                text = text.lstrip("\n")
                if not text:
                    return
            self.reasoning += text
        else:
            self.answer += text
        if events and events[-1][0] == kind:
            events[-1] = (kind, events[-1][1] + text)
        else:
            events.append((kind, text))
