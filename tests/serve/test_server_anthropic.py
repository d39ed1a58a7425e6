"""Anthropic's Messages API on the local server (issue 38, item 1), answered by the real `anthropic`
SDK and by raw HTTP shaped as Claude Code 2.1.x sends it. A scripted engine decides the replies where
the test is about shapes; SmolLM2 and the tiny Clover answer where the model matters."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from app.engine.contract import ContextOverflow, ReplyStats
from app.engine.tool_calls import parse_call, validate_call
from app.serve.anthropic_messages import signature, unsigned
from app.serve.unread import WORDS
from tests.helpers.fakes import ScriptedEngine, Turn
from tests.helpers.server_post import post

KEY = "sk-local-test"
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                            "additionalProperties": False}}
SYSTEM = "You are a helpful assistant. Answer briefly."
STATS = ReplyStats(prompt_tokens=40, prompt_evaluated=30, generated_tokens=7, stop_reason="end")


def call(city: str, i: int = 0):
    return validate_call(parse_call(f'{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}', i),
                         [{"type": "function", "function": {"name": "get_weather",
                                                            "parameters": WEATHER["input_schema"]}}])


def engine(turn: Turn | None = None, **kw: Any) -> ScriptedEngine:
    return ScriptedEngine(turn or Turn("Paris.", stats=STATS), loaded=True, prompt_tokens=40, name="script-model",
                          **kw)


def client(server, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key=key, max_retries=0, timeout=180)



def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event; the name must match the data's type, as Anthropic's do."""
    out = []
    for block in raw.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next(line[7:] for line in lines if line.startswith("event: "))
        data = json.loads(next(line[6:] for line in lines if line.startswith("data: ")))
        assert data["type"] == name
        out.append((name, data))
    return out


# ----------------------------------------------------------------------------- the SDK, scripted replies


def test_a_message_with_system_blocks_and_the_sdk(serve):
    e = engine()
    s = serve(e, api_key=KEY)
    r = client(s).messages.create(
        model="claude-sonnet-4-5", max_tokens=100, stop_sequences=["END"], metadata={"user_id": "u1"},
        cache_control={"type": "ephemeral"}, extra_body={"temperature": 0.2, "top_p": 0.8, "top_k": 20},
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": " Answer in English."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Capital of France?",
                                                "cache_control": {"type": "ephemeral"}}]}])
    assert r.type == "message" and r.role == "assistant" and r.content[0].type == "text"
    assert r.content[0].text == "Paris." and r.stop_reason == "end_turn" and r.model == "script-model"
    assert (r.usage.input_tokens, r.usage.cache_read_input_tokens, r.usage.output_tokens) == (30, 10, 7)
    seen = e.requests[-1]
    assert seen.messages == [{"role": "system", "content": "Be brief. Answer in English."},
                             {"role": "user", "content": "Capital of France?"}]
    sp = seen.sampling
    assert (sp.temperature, sp.top_p, sp.top_k, sp.max_tokens, sp.stop) == (0.2, 0.8, 20, 100, ("END",))
    assert seen.enable_thinking is False  # Anthropic's default: no extended thinking


