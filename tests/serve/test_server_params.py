"""Parameters the local server used to ignore silently (issue 29, item 6, and the tool-call errors of
item 2): each is now applied, or refused with a 400 that names it. A scripted engine stands in for
the model, so these run in a second; each test failed before its fix."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from app.engine.contract import ReplyStats
from app.engine.tool_calls import ToolCall, parse_call
from app.serve.server import BadRequest, LocalServer, parse_request
from tests.helpers.fakes import ScriptedEngine, Turn

QUESTION = {"role": "user", "content": "What is the weather in Lisbon?"}
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
    "additionalProperties": False}}}]


def script_engine(calls: list[ToolCall] | None = None, stats: ReplyStats | None = None,
                  tools_in_template: bool = True, name: str = "script-model") -> ScriptedEngine:
    """Records each request; answers with the calls and stats it was given ("Sunny." without calls)."""
    stats = stats or ReplyStats(prompt_tokens=12, prompt_evaluated=12, generated_tokens=3, stop_reason="end")
    return ScriptedEngine(Turn("" if calls else "Sunny.", calls=calls or [], stats=stats), loaded=True,
                          prompt_tokens=12, name=name, tools_in_template=tools_in_template)


def two_calls() -> list[ToolCall]:
    return [parse_call('{"name": "get_weather", "arguments": {"city": "Lisbon"}}'),
            parse_call('{"name": "get_weather", "arguments": {"city": "Oslo"}}')]


def client(server: LocalServer, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=30)


def http(server: LocalServer, path: str, body: dict | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request, errors included."""
    data = None if body is None else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(server.url.removesuffix("/v1") + path, data=data, headers=h,
                                 method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: {")]


def bad(body: dict[str, Any]) -> str:
    with pytest.raises(BadRequest) as err:
        parse_request({"messages": [QUESTION], **body})
    return str(err.value)


# ----------------------------------------------------------------------------- logit_bias


@pytest.mark.parametrize("bias, says", [
    ({"abc": 5}, "'abc' is not a token id"),
    ({"-3": 5}, "'-3' is not a token id"),
    ({"1.5": 5}, "'1.5' is not a token id"),
    ({"60": 101}, "from -100 to 100"),
    ({"60": -100.5}, "from -100 to 100"),
    ({"60": "x"}, "from -100 to 100"),
    ({"60": True}, "from -100 to 100"),
    ([60], "must be an object"),
])
def test_invalid_logit_bias_is_a_400_that_names_it(bias, says):
    message = bad({"logit_bias": bias})
    assert "logit_bias" in message and says in message


def test_a_valid_logit_bias_reaches_the_engines_sampler(serve):
    engine = script_engine()
    s = serve(engine)
    status, _, body = http(s, "/v1/chat/completions", {"messages": [QUESTION], "logit_bias": {"60": -100, "7": 2.5}})
    assert status == 200, body
    assert engine.requests[-1].sampling.logit_bias == ((60, -100.0), (7, 2.5))
    for nothing in ({}, None):  # no bias asked for: none
        status, _, _ = http(s, "/v1/chat/completions", {"messages": [QUESTION], "logit_bias": nothing})
        assert status == 200 and engine.requests[-1].sampling.logit_bias == ()


def test_logit_bias_moves_the_reply_and_a_token_outside_the_vocabulary_is_a_400(smollm2_engine, serve):
    """+100 makes a token the greedy choice, -100 bans it (llama.cpp's logit-bias sampler in the chain)."""
    llm = smollm2_engine.llm
    s = serve(smollm2_engine)
    base = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "temperature": 0,
            "max_tokens": 4, "logprobs": True}
    status, _, body = http(s, "/v1/chat/completions", base)
    first = json.loads(body)["choices"][0]["logprobs"]["content"][0]["token"]
    banned = llm.tokenize(first.encode(), add_bos=False, special=False)[0]
    status, _, body = http(s, "/v1/chat/completions", {**base, "logit_bias": {str(banned): -100}})
    assert status == 200 and json.loads(body)["choices"][0]["logprobs"]["content"][0]["token"] != first
    forced = llm.tokenize(b" zebra", add_bos=False, special=False)[0]
    status, _, body = http(s, "/v1/chat/completions", {**base, "logit_bias": {str(forced): 100}})
    assert status == 200
    assert json.loads(body)["choices"][0]["logprobs"]["content"][0]["token"] == llm.detokenize([forced]).decode()
    status, _, body = http(s, "/v1/chat/completions", {**base, "logit_bias": {str(llm.n_vocab()): 5}})
    assert status == 400 and b"not in the model's vocabulary" in body


# ----------------------------------------------------------------------------- stream_options.include_usage


def test_include_usage_sends_openai_usage_only_chunk(serve):
    s = serve(script_engine(stats=ReplyStats(prompt_tokens=40, prompt_evaluated=13, generated_tokens=3,
                                            stop_reason="end")))
    chunks = list(client(s).chat.completions.create(model="m", messages=[QUESTION], stream=True,
                                                     stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (40, 3, 43)
    assert last.usage.prompt_tokens_details.cached_tokens == 27
    assert all(c.usage is None for c in chunks[:-1])  # the finish chunk carries no usage of its own
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_no_usage_chunk_unless_asked(serve):
    s = serve(script_engine())
    for options in (None, {"include_usage": False}):
        body = {"messages": [QUESTION], "stream": True, **({"stream_options": options} if options else {})}
        status, _, raw = http(s, "/v1/chat/completions", body)
        assert status == 200
        assert all("usage" not in e for e in events(raw)) and all(e["choices"] for e in events(raw))


def test_stream_options_are_checked():
    assert "stream_options" in bad({"stream_options": {"include_usage": True}})  # only with stream
    assert "include_usage" in bad({"stream": True, "stream_options": {"include_usage": "yes"}})
    assert "stream_options" in bad({"stream": True, "stream_options": 5})


# ----------------------------------------------------------------------------- usage: cached prompt tokens


def test_usage_says_how_many_prompt_tokens_came_from_the_cache(serve):
    s = serve(script_engine(stats=ReplyStats(prompt_tokens=40, prompt_evaluated=13, generated_tokens=3,
                                            stop_reason="end")))
    r = client(s).chat.completions.create(model="m", messages=[QUESTION])
    assert r.usage.prompt_tokens == 40 and r.usage.prompt_tokens_details.cached_tokens == 27
    odd = serve(script_engine(stats=ReplyStats(prompt_tokens=5, prompt_evaluated=9, stop_reason="end")))
    assert client(odd).chat.completions.create(model="m", messages=[QUESTION]).usage.prompt_tokens_details \
        .cached_tokens == 0  # never negative


# ----------------------------------------------------------------------------- parallel_tool_calls, functions


def test_parallel_tool_calls_false_returns_one_call(serve):
    s = serve(script_engine(calls=two_calls()))
    c = client(s)
    both = c.chat.completions.create(model="m", messages=[QUESTION], tools=WEATHER, parallel_tool_calls=True)
    assert [t.function.name for t in both.choices[0].message.tool_calls] == ["get_weather"] * 2
    one = c.chat.completions.create(model="m", messages=[QUESTION], tools=WEATHER, parallel_tool_calls=False)
    calls = one.choices[0].message.tool_calls
    assert len(calls) == 1 and json.loads(calls[0].function.arguments) == {"city": "Lisbon"}
    streamed = c.chat.completions.create(model="m", messages=[QUESTION], tools=WEATHER, parallel_tool_calls=False,
                                         stream=True)
    deltas = [tc for ch in streamed if ch.choices for tc in ch.choices[0].delta.tool_calls or ()]
    assert len(deltas) == 1
    assert "parallel_tool_calls" in bad({"tools": WEATHER, "parallel_tool_calls": "no"})


def test_legacy_functions_are_tools(serve):
    engine = script_engine(calls=two_calls()[:1])
    s = serve(engine)
    functions = [t["function"] for t in WEATHER]
    status, _, raw = http(s, "/v1/chat/completions", {"messages": [QUESTION], "functions": functions,
                                                      "function_call": {"name": "get_weather"}})
    assert status == 200
    assert engine.requests[-1].tools == WEATHER and engine.requests[-1].tool_choice == "get_weather"
    choice = json.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "function_call" and "tool_calls" not in choice["message"]
    call = choice["message"]["function_call"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Lisbon"}
    status, _, raw = http(s, "/v1/chat/completions", {"messages": [QUESTION], "functions": functions,
                                                      "stream": True})
    deltas = [e["choices"][0]["delta"] for e in events(raw) if e["choices"]]
    assert any(d.get("function_call", {}).get("name") == "get_weather" for d in deltas)
    assert events(raw)[-1]["choices"][0]["finish_reason"] == "function_call"
    none, _ = parse_request({"messages": [QUESTION], "functions": functions, "function_call": "none"})
    assert none.tools is None
    # an earlier legacy round in the history: the call and its result reach the template as a tool round
    history, _ = parse_request({"messages": [
        QUESTION, {"role": "assistant", "content": None,
                   "function_call": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}},
        {"role": "function", "name": "get_weather", "content": '{"temperature": 24}'}], "functions": functions})
    assert history.messages[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {"city": "Lisbon"}}
    assert history.messages[2]["role"] == "tool" and history.messages[2]["name"] == "get_weather"
    assert "functions" in bad({"functions": functions, "tools": WEATHER})
    assert "function_call" in bad({"functions": functions, "function_call": {"name": "nope"}})


# ----------------------------------------------------------------------------- tools the template does not read


def test_tools_a_template_does_not_read_are_never_dropped_silently(serve):
    engine = script_engine(tools_in_template=False)
    s = serve(engine)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        status, _, raw = http(s, "/v1/chat/completions", {"messages": [QUESTION], "tools": WEATHER,
                                                          "tool_choice": choice})
        assert status == 400 and b"chat template does not read tools" in raw
    assert engine.requests == []
    status, headers, raw = http(s, "/v1/chat/completions", {"messages": [QUESTION], "tools": WEATHER})
    assert status == 200 and "tools were not shown to the model" in headers["X-Clover-Warning"]
    assert "tools were not shown to the model" in json.loads(raw)["warnings"][0]
    status, headers, raw = http(s, "/v1/chat/completions", {"messages": [QUESTION], "tools": WEATHER,
                                                            "stream": True})
    assert status == 200 and "X-Clover-Warning" in headers
    assert "tools were not shown to the model" in events(raw)[0]["warnings"][0]
    status, headers, raw = http(s, "/v1/chat/completions", {"messages": [QUESTION]})  # no tools: nothing to say
    assert status == 200 and "X-Clover-Warning" not in headers and "warnings" not in json.loads(raw)
    reading = serve(script_engine(tools_in_template=True))
    status, headers, raw = http(reading, "/v1/chat/completions", {"messages": [QUESTION], "tools": WEATHER})
    assert status == 200 and "X-Clover-Warning" not in headers and "warnings" not in json.loads(raw)


# ----------------------------------------------------------------------------- tool calls that did not validate


def test_a_call_that_breaks_its_schema_says_so(serve):
    bad_call = parse_call('{"name": "get_weather", "arguments": {"gaben": "gaben_gaben"}}')
    bad_call.errors = ["'city' is a required property", "Additional properties are not allowed ('gaben' was "
                                                         "unexpected)"]
    good = parse_call('{"name": "get_weather", "arguments": {"city": "Oslo"}}')
    s = serve(script_engine(calls=[bad_call, good]))
    status, _, raw = http(s, "/v1/chat/completions", {"messages": [QUESTION], "tools": WEATHER})
    calls = json.loads(raw)["choices"][0]["message"]["tool_calls"]
    assert calls[0]["x_clover_errors"] == bad_call.errors and "x_clover_errors" not in calls[1]
    status, _, raw = http(s, "/v1/chat/completions", {"messages": [QUESTION], "tools": WEATHER, "stream": True})
    streamed = [tc for e in events(raw) if e["choices"] for tc in e["choices"][0]["delta"].get("tool_calls", ())]
    assert streamed[0]["x_clover_errors"] == bad_call.errors and "x_clover_errors" not in streamed[1]


# ----------------------------------------------------------------------------- messages, routes, headers, bodies


def test_developer_role_is_the_system_prompt():
    req, _ = parse_request({"messages": [{"role": "developer", "content": "Answer in French."}, QUESTION]})
    assert req.messages[0] == {"role": "system", "content": "Answer in French."}


def test_a_model_is_retrieved_by_its_id(serve):
    s = serve(script_engine())
    model = client(s).models.retrieve("script-model")
    assert model.id == "script-model" and model.object == "model"
    status, _, raw = http(s, "/v1/models/script-model")
    assert status == 200 and json.loads(raw)["id"] == "script-model"
    with pytest.raises(openai.NotFoundError, match="no model 'other'"):
        client(s).models.retrieve("other")
    spaced = serve(script_engine(name="Smol LM 2 (8k) [test]"))  # a model's general.name: a slug is served
    assert client(spaced).models.list().data[0].id == "Smol-LM-2-8k-test"
    assert client(spaced).models.retrieve("Smol-LM-2-8k-test").id == "Smol-LM-2-8k-test"


def test_a_model_file_is_served_under_its_file_name_as_a_slug():
    from app.serve.server import model_slug

    assert model_slug("/models/SmolLM2-135M-Instruct.Q4_1.gguf") == "SmolLM2-135M-Instruct.Q4_1"
    assert model_slug("C:\\models\\Clover 35B (A3B) [Q4].GGUF") == "Clover-35B-A3B-Q4"
    assert model_slug("Smollm2 135M 8k Lc100K Mix1 Ep2") == "Smollm2-135M-8k-Lc100K-Mix1-Ep2"


def test_the_bearer_scheme_is_case_insensitive(serve):
    s = serve(script_engine(), api_key="sk-k")
    for given in ("bearer sk-k", "BEARER sk-k", "Bearer  sk-k"):
        assert http(s, "/v1/models", headers={"Authorization": given})[0] == 200, given
    for given in ("Basic sk-k", "bearer sk-x", "sk-k", "bearer"):
        assert http(s, "/v1/models", headers={"Authorization": given})[0] == 401, given


def test_a_body_shorter_than_its_content_length_times_out(serve):
    s = serve(script_engine(), read_timeout=1.0)
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n")
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
        sock.sendall(head + b'{"messages"')  # 11 of the 100 bytes, and the client keeps the connection
        answer = b""
        while chunk := sock.recv(65536):  # the server answers and closes: recv returns b""
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ") and b"Content-Length says 100" in answer
    assert time.monotonic() - started < 8


def test_max_completion_tokens_errors_name_it():
    message = bad({"max_completion_tokens": 0})
    assert "'max_completion_tokens'" in message and "max_tokens'" not in message
    assert "'max_tokens'" in bad({"max_tokens": -1})
