"""OpenAI's Responses API on the local server (issue 38, item 2), answered by the real `openai` SDK,
the `openai-agents` SDK and raw HTTP shaped as Codex sends it. A scripted engine decides the replies
where the test is about shapes; SmolLM2 and the tiny Clover answer where the model matters."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from app.engine.contract import ContextOverflow, ReplyStats
from app.engine.tool_calls import parse_call, validate_call
from app.serve.anthropic_messages import signature
from app.serve.response_store import ResponseStore
from app.serve.unread import WORDS
from tests.helpers import server_post
from tests.helpers.fakes import ScriptedEngine, Turn

KEY = "sk-local-test"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}
STATS = ReplyStats(prompt_tokens=40, prompt_evaluated=30, generated_tokens=7, stop_reason="end", reasoning_tokens=3)
SYSTEM = "You are a helpful assistant. Answer briefly."


def call(city: str, i: int = 0):
    return validate_call(parse_call(f'{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}', i),
                         [{"type": "function", "function": {"name": "get_weather",
                                                            "parameters": WEATHER["parameters"]}}])


def engine(turn: Turn | None = None, **kw: Any) -> ScriptedEngine:
    return ScriptedEngine(turn or Turn("Paris.", stats=STATS), loaded=True, prompt_tokens=40, name="script-model",
                          **kw)


def client(server, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=180)


def post(server, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    return server_post.post(server, path, body, {"Authorization": f"Bearer {KEY}", **(headers or {})})


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if lines:
            name = next(line[7:] for line in lines if line.startswith("event: "))
            data = json.loads(next(line[6:] for line in lines if line.startswith("data: ")))
            assert data["type"] == name
            out.append(data)
    return out


# ----------------------------------------------------------------------------- the SDK, scripted replies


def test_a_response_from_a_string_input(serve):
    e = engine(Turn("Paris.", "France's capital.", stats=STATS))
    s = serve(e, api_key=KEY)
    r = client(s).responses.create(model="m", instructions="Be brief.", input="Capital of France?",
                                   max_output_tokens=64, temperature=0.3, top_p=0.5, reasoning={"effort": "low"},
                                   prompt_cache_key="k1", store=False)
    assert r.output_text == "Paris." and r.status == "completed" and r.object == "response"
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "France's capital."
    u = r.usage
    assert (u.input_tokens, u.input_tokens_details.cached_tokens, u.output_tokens) == (40, 10, 7)
    assert u.output_tokens_details.reasoning_tokens == 3 and u.total_tokens == 47
    seen = e.requests[-1]
    assert seen.messages == [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "Capital of France?"}]
    sp = seen.sampling
    assert (sp.max_tokens, sp.temperature, sp.top_p) == (64, 0.3, 0.5)
    assert seen.enable_thinking is True and seen.thinking_budget == 1024


def test_codexs_request_shape(serve):
    """Codex: developer and user messages, 9 tools of types function, namespace and web_search,
    include reasoning.encrypted_content, reasoning summary auto, store false, a stream."""
    turn = Turn("Done.", "Plan it.", stats=STATS, stream=[("reasoning", "Plan "), ("reasoning", "it."),
                                                          ("answer", "Do"), ("answer", "ne.")])
    e = engine(turn)
    s = serve(e, api_key=KEY)
    tools = [{**WEATHER, "name": f"tool_{i}"} for i in range(7)]
    tools += [{"type": "namespace", "name": "mcp__files", "tools": []}, {"type": "web_search"}]
    body = {"model": "gpt-5-codex", "instructions": "You are Codex.", "stream": True, "store": False,
            "tools": tools, "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc",
            "client_metadata": {"x-codex-installation-id": "abc"},
            "input": [{"type": "message", "role": "developer",
                       "content": [{"type": "input_text", "text": "Sandbox: read-only."}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<env/>"}]},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]}]}
    status, headers, raw = post(s, "/v1/responses", body)
    assert status == 200 and "web_search" in headers["X-Clover-Warning"] and "namespace" in headers["X-Clover-Warning"]
    assert WORDS not in headers["X-Clover-Warning"]  # every field Codex sends is known
    events = sse_events(raw)
    assert [ev["type"] for ev in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [ev["sequence_number"] for ev in events] == list(range(len(events)))
    reasoning = events[6]["item"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Plan it."}]
    assert reasoning["encrypted_content"] == signature("Plan it.")
    done = events[-1]["response"]
    assert [o["type"] for o in done["output"]] == ["reasoning", "message"]
    assert done["output"][1]["content"][0]["text"] == "Done."
    assert done["usage"]["input_tokens_details"]["cached_tokens"] == 10 and not done["store"]
    seen = e.requests[-1]
    assert seen.messages[0] == {"role": "system", "content": "You are Codex.\n\nSandbox: read-only."}
    assert [m["role"] for m in seen.messages] == ["system", "user", "user"] and len(seen.tools) == 7
    assert not ResponseStore().folder.exists() or not list(ResponseStore().folder.iterdir())  # store false


def test_streamed_function_calls_with_the_sdk(serve):
    e = engine(Turn("", calls=[call("Lisbon", 0), call("Oslo", 1)], stats=STATS, stream=[]))
    s = serve(e, api_key=KEY)
    with client(s).responses.stream(model="m", input="Lisbon and Oslo?", tools=[WEATHER]) as stream:
        kinds = [ev.type for ev in stream]
        final = stream.get_final_response()
    assert kinds.count("response.function_call_arguments.delta") == 2 and kinds[-1] == "response.completed"
    calls = [o for o in final.output if o.type == "function_call"]
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Lisbon", "Oslo"]
    assert all(c.call_id.startswith("call_") and c.id.startswith("fc_") for c in calls)


def test_function_call_items_and_reasoning_round_trip(serve):
    e = engine()
    s = serve(e, api_key=KEY)
    client(s).responses.create(model="m", tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
                               parallel_tool_calls=False, input=[
        {"role": "user", "content": "Lisbon and Oslo?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": signature("Two cities.")},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Lisbon"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "24 C"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "9 C"}]}])
    seen = e.requests[-1]
    msgs = seen.messages
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool"]
    assert msgs[1]["reasoning_content"] == "Two cities."
    assert [c["function"]["arguments"] for c in msgs[1]["tool_calls"]] == [{"city": "Lisbon"}, {"city": "Oslo"}]
    assert msgs[3] == {"role": "tool", "tool_call_id": "c2", "content": "9 C"}
    assert seen.tool_choice == "get_weather"


def test_store_previous_response_id_and_retrieve(serve, clover_home):
    e = engine()
    s = serve(e, api_key=KEY, responses=ResponseStore(limit=2))
    c = client(s)
    first = c.responses.create(model="m", instructions="Old rules.", input="Capital of France?")
    assert (clover_home / "data" / "server-responses" / f"{first.id}.json").is_file()
    second = c.responses.create(model="m", instructions="New rules.", input="And of Spain?",
                                previous_response_id=first.id)
    assert e.requests[-1].messages == [{"role": "system", "content": "New rules."},  # instructions not carried over
                                       {"role": "user", "content": "Capital of France?"},
                                       {"role": "assistant", "content": "Paris."},
                                       {"role": "user", "content": "And of Spain?"}]
    assert c.responses.retrieve(second.id).output_text == "Paris."
    c.responses.create(model="m", input="Third.")  # the store keeps 2: the first goes
    with pytest.raises(openai.BadRequestError, match="not found"):
        c.responses.create(model="m", input="Go on.", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(first.id)
    unstored = c.responses.create(model="m", input="Private.", store=False)
    with pytest.raises(openai.BadRequestError):
        c.responses.create(model="m", input="Go on.", previous_response_id=unstored.id)


def test_errors_and_refusals(serve):
    s = serve(engine(count_error=ContextOverflow(9000, 2048)), api_key=KEY)
    with pytest.raises(openai.BadRequestError) as err:
        client(s).responses.create(model="m", input="Hi", max_output_tokens=100_000)
    assert "9,000 tokens, more than the 2,048-token context" in str(err.value) and "--ctx 10240" in str(err.value)
    ok = serve(engine(), api_key=KEY)
    for body, says in (({"input": 5}, "input"), ({"input": "Hi", "background": True}, "background"),
                       ({"input": "Hi", "tool_choice": {"type": "web_search"}}, "tool_choice"),
                       ({"input": "Hi", "reasoning": {"effort": "enormous"}}, "reasoning.effort"),
                       ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
                       ({"input": "Hi", "text": {"format": {"type": "json_schema"}}}, "schema")):
        status, _, raw = post(ok, "/v1/responses", {"model": "m", **body})
        assert status == 400 and says in json.loads(raw)["error"]["message"], raw
    with pytest.raises(openai.AuthenticationError):
        client(ok, key="wrong").responses.create(model="m", input="Hi")


def test_a_reply_cut_by_max_output_tokens_is_incomplete_while_thinking_or_answering(serve):
    """text.format json_schema under thinking, as OpenAI answers it: cut while thinking, the response is
    incomplete with the reasoning item only (incomplete) and an empty output_text; cut while writing
    the JSON, the message item is incomplete. Streamed and not, the same output."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    cut = ReplyStats(prompt_tokens=40, generated_tokens=20, stop_reason="length", reasoning_tokens=20)
    body = {"model": "m", "input": "Weather?", "reasoning": {"effort": "low"}, "max_output_tokens": 20,
            "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema}}}
    for turn, kinds, statuses, text in (
            (Turn("", "Let me think about the wea", stats=cut), ["reasoning"], ["incomplete"], ""),
            (Turn('{"ok": tr', "Sunny, so", stats=cut), ["reasoning", "message"], ["completed", "incomplete"],
             '{"ok": tr')):
        s = serve(engine(turn), api_key=KEY)
        r = client(s).responses.create(**body)
        assert (r.status, r.incomplete_details.reason, r.output_text) == ("incomplete", "max_output_tokens", text)
        assert [o.type for o in r.output] == kinds and [o.status for o in r.output] == statuses
        status, _, raw = post(s, "/v1/responses", {**body, "stream": True})
        last = sse_events(raw)[-1]
        assert status == 200 and last["type"] == "response.incomplete"
        done = last["response"]
        assert (done["status"], done["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
        assert [o["type"] for o in done["output"]] == kinds and [o["status"] for o in done["output"]] == statuses


def test_an_error_mid_stream_is_an_error_then_response_failed(serve):
    s = serve(engine(Turn("x", stream=[("answer", "partial ")], error=RuntimeError("the GPU fell off the bus"))))
    status, _, raw = post(s, "/v1/responses", {"model": "m", "stream": True, "input": "Hi"})
    events = sse_events(raw)
    assert status == 200 and [ev["type"] for ev in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"]["message"] == "the GPU fell off the bus"


def test_an_agent_runs_its_function_tool_and_answers_with_the_result(serve):
    """The openai-agents SDK over /v1/responses: the scripted model calls the tool, the SDK runs it,
    and the final answer is written from the result the SDK sent back."""
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    def decide(request) -> Turn:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if results:
            return Turn(f"The weather: {results[-1]}", stats=STATS)
        return Turn("", calls=[call("Lisbon")], stats=STATS, stream=[])

    e = ScriptedEngine(decide, loaded=True, name="script-model")
    s = serve(e, api_key=KEY)
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Weather in a city."""
        ran.append(city)
        return f"{city}: 24 C and sunny"

    set_tracing_disabled(True)
    model = OpenAIResponsesModel(model="local", openai_client=openai.AsyncOpenAI(base_url=s.url, api_key=KEY,
                                                                                 max_retries=0))
    agent = Agent(name="weather", instructions="Use the tool.", tools=[get_weather], model=model)
    result = asyncio.run(Runner.run(agent, "Weather in Lisbon?"))
    assert ran == ["Lisbon"] and result.final_output == "The weather: Lisbon: 24 C and sunny"
    assert e.requests[-1].tools[0]["function"]["name"] == "get_weather"


# ----------------------------------------------------------------------------- real models


def test_smollm2_over_the_responses_api(smollm2_engine, serve):
    s = serve(smollm2_engine, api_key=KEY)
    c = client(s)
    r = c.responses.create(model="m", instructions=SYSTEM, input="What is the capital of France?", temperature=0)
    assert "Paris" in r.output_text and r.status == "completed"  # no max_output_tokens: the context's rest
    deltas = []
    with c.responses.stream(model="m", instructions=SYSTEM, input="What is the capital of France?",
                            temperature=0, max_output_tokens=48) as stream:
        for ev in stream:
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    assert len(deltas) > 2 and "Paris" in "".join(deltas) and final.output_text == "".join(deltas)
    schema = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"],
              "additionalProperties": False}
    r = c.responses.create(model="m", input="What is the capital of France?", temperature=0, max_output_tokens=60,
                           text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}})
    assert set(json.loads(r.output_text)) == {"capital"}
    r = c.responses.create(model="m", input="Capital?", max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def test_a_forced_function_call_is_held_to_its_schema(qwen35moe_engine, serve):
    s = serve(qwen35moe_engine, api_key=KEY)
    tool = {"type": "function", "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                         "metric": {"type": "boolean"}}, "required": ["city", "metric"]}}
    for choice in ({"type": "function", "name": "get_weather"}, "required"):
        r = client(s).responses.create(model="m", input="Weather in Paris?", tools=[tool], tool_choice=choice,
                                       max_output_tokens=200)
        calls = [o for o in r.output if o.type == "function_call"]
        args = json.loads(calls[0].arguments)
        assert calls[0].name == "get_weather" and args["city"] in ("Paris", "Oslo") and isinstance(args["metric"], bool)


def test_structured_output_under_thinking_is_json_in_output_text(qwen35moe_engine, serve):
    """Thinking on (effort low) and text.format json_schema: the reasoning is free and the answer after
    it is held to the schema, so output_text is JSON that fits it. The tiny Clover has random weights:
    greedy, this input is one after which it ends its thinking by itself (57 tokens here), as a real
    model does; most inputs make it write its end-of-reply token while still thinking."""
    s = serve(qwen35moe_engine, api_key=KEY)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    r = client(s).responses.create(model="m", input="Weather?", reasoning={"effort": "low"}, temperature=0,
                                   max_output_tokens=1100,
                                   text={"format": {"type": "json_schema", "name": "answer", "schema": schema}})
    assert [o.type for o in r.output] == ["reasoning", "message"] and r.status == "completed"
    assert r.output[0].content[0].text and "</think>" not in r.output_text
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    answer = json.loads(r.output_text)
    assert set(answer) == {"ok"} and isinstance(answer["ok"], bool)
