"""The text pipeline: the same reply whatever the cut, in bytes or in text (UTF-8, stop strings, think tags,
tool calls), as the local engine feeds it token by token and the remote engine chunk by chunk."""

from __future__ import annotations

import json
import random

import pytest

from app.engine.contract import ChatRequest, Reply, ReplyStats
from app.engine.reasoning import ANSWER, BEFORE, THINKING
from app.engine.reply_pieces import ANSWER_PIECE, REASONING_PIECE, TOOL_CALL_PIECE
from app.engine.text_pipeline import StopFilter, TextPipeline, check_reply

TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CALL = '<tool_call>\n{"name": "weather", "arguments": {"city": "Zürich"}}\n</tool_call>'


def merged(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Events with neighbouring text of one kind joined (a cut may split a piece in two; a tool call
    comes whole, so two calls stay two)."""
    out: list[tuple[str, str]] = []
    for kind, text in events:
        if out and out[-1][0] == kind and kind != TOOL_CALL_PIECE:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


def run(pieces: list[bytes] | list[str], stops: tuple[str, ...] = (), start: str = BEFORE,
        tools: list | None = None):
    """(events, the reply's text fields, the stop string reached, how many feeds said "stop")."""
    events: list[tuple[str, str]] = []
    text = TextPipeline(tools, stops, start, lambda k, t: events.append((k, t)))
    hits = 0
    for piece in pieces:
        hit = text.feed_bytes(piece) if isinstance(piece, bytes) else text.feed_text(piece)
        if hit:
            hits += 1
            break  # an engine stops reading at the stop string
    return events, text.finish(), text.stop_hit, hits


def fields(written) -> tuple:
    """The reply's text fields, its calls without their ids (a new random id each)."""
    calls = [(c.name, c.arguments, c.raw, c.errors) for c in written.tool_calls]
    return written.text, written.reasoning, written.raw, calls


def cut(data, at: list[int]):
    bounds = [0, *sorted(at), len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


# (stream, stops, start state, tools, answer text, reasoning, raw, stop string reached, tool call names)
CASES = [
    ("héllo wörld, 世界 🙂", (), BEFORE, None, "héllo wörld, 世界 🙂", "", "héllo wörld, 世界 🙂", "", []),
    ("<think>plan: 2+2 🙂</think>\n\nIt is 4.", (), BEFORE, None, "It is 4.", "plan: 2+2 🙂",
     "<think>plan: 2+2 🙂</think>\n\nIt is 4.", "", []),
    ("still thinking </think>answer", (), THINKING, None, "answer", "still thinking ",
     "still thinking </think>answer", "", []),
    ("one, two, STOP, three", ("STOP",), BEFORE, None, "one, two, ", "", "one, two, ", "STOP", []),
    ("ends on a partial ST", ("STOP",), BEFORE, None, "ends on a partial ST", "", "ends on a partial ST", "", []),
    ("a ßtop b ßt", ("ßtop", "zz"), ANSWER, None, "a ", "", "a ", "ßtop", []),
    ("<think>check the 天气</think>Sure." + CALL + " done", ("END",), BEFORE, TOOLS, "Sure. done", "check the 天气",
     "<think>check the 天气</think>Sure." + CALL + " done", "", ["weather"]),
    ("<think>r</think>" + CALL + CALL + "END after", ("END",), BEFORE, TOOLS, "", "r",
     "<think>r</think>" + CALL + CALL, "END", ["weather", "weather"]),
    # no tools offered: call markup is reasoning inside the reasoning and answer text after it
    ("<think>maybe " + CALL + " no.</think>Zürich is cold. " + CALL, (), BEFORE, None,
     "Zürich is cold. " + CALL, "maybe " + CALL + " no.",
     "<think>maybe " + CALL + " no.</think>Zürich is cold. " + CALL, "", []),
    # tools offered: a call still ends a reasoning the model did not close (Qwen3.5/3.6)
    ("<think>I need the weather\n" + CALL, (), BEFORE, TOOLS, "", "I need the weather\n",
     "<think>I need the weather\n" + CALL, "", ["weather"]),
]


def check(got, stream, case) -> None:
    _, stops, _, _, answer, reasoning, raw, hit, names = case
    events, written, stop_hit, hits = got
    assert (written.text, written.reasoning, written.raw, stop_hit) == (answer, reasoning, raw, hit), stream
    assert hits == (1 if hit else 0)
    assert [c.name for c in written.tool_calls] == names
    assert "".join(t for k, t in events if k == ANSWER_PIECE) == answer
    assert "".join(t for k, t in events if k == REASONING_PIECE) == reasoning
    assert len([k for k, _ in events if k == TOOL_CALL_PIECE]) == len(names)


@pytest.mark.parametrize("case", CASES, ids=[c[0][:24] for c in CASES])
def test_every_cut_of_the_bytes_gives_the_same_reply(case):
    stream, stops, start, tools = case[:4]
    data = stream.encode()
    whole = run([data], stops, start, tools)
    check(whole, stream, case)
    for i in range(len(data) + 1):  # a character's bytes split between two tokens, a tag, a stop string
        got = run(cut(data, [i]), stops, start, tools)
        check(got, stream, case)
        assert merged(got[0]) == merged(whole[0]), f"cut at byte {i}"


@pytest.mark.parametrize("case", CASES, ids=[c[0][:24] for c in CASES])
def test_byte_by_byte_and_char_by_char(case):
    stream, stops, start, tools = case[:4]
    whole = merged(run([stream], stops, start, tools)[0])
    for pieces in ([bytes([b]) for b in stream.encode()], list(stream)):
        got = run(pieces, stops, start, tools)
        check(got, stream, case)
        assert merged(got[0]) == whole


def test_any_split_of_the_same_bytes_gives_the_same_events_joined():
    """Property-style: random cuts (seeded, so a failure repeats) of streams mixing every part."""
    rng = random.Random(39)
    for case in CASES:
        stream, stops, start, tools = case[:4]
        data = stream.encode()
        whole = run([data], stops, start, tools)
        for _ in range(150):
            at = rng.sample(range(len(data) + 1), rng.randint(1, min(12, len(data))))
            got = run(cut(data, at), stops, start, tools)
            assert merged(got[0]) == merged(whole[0]), (stream, sorted(at))
            assert fields(got[1]) == fields(whole[1])


def test_a_call_in_the_reasoning_without_tools_stays_reasoning_and_the_answer_comes_through():
    """The tiny qwen35moe's reply to a request with no tools: a `<tool_call>` the model wrote while
    thinking, left open, is part of its reasoning; the answer after `</think>` is the answer."""
    stream = "<think>\nI could <tool_call>\n<function=weather>\n<parameter=city>\nBern</think>\n\nIt is sunny."
    data = stream.encode()
    events, written, _, _ = run([data[i:i + 3] for i in range(0, len(data), 3)], start=BEFORE)
    assert written.tool_calls == []
    assert written.reasoning == "I could <tool_call>\n<function=weather>\n<parameter=city>\nBern"
    assert written.text == "It is sunny."
    assert TOOL_CALL_PIECE not in [k for k, _ in events]


def test_a_character_cut_between_tokens_waits_for_its_last_byte():
    events: list[tuple[str, str]] = []
    text = TextPipeline(None, on_event=lambda k, t: events.append((k, t)))
    smile = "🙂".encode()
    assert not text.feed_bytes(b"ok " + smile[:2])
    assert events == [(ANSWER_PIECE, "ok ")]
    text.feed_bytes(smile[2:])
    assert events[-1] == (ANSWER_PIECE, "🙂")
    assert text.finish().raw == "ok 🙂"


def test_bytes_that_never_make_a_character_are_replaced_at_the_end():
    text = TextPipeline(None)
    text.feed_bytes(b"a\xff b " + "🙂".encode()[:3])
    assert text.finish().raw == "a\ufffd b \ufffd"


def test_text_that_may_start_a_stop_string_is_held_then_released():
    events: list[tuple[str, str]] = []
    text = TextPipeline(None, ("</answer>",), ANSWER, lambda k, t: events.append((k, t)))
    assert not text.feed_text("x </ans")
    assert events == [(ANSWER_PIECE, "x ")]
    assert not text.feed_text("wer! no")  # "</answer!" is not the stop string: all of it is shown
    assert merged(events) == [(ANSWER_PIECE, "x </answer! no")]
    assert text.feed_text(" more </answer> dropped")
    written = text.finish()
    assert (written.text, written.raw, text.stop_hit) == ("x </answer! no more ", "x </answer! no more ", "</answer>")


def test_after_a_stop_string_nothing_held_comes_out():
    text = TextPipeline(None, ("STOP",), ANSWER)
    text.feed_bytes(b"fin STOP" + "é".encode()[:1])
    assert text.stopped
    assert text.finish().raw == "fin "


def test_the_first_of_several_stop_strings_in_the_text_ends_it():
    text = TextPipeline(None, ("bb", "a"), ANSWER)
    assert text.feed_text("xxbbya")
    assert (text.stop_hit, text.finish().text) == ("bb", "xx")


def test_thinking_follows_the_reasoning_split():
    text = TextPipeline(None, start=BEFORE)
    assert not text.thinking
    text.feed_text("<think>")
    assert text.thinking
    text.feed_text("hmm</thi")
    assert text.thinking  # the tag is not complete yet
    text.feed_text("nk>")
    assert not text.thinking


def test_a_forced_call_opening_is_split_but_not_raw():
    """The local engine's forced tool call: the prompt opened the call, the model writes the rest."""
    events: list[tuple[str, str]] = []
    text = TextPipeline(TOOLS, start=ANSWER, on_event=lambda k, t: events.append((k, t)))
    text.open_with("<tool_call>\n")
    text.feed_text('{"name": "weather", "arguments": {"city": "Bern"}}\n</tool_call>')
    written = text.finish()
    assert written.raw == '{"name": "weather", "arguments": {"city": "Bern"}}\n</tool_call>'
    assert [(c.name, c.arguments) for c in written.tool_calls] == [("weather", {"city": "Bern"})]
    assert [k for k, _ in events] == [TOOL_CALL_PIECE]


def test_the_engine_ends_the_thinking_for_the_model():
    """A spent thinking budget: what was held (a partial character, a partial stop string) comes out
    first, then the end of thinking, past the stop strings, as if the model wrote it."""
    text = TextPipeline(None, ("</think>",), THINKING)
    text.feed_bytes(b"long thought </thi" + "é".encode()[:1])
    text.write_for_model("\n</think>\n\n")
    assert not text.thinking
    text.feed_text("the answer")
    written = text.finish()
    assert written.reasoning == "long thought </thi\ufffd\n"
    assert written.text == "the answer"
    assert written.raw == "long thought </thi\ufffd\n</think>\n\nthe answer"


def test_a_servers_reasoning_goes_out_as_it_came():
    """The remote engine: `reasoning_content` deltas are reasoning already, the content still splits."""
    events: list[tuple[str, str]] = []
    text = TextPipeline(None, on_event=lambda k, t: events.append((k, t)))
    text.feed_reasoning("\nfirst ")
    text.feed_reasoning("second")
    text.feed_text("answer")
    written = text.finish()
    assert (written.reasoning, written.text, written.raw) == ("\nfirst second", "answer", "answer")
    assert events == [(REASONING_PIECE, "\nfirst "), (REASONING_PIECE, "second"), (ANSWER_PIECE, "answer")]


def test_an_unclosed_call_is_kept_and_marked():
    text = TextPipeline(TOOLS, start=ANSWER)
    text.feed_text('<tool_call>\n{"name": "weather", "argu')
    [call] = text.finish().tool_calls
    assert call.errors


def test_stop_filter_without_stops_passes_everything():
    stops = StopFilter(())
    assert stops.feed("STOP") == ("STOP", False)
    assert stops.finish() == ""


def _reply(text: str) -> Reply:
    return Reply(text, "", text, "", ReplyStats(), [])


def test_check_reply_takes_plain_json_as_calls_and_validates_them():
    request = ChatRequest([{"role": "user", "content": "?"}], tools=TOOLS)
    reply = check_reply(_reply(json.dumps({"name": "weather", "arguments": {"town": "Bern"}})), request)
    assert reply.text == ""
    [call] = reply.tool_calls
    assert call.name == "weather" and call.errors  # "city" is required


def test_check_reply_validates_structured_output():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    request = ChatRequest([{"role": "user", "content": "?"}], json_schema=schema)
    assert check_reply(_reply('{"n": 3}'), request).json_value == {"n": 3}
    assert check_reply(_reply('{"n": "x"}'), request).json_errors
