"""The local OpenAI-compatible server, answered by the real `openai` client on loopback."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest

from app.engine.contract import ReplyStats
from app.engine.local import Engine
from app.engine.tool_calls import parse_call
from app.serve.server import LocalServer
from tests.helpers.fakes import ScriptedEngine, Turn

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
QUESTION = {"role": "user", "content": "What is the capital of France?"}


@pytest.fixture()
def server(smollm2_engine):
    s = LocalServer(smollm2_engine, api_key="sk-local-test")
    s.start()
    yield s
    s.stop()


def client(server, key="sk-local-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=120)


def test_chat_completion(server):
    r = client(server).chat.completions.create(model="local", messages=[SYSTEM, QUESTION], temperature=0.0,
                                               max_tokens=48)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens > 0
    assert client(server).models.list().data[0].id == "SmolLM2-135M-Instruct.Q4_1"  # the file, as a slug


def test_streaming(server):
    stream = client(server).chat.completions.create(model="local", messages=[SYSTEM, QUESTION], temperature=0.0,
                                                    max_tokens=48, stream=True)
    pieces, finish = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert len(pieces) > 3 and "Paris" in "".join(pieces) and finish == "stop"


def test_structured_output_over_the_api(server):
    schema = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"],
              "additionalProperties": False}
    r = client(server).chat.completions.create(
        model="local", messages=[QUESTION], temperature=0.0, max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    assert set(json.loads(r.choices[0].message.content)) == {"capital"}


def test_bad_requests_get_clear_4xx(server):
    c = client(server)
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="local", messages=[])
    assert "'messages' must be a non-empty list" in str(err.value)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        c.chat.completions.create(model="local", messages=[QUESTION], temperature=7)
    with pytest.raises(openai.BadRequestError, match="tools"):
        c.chat.completions.create(model="local", messages=[QUESTION], tools=[{"type": "function", "function": {}}])
    with pytest.raises(openai.AuthenticationError):
        client(server, key="wrong").chat.completions.create(model="local", messages=[QUESTION])
    req = urllib.request.Request(server.url + "/chat/completions", data=b"{not json", method="POST",
                                 headers={"Authorization": "Bearer sk-local-test", "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as http_err:
        urllib.request.urlopen(req)
    assert http_err.value.code == 400 and b"not valid JSON" in http_err.value.read()


def two_calls_engine() -> ScriptedEngine:
    """Answers with two tool calls: the server's tool-call output, whatever the model."""
    calls = [parse_call('{"name": "get_weather", "arguments": {"city": "Lisbon"}}', 0),
             parse_call('{"name": "get_weather", "arguments": {"city": "Oslo"}}', 1)]
    stats = ReplyStats(prompt_tokens=20, generated_tokens=30, stop_reason="end")
    return ScriptedEngine(Turn("", "Two cities, two calls.", calls, stats, stream=[]), loaded=True, prompt_tokens=20,
                          name="canned")


def test_tool_calls_in_openai_shape():
    engine = two_calls_engine()
    s = LocalServer(engine)
    s.start()
    try:
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
        c = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0)
        r = c.chat.completions.create(model="local", tools=tools, messages=[
            {"role": "user", "content": "Is it warmer in Lisbon or in Oslo?"}], extra_body={
            "chat_template_kwargs": {"enable_thinking": False}})
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls"
        assert [json.loads(c.function.arguments)["city"] for c in calls] == ["Lisbon", "Oslo"]
        seen = engine.requests[-1]
        assert seen.enable_thinking is False and seen.tools[0]["function"]["name"] == "get_weather"
        # the conversation continues with tool results in OpenAI form
        c.chat.completions.create(model="local", tools=tools, messages=[
            {"role": "user", "content": "Is it warmer in Lisbon or in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [cl.model_dump() for cl in calls]},
            {"role": "tool", "tool_call_id": calls[0].id, "content": '{"temperature": 24}'},
            {"role": "tool", "tool_call_id": calls[1].id, "content": '{"temperature": 9}'}])
        msgs = engine.requests[-1].messages
        assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Lisbon"}
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool"]
    finally:
        s.stop()


def test_no_model_loaded_is_503():
    s = LocalServer(Engine())
    s.start()
    try:
        with pytest.raises(openai.InternalServerError) as err:
            openai.OpenAI(base_url=s.url, api_key="x", max_retries=0).chat.completions.create(
                model="local", messages=[QUESTION])
        assert err.value.status_code == 503
    finally:
        s.stop()
