"""The reasoning splitter on streamed text cut at every position."""

from __future__ import annotations

import pytest

from app.engine.reasoning import ANSWER, BEFORE, THINKING, ReasoningSplitter, initial_state_for_prompt


def run(chunks: list[str], start: str = BEFORE) -> tuple[str, str, list[tuple[str, str]]]:
    s = ReasoningSplitter(start)
    events = []
    for c in chunks:
        events += s.feed(c)
    events += s.finish()
    return s.reasoning, s.answer, events


CASES = [
    # (stream, start state, reasoning, answer)
    ("<think>\nLet me think: 2+2.\n</think>\n\nIt is 4.", BEFORE, "Let me think: 2+2.\n", "It is 4."),
    ("  <think>a</think>b", BEFORE, "a", "b"),
    ("Plain answer, no thinking.", BEFORE, "", "Plain answer, no thinking."),
    ("<thin is not a tag", BEFORE, "", "<thin is not a tag"),
    ("I think </think> here", BEFORE, "", "I think </think> here"),
    ("reasoning already open\n</think>\n\nanswer", THINKING, "reasoning already open\n", "answer"),
    ("\n\nanswer only", ANSWER, "", "answer only"),
    ("<think>never closed", BEFORE, "never closed", ""),
    ("<think></think>empty reasoning", BEFORE, "", "empty reasoning"),
    ("<think>x < y and </thinker> too</think>ok", BEFORE, "x < y and </thinker> too", "ok"),
]


@pytest.mark.parametrize("stream, start, reasoning, answer", CASES)
def test_every_single_cut(stream, start, reasoning, answer):
    assert run([stream], start)[:2] == (reasoning, answer)
    for i in range(len(stream) + 1):
        got = run([stream[:i], stream[i:]], start)
        assert got[:2] == (reasoning, answer), f"cut at {i}: {got}"


@pytest.mark.parametrize("stream, start, reasoning, answer", CASES)
def test_every_pair_of_cuts_and_char_by_char(stream, start, reasoning, answer):
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            assert run([stream[:i], stream[i:j], stream[j:]], start)[:2] == (reasoning, answer)
    r, a, events = run(list(stream), start)
    assert (r, a) == (reasoning, answer)
    assert "".join(t for k, t in events if k == "reasoning") == reasoning
    assert "".join(t for k, t in events if k == "answer") == answer


def test_events_come_as_soon_as_they_are_certain():
    s = ReasoningSplitter()
    assert s.feed("<think>") == []
    assert s.feed("step one") == [("reasoning", "step one")]
    assert s.feed(" </thi") == [("reasoning", " ")]  # the possible tag start is held back
    assert s.feed("nk>\n\nDone") == [("answer", "Done")]


def test_start_state_from_the_prompt():
    base = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert initial_state_for_prompt(base) == BEFORE
    assert initial_state_for_prompt(base + "<think>\n") == THINKING
    assert initial_state_for_prompt(base + "<think>\n\n</think>\n\n") == ANSWER


def test_a_reopened_think_tag_is_not_left_in_the_reasoning():
    """Held-out: a model that writes <think> again inside its reasoning."""
    s = ReasoningSplitter(THINKING)
    events = s.feed("first idea <think>second idea</think>The answer.") + s.finish()
    assert "<think>" not in s.reasoning and s.reasoning == "first idea second idea"
    assert s.answer == "The answer." and [k for k, _ in events] == ["reasoning", "answer"]


def test_a_tool_call_ends_unclosed_reasoning():
    """Qwen3.5/3.6 may start a call without closing its reasoning (llama.cpp's parser accepts it)."""
    s = ReasoningSplitter(THINKING)
    s.feed("I should call the tool.\n<tool_")
    s.feed("call>\n<function=f>\n</function>\n</tool_call>")
    s.finish()
    assert s.reasoning.strip() == "I should call the tool." and s.answer.startswith("<tool_call>")