def test_streaming_in_anthropics_event_order(serve):
    turn = Turn("It is sunny.", "Look it up first.", calls=[call("Paris")], stats=STATS,
                stream=[("reasoning", "Look it "), ("reasoning", "up first."), ("answer", "It is "),
                        ("answer", "sunny.")])
    s = serve(engine(turn), api_key=KEY)
    with client(s).messages.stream(model="m", max_tokens=50, tools=[WEATHER],
                                   thinking={"type": "enabled", "budget_tokens": 2000},
                                   messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "It is sunny."
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    thought = final.content[0]
    assert thought.thinking == "Look it up first." and unsigned(thought.signature) == "Look it up first."
    assert final.content[2].input == {"city": "Paris"} and final.content[2].name == "get_weather"
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 7


def test_the_raw_stream_with_a_thinking_a_text_and_a_tool_use_block(serve):
    """Every event in Anthropic's order, as a client that reads the SSE itself sees them: each block's
    start, deltas and stop with its index, the thinking's signature before its stop, the tool's input
    as one input_json_delta, then message_delta with the stop reason and the usage, then message_stop."""
    tool_use = call("Paris")
    turn = Turn("It is sunny.", "Look it up.", calls=[tool_use], stats=STATS,
                stream=[("reasoning", "Look it "), ("reasoning", "up."), ("answer", "It is "), ("answer", "sunny.")])
    s = serve(engine(turn), api_key=KEY)
    status, headers, raw = post(s, "/v1/messages", {
        "model": "m", "max_tokens": 50, "stream": True, "tools": [WEATHER],
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "messages": [{"role": "user", "content": "Weather in Paris?"}]}, {"x-api-key": KEY})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(raw)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] == 40
    assert [data for _, data in events[1:]] == [
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "",
                                                                      "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Look it "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "up."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta",
                                                              "signature": signature("Look it up.")}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "It is "}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "sunny."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": tool_use.id,
                                                                      "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"city": "Paris"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 10,
                   "output_tokens": 7}},
        {"type": "message_stop"}]


