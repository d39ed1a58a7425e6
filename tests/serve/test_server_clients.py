"""Held-out checks of the local server: what real clients and hostile requests found. Each test
failed before its fix (tests/serve/test_server.py covers the ordinary use)."""

from __future__ import annotations

import json
import socket
import time

import openai
import pytest

from app.engine.chat_template import ChatTemplate, TemplateError
from app.engine.contract import EngineError
from app.engine.tool_calls import parse_call
from app.serve.server import LocalServer, parse_request
from tests.helpers.fakes import ScriptedEngine, Turn

QUESTION = {"role": "user", "content": "What is the capital of France?"}
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def script_engine(calls: int = 0, fail_in_stream: bool = False,
                  count_error: Exception | None = None) -> ScriptedEngine:
    """Streams "partial ", then answers with `calls` tool calls (new ones, with new ids, each reply) or
    text, or fails as told."""

    def turn(request) -> Turn:
        tool_calls = [parse_call(f'{{"name": "get_weather", "arguments": {{"city": "C{i}"}}}}', i)
                      for i in range(calls)]
        return Turn("" if tool_calls else "partial answer", calls=tool_calls, stream=[("answer", "partial ")],
                    error=RuntimeError("the GPU fell off the bus") if fail_in_stream else None)

    return ScriptedEngine(turn, loaded=True, count_error=count_error, name="script-model")


def raw(server, data: bytes, keep_open: bool = False, timeout: float = 10) -> bytes:
    """Send bytes on one connection; everything the server answers until it closes (or goes quiet)."""
    port = server.port
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if not keep_open:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        sock.settimeout(2 if keep_open else timeout)
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks)


def post(path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    h = {"Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
    return (f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode() + body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


def statuses(answer: bytes) -> list[int]:
    import re

    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


BODY = json.dumps({"messages": [QUESTION]}).encode()


# ----------------------------------------------------------------------------- keep-alive and bodies


@pytest.mark.slow  # waits out the server's read timeout
def test_a_refused_request_leaves_no_body_to_be_read_as_the_next(serve):
    s = serve(script_engine(), api_key="right")
    answer = raw(s, post("/v1/chat/completions", BODY, {"Authorization": "Bearer wrong"})
                 + post("/v1/nope", BODY) + get("/v1/models"), keep_open=True)
    assert statuses(answer) == [401, 401, 401]  # three answers, no 501 from leftover body bytes
    open_server = serve(script_engine())
    answer = raw(open_server, post("/v1/nope", BODY) + post("/v1/chat/completions", BODY), keep_open=True)
    assert statuses(answer) == [404, 200]


def test_openai_client_keeps_working_after_a_404_on_the_same_connection(serve):
    s = serve(script_engine())
    with openai.DefaultHttpxClient() as http:  # one pool: the next call reuses the connection of the 404
        client = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0, http_client=http)
        with pytest.raises(openai.NotFoundError):
            client.post("/nope", cast_to=object, body={"messages": [QUESTION]})
        assert client.chat.completions.create(model="m", messages=[QUESTION]).choices[0].message.content


def test_bad_content_lengths_are_answered_and_closed(serve):
    s = serve(script_engine())
    for value in ("abc", "-1"):
        answer = raw(s, post("/v1/chat/completions", BODY, {"Content-Length": value}))
        assert statuses(answer) == [400] and b"Content-Length" in answer


def test_a_chunked_body_is_read_as_one_request(serve):
    engine = script_engine()
    s = serve(engine)
    chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (BODY[:10], BODY[10:])) + b"0\r\n\r\n"
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    answer = raw(s, head + chunks + get("/v1/models"), keep_open=True)
    assert statuses(answer) == [200, 200] and len(engine.requests) == 1


def test_too_large_a_body_gets_its_413(serve):
    s = serve(script_engine())
    big = b"x" * (17 << 20)
    answer = raw(s, post("/v1/chat/completions", big), timeout=30)
    assert statuses(answer) == [413]


def test_malformed_tool_calls_are_a_400_not_a_dead_handler(serve):
    s = serve(script_engine())
    body = json.dumps({"messages": [QUESTION, {"role": "assistant", "content": "", "tool_calls": 5}]}).encode()
    assert statuses(raw(s, post("/v1/chat/completions", body))) == [400]


# ----------------------------------------------------------------------------- errors before and in a stream


def test_prompt_and_template_errors_are_400_before_a_stream(serve):
    for error in (EngineError("the conversation is 9,000 tokens, more than the 2,048-token context"),
                  TemplateError("the model's chat template failed on these messages: TypeError: 'int'")):
        s = serve(script_engine(count_error=error))
        c = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0)
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as err:
                c.chat.completions.create(model="m", messages=[QUESTION], stream=stream)
            assert str(error)[:30] in str(err.value)