def test_claude_codes_request_shape(serve):
    """POST /v1/messages?beta=true as Claude Code 2.1.x sends it: 12 tools (one a server tool), thinking
    adaptive with its text omitted, effort high, context_management, system blocks with
    cache_control, a system role message inside messages, max_tokens 32000, a stream, x-api-key."""
    turn = Turn("Done.", "thinking hard", stats=STATS, stream=[("reasoning", "thinking hard"), ("answer", "Done.")])
    e = engine(turn)
    s = serve(e, api_key=KEY)
    tools = [{**WEATHER, "name": f"tool_{i}", "cache_control": {"type": "ephemeral"}} for i in range(11)]
    tools.append({"type": "web_search_20250305", "name": "web_search", "max_uses": 5})
    body = {"model": "claude-opus-4-5", "max_tokens": 32000, "stream": True, "tools": tools,
            "thinking": {"type": "adaptive", "display": "omitted"}, "output_config": {"effort": "high"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "metadata": {"user_id": "user_abc_account__session_1"},
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "system", "content": "Reminder: tests first."},
                         {"role": "user", "content": [{"type": "text", "text": "Fix the bug.",
                                                       "cache_control": {"type": "ephemeral"}}]}]}
    status, headers, raw = post(s, "/v1/messages?beta=true", body, {
        "x-api-key": KEY, "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
                          "some-future-beta-2099-01-01"})
    assert status == 200 and "web_search" in headers["X-Clover-Warning"]
    assert WORDS not in headers["X-Clover-Warning"]  # every field Claude Code sends is known
    events = sse_events(raw)
    names = [n for n, _ in events]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta",
                     "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    thinking = events[2][1]["content_block"]
    assert thinking == {"type": "thinking", "thinking": "", "signature": ""}
    assert events[3][1]["delta"] == {"type": "signature_delta", "signature": signature("thinking hard")}  # omitted
    assert events[6][1]["delta"] == {"type": "text_delta", "text": "Done."}
    assert events[8][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[0][1]["message"]["usage"]["input_tokens"] == 40
    seen = e.requests[-1]
    system = "You are Claude Code.Be careful.\n\nReminder: tests first."
    assert seen.messages[0] == {"role": "system", "content": system}
    assert len(seen.tools) == 11 and seen.enable_thinking is True and seen.thinking_budget == 16384
    assert seen.sampling.max_tokens == 32000  # the engine cuts it to what the context leaves


def test_tools_round_trip_and_tool_choice(serve):
    e = engine(Turn("", calls=[call("Lisbon", 0), call("Oslo", 1)], stats=STATS, stream=[]))
    s = serve(e, api_key=KEY)
    c = client(s)
    r = c.messages.create(model="m", max_tokens=50, tools=[WEATHER], tool_choice={"type": "any"},
                          messages=[{"role": "user", "content": "Lisbon and Oslo?"}])
    assert [b.input["city"] for b in r.content] == ["Lisbon", "Oslo"] and r.stop_reason == "tool_use"
    assert e.requests[-1].tool_choice == "required"
    r = c.messages.create(model="m", max_tokens=50, tools=[WEATHER],
                          tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                          messages=[{"role": "user", "content": "Lisbon and Oslo?"}])
    assert len(r.content) == 1 and e.requests[-1].tool_choice == "get_weather"
    c.messages.create(model="m", max_tokens=50, tools=[WEATHER], tool_choice={"type": "none"},
                      messages=[{"role": "user", "content": "Hi"}])
    assert e.requests[-1].tools is None
    ids = [b.id for b in r.content]
    c.messages.create(model="m", max_tokens=50, tools=[WEATHER], messages=[
        {"role": "user", "content": "Lisbon and Oslo?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "", "signature": signature("Two calls.")},
                                          {"type": "text", "text": "Looking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Lisbon"}},
                                          {"type": "tool_use", "id": ids[0], "name": "get_weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "24 C"},
                                     {"type": "tool_result", "tool_use_id": ids[0], "is_error": True,
                                      "content": [{"type": "text", "text": "timed out"}]},
                                     {"type": "text", "text": "Which is warmer?"}]}])
    msgs = e.requests[-1].messages
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "user"]
    assert msgs[1]["reasoning_content"] == "Two calls." and msgs[1]["content"] == "Looking."
    assert msgs[1]["tool_calls"][1] == {"type": "function", "id": ids[0],
                                        "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    assert msgs[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "24 C"}
    assert msgs[3]["content"] == "Error: timed out" and msgs[4]["content"] == "Which is warmer?"


def test_stop_sequence_max_tokens_and_images(serve):
    stats = ReplyStats(prompt_tokens=5, prompt_evaluated=5, generated_tokens=3, stop_reason="end", stop_sequence="END")
    e = engine(Turn("abc", stats=stats))
    s = serve(e, api_key=KEY)
    r = client(s).messages.with_raw_response.create(model="m", max_tokens=9, stop_sequences=["END"], messages=[
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": "iVBORw0KGgo="}},
                                     {"type": "text", "text": "What is this?"}]}])
    assert "images" in r.headers["X-Clover-Warning"]
    msg = r.parse()
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "END"
    assert e.requests[-1].messages[-1]["content"].startswith("[image not shown")
    e.script = Turn("ab", stats=ReplyStats(prompt_tokens=5, generated_tokens=9, stop_reason="length"))
    assert client(s).messages.create(model="m", max_tokens=9, messages=[
        {"role": "user", "content": "Go"}]).stop_reason == "max_tokens"
    assert client(s).messages.create(model="m", max_tokens=32000, messages=[  # the context ended first
        {"role": "user", "content": "Go"}]).stop_reason == "model_context_window_exceeded"


def test_count_tokens(serve):
    s = serve(engine(), api_key=KEY)
    n = client(s).messages.count_tokens(model="m", system="Be brief.", tools=[WEATHER],
                                        messages=[{"role": "user", "content": "Hi"}])
    assert n.input_tokens == 40
    # a prompt past the context is counted, not refused
    s2 = serve(engine(count_error=ContextOverflow(9000, 2048)))
    counted = client(s2).messages.count_tokens(model="m", messages=[{"role": "user", "content": "Hi"}])
    assert counted.input_tokens == 9000


def test_errors_are_anthropic_shaped(serve):
    s = serve(engine(count_error=ContextOverflow(9000, 2048)), api_key=KEY)
    with pytest.raises(anthropic.BadRequestError) as err:
        client(s).messages.create(model="m", max_tokens=32000, messages=[{"role": "user", "content": "Hi"}])
    body = err.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "prompt is too long: 9000 tokens > 2048 maximum" in body["error"]["message"]
    assert "--ctx 10240" in body["error"]["message"]
    with pytest.raises(anthropic.AuthenticationError) as auth:
        client(s, key="wrong").messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "Hi"}])
    assert auth.value.body == {"type": "error", "error": {"type": "authentication_error", "message": "invalid API key"}}
    ok = serve(engine(), api_key=KEY)
    for body, says in (({"messages": [{"role": "user", "content": "Hi"}]}, "max_tokens: Field required"),
                       ({"max_tokens": 5, "messages": []}, "non-empty"),
                       ({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "temperature": 1.5},
                        "temperature"),
                       ({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}],
                         "tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER]}, "not among the tools"),
                       ({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}],
                         "thinking": {"type": "enabled"}}, "budget_tokens")):
        status, _, raw = post(ok, "/v1/messages", {"model": "m", **body}, {"x-api-key": KEY})
        answer = json.loads(raw)
        assert status == 400 and answer["type"] == "error" and says in answer["error"]["message"], answer
    status, _, raw = post(ok, "/v1/messages", {"model": "m", "max_tokens": 5, "messages": []},
                          {"Authorization": f"Bearer {KEY}"})  # the Bearer form works here too
    assert status == 400


def test_an_error_mid_stream_is_an_anthropic_error_event(serve):
    s = serve(engine(Turn("x", stream=[("answer", "partial ")], error=RuntimeError("the GPU fell off the bus"))))
    status, _, raw = post(s, "/v1/messages", {"model": "m", "max_tokens": 5, "stream": True,
                                              "messages": [{"role": "user", "content": "Hi"}]})
    events = sse_events(raw)
    assert status == 200 and events[-1][0] == "error"
    assert events[-1][1]["error"] == {"type": "api_error", "message": "the GPU fell off the bus"}


# ----------------------------------------------------------------------------- real models


def test_smollm2_over_the_anthropic_sdk(smollm2_engine, serve):
    s = serve(smollm2_engine, api_key=KEY)
    c = client(s)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    greedy = {"temperature": 0}
    r = c.messages.create(model="m", max_tokens=32000, system=SYSTEM, messages=question, extra_body=greedy)
    assert "Paris" in r.content[0].text and r.stop_reason == "end_turn"  # 32,000 cut to fit the 2,048 context
    counted = c.messages.count_tokens(model="m", system=SYSTEM, messages=question).input_tokens
    assert counted == r.usage.input_tokens + r.usage.cache_read_input_tokens
    with c.messages.stream(model="m", max_tokens=48, system=SYSTEM, messages=question,
                           extra_body=greedy) as stream:
        pieces = list(stream.text_stream)
    assert len(pieces) > 2 and "Paris" in "".join(pieces)
    schema = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"],
              "additionalProperties": False}
    r = c.messages.create(model="m", max_tokens=60, messages=question, extra_body=greedy,
                          output_config={"format": {"type": "json_schema", "schema": schema}})
    assert set(json.loads(r.content[0].text)) == {"capital"}
    with pytest.raises(anthropic.BadRequestError, match=r"prompt is too long: \d+ tokens > 2048 maximum"):
        c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "word " * 3000}])


def test_a_forced_tool_is_held_to_its_schema(qwen35moe_engine, serve):
    """The tiny Clover has random weights: only the grammar makes its call fit the tool's schema."""
    s = serve(qwen35moe_engine, api_key=KEY)
    tool = {"name": "get_weather", "input_schema": {  # closed values: a random model cannot write past them
        "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                         "metric": {"type": "boolean"}}, "required": ["city", "metric"]}}
    for choice in ({"type": "tool", "name": "get_weather"}, {"type": "any"}):
        r = client(s).messages.create(model="m", max_tokens=200, tools=[tool], tool_choice=choice,
                                      messages=[{"role": "user", "content": "Weather in Paris?"}])
        uses = [b for b in r.content if b.type == "tool_use"]
        assert uses and uses[0].name == "get_weather" and uses[0].input["city"] in ("Paris", "Oslo"), r
        assert isinstance(uses[0].input["metric"], bool)
        assert not getattr(uses[0], "x_clover_errors", None) and r.stop_reason == "tool_use"