def test_an_error_after_the_stream_started_is_an_sse_error_event(serve):
    s = serve(script_engine(fail_in_stream=True))
    body = json.dumps({"messages": [QUESTION], "stream": True}).encode()
    answer = raw(s, post("/v1/chat/completions", body))
    assert statuses(answer) == [200]  # one response: no second status line spliced into the stream
    events = [json.loads(line[6:]) for line in answer.split(b"\n") if line.startswith(b"data: {")]
    assert "GPU fell off the bus" in events[-1]["error"]["message"]


def test_a_raw_type_error_in_a_template_is_a_template_error():
    t = ChatTemplate("{% for c in messages[0].tool_calls %}{{ c }}{% endfor %}")
    with pytest.raises(TemplateError, match="TypeError"):
        t.render([{"role": "assistant", "content": "", "tool_calls": 5}])


# ----------------------------------------------------------------------------- parameters


def test_parameters_that_llama_cpp_supports_reach_the_engine():
    req, stream = parse_request({"messages": [QUESTION], "stop": ["\n\n", "END"], "seed": 7, "logprobs": True,
                                 "top_logprobs": 3, "max_tokens": 5, "max_completion_tokens": None,
                                 "frequency_penalty": 0.5, "chat_template_kwargs": {"preserve_thinking": True}})
    s = req.sampling
    assert s.stop == ("\n\n", "END") and s.seed == 7 and s.max_tokens == 5 and s.frequency_penalty == 0.5
    assert req.logprobs == 3 and req.template_kwargs == {"preserve_thinking": True} and not stream
    assert req.enable_thinking is None  # not sent: left undefined for the template, not True


@pytest.mark.parametrize("body, message", [
    ({"n": 2}, "'n' must be 1"),
    ({"max_tokens": 0}, "positive integer"),
    ({"tool_choice": "sometimes", "tools": WEATHER}, "tool_choice must be"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": WEATHER}, "not among the tools"),
    ({"tool_choice": "required"}, "needs tools"),
    ({"top_logprobs": 3}, "needs 'logprobs'"),
    ({"stop": [1]}, "'stop' must be"),
    ({"seed": "x"}, "'seed' must be"),
])
def test_unsupported_or_invalid_parameters_are_400(body, message):
    from app.serve.server import BadRequest

    with pytest.raises(BadRequest, match=message):
        parse_request({"messages": [QUESTION], **body})


def test_tool_choice_none_and_forced(serve):
    none, _ = parse_request({"messages": [QUESTION], "tools": WEATHER, "tool_choice": "none"})
    assert none.tools is None and none.tool_choice is None
    two = WEATHER + [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    forced, _ = parse_request({"messages": [QUESTION], "tools": two,
                               "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert [t["function"]["name"] for t in forced.tools] == ["get_time"] and forced.tool_choice == "get_time"


def test_earlier_reasoning_reaches_the_template():
    req, _ = parse_request({"messages": [QUESTION, {"role": "assistant", "content": "Paris.",
                                                    "reasoning_content": "France's capital is Paris."},
                                         {"role": "user", "content": "And Spain?"}]})
    assert req.messages[1]["reasoning_content"] == "France's capital is Paris."
    alias, _ = parse_request({"messages": [{"role": "assistant", "content": "x", "reasoning": "r"}]})
    assert alias.messages[0]["reasoning_content"] == "r"


def test_content_is_null_beside_tool_calls_and_ids_are_unique(serve):
    engine = script_engine(calls=2)
    s = serve(engine)
    c = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0)
    ids = set()
    for _ in range(2):
        r = c.chat.completions.create(model="m", messages=[QUESTION], tools=WEATHER)
        assert r.choices[0].message.content is None
        ids |= {call.id for call in r.choices[0].message.tool_calls}
    assert len(ids) == 4  # no call_0 twice


# ----------------------------------------------------------------------------- Host, Origin, Content-Type


def test_foreign_host_origin_and_content_type_are_refused(serve):
    engine = script_engine()
    s = serve(engine)
    assert statuses(raw(s, post("/v1/chat/completions", BODY, {"Host": "evil.example"}))) == [403]
    assert statuses(raw(s, get("/v1/models").replace(b"Host: 127.0.0.1", b"Host: evil.example:80"))) == [403]
    assert statuses(raw(s, post("/v1/chat/completions", BODY, {"Origin": "https://evil.example"}))) == [403]
    assert statuses(raw(s, post("/v1/chat/completions", BODY, {"Content-Type": "text/plain"}))) == [415]
    assert statuses(raw(s, post("/v1/chat/completions", BODY, {"Origin": "http://localhost:3000"}))) == [200]
    assert len(engine.requests) == 1  # only the last one generated
    wide = serve(script_engine(), allowed_hosts=("my-box.lan",))
    assert statuses(raw(wide, post("/v1/chat/completions", BODY, {"Host": "my-box.lan:8080"}))) == [200]


def test_a_server_on_every_address_takes_the_host_name_its_clients_use(serve):
    """--host 0.0.0.0 (with its API key): a client on the LAN names the machine by its address or name;
    the key is what guards it there, so those Host names are answered, and a web page's Origin still is not."""
    s = serve(script_engine(), host="0.0.0.0", api_key="k")
    key = {"Authorization": "Bearer k"}
    assert statuses(raw(s, post("/v1/chat/completions", BODY, {"Host": "192.168.1.20:8080", **key}))) == [200]
    assert statuses(raw(s, post("/v1/chat/completions", BODY, {"Host": "my-box.lan", **key}))) == [200]
    assert statuses(raw(s, post("/v1/chat/completions", BODY, {"Host": "my-box.lan"}))) == [401]
    assert statuses(raw(s, post("/v1/chat/completions", BODY, {"Origin": "https://evil.example", **key}))) == [403]


def test_the_next_free_port_stops_at_65535():
    """A taken port near the top: the next ones up to 65535, then any free one (not an OverflowError)."""
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        blocker.bind(("127.0.0.1", 65535))
    except OSError:
        pytest.skip("port 65535 is in use here")
    blocker.listen()
    s = LocalServer(script_engine(), port=65535)
    try:
        url = s.start()
        assert s.port != 65535 and url.endswith(f":{s.port}/v1")
    finally:
        s.stop()
        blocker.close()


# ----------------------------------------------------------------------------- with a real model


@pytest.fixture()
def smol_server(serve, smollm2_engine) -> LocalServer:
    return serve(smollm2_engine)


@pytest.mark.slow
def test_stop_seed_and_logprobs_with_a_real_model(smol_server):
    c = openai.OpenAI(base_url=smol_server.url, api_key="x", max_retries=0, timeout=120)
    full = c.chat.completions.create(model="m", messages=[SYSTEM, QUESTION], temperature=0, max_tokens=40)
    text = full.choices[0].message.content
    assert "Paris" in text
    cut = c.chat.completions.create(model="m", messages=[SYSTEM, QUESTION], temperature=0, max_tokens=40,
                                    stop=["Paris"])
    assert cut.choices[0].message.content == text[:text.index("Paris")] and cut.choices[0].finish_reason == "stop"
    story = [{"role": "user", "content": "Tell me a short story about a cat."}]
    a, b, other = (c.chat.completions.create(model="m", messages=story, temperature=1.0, max_tokens=24, seed=seed)
                   for seed in (42, 42, 7))
    assert a.choices[0].message.content == b.choices[0].message.content != other.choices[0].message.content
    lp = c.chat.completions.create(model="m", messages=[SYSTEM, QUESTION], temperature=0, max_tokens=8,
                                   logprobs=True, top_logprobs=3)
    entries = lp.choices[0].logprobs.content
    assert len(entries) == lp.usage.completion_tokens
    assert all(e.logprob <= 0 and len(e.top_logprobs) == 3 for e in entries)
    assert entries[0].top_logprobs[0].logprob >= entries[0].top_logprobs[1].logprob
    assert entries[0].logprob == pytest.approx(entries[0].top_logprobs[0].logprob)  # greedy: the best token


@pytest.mark.slow
def test_an_abandoned_request_stops_generating(smol_server):
    body = json.dumps({"messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
                       "max_tokens": 2000, "temperature": 0.8}).encode()
    with socket.create_connection(("127.0.0.1", smol_server.port)) as sock:
        sock.sendall(post("/v1/chat/completions", body))
        time.sleep(1.0)  # generating now; the client gives up
    started = time.monotonic()
    c = openai.OpenAI(base_url=smol_server.url, api_key="x", max_retries=0, timeout=120)
    c.chat.completions.create(model="m", messages=[SYSTEM, QUESTION], temperature=0, max_tokens=4)
    assert time.monotonic() - started < 8  # 2000 tokens would take about 50 s here
