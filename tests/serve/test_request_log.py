"""The request inspector's record (issue 53, item 5): every request the local server answered, with its
client, API, model, token and cache figures, time to first token, tok/s, stop reason and tool calls
checked against their schemas, kept in memory (the last 500) and sent again as a curl command."""

from __future__ import annotations

import json
import shutil
import subprocess

import anthropic
import openai
import pytest

from app.engine.contract import ReplyStats
from app.engine.tool_calls import parse_call, validate_call
from app.serve.request_log import Entry, RequestLog, client_name
from tests.bench.agent_ttft import BETA, messages_body
from tests.helpers.fakes import ScriptedEngine, Turn
from tests.helpers.server_post import post

KEY = "sk-local-test"
CLAUDE_CODE = "claude-cli/2.1.328 (external, cli)"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                   "additionalProperties": False}}}
STATS = ReplyStats(prompt_tokens=40, prompt_evaluated=30, generated_tokens=7, stop_reason="end", ttft_seconds=0.25,
                   eval_tokens=6, eval_seconds=0.5)


def scripted(turn: Turn | None = None) -> ScriptedEngine:
    return ScriptedEngine(turn or Turn("Sunny.", stats=STATS), loaded=True, name="script-model")


def test_claude_codes_request_with_smollm2(serve, smollm2_engine):
    """The Claude-Code-shaped request (tests/bench/agent_ttft.py), sent twice as Claude Code sends its
    next turn: the second reads the first's prefix from the cache, and the log says so."""
    s = serve(smollm2_engine, api_key=KEY)
    body = messages_body("session 1", paragraphs=2, max_tokens=4)
    for _ in range(2):
        status, _headers, _raw = post(s, "/v1/messages?beta=true", body,
                                      {"x-api-key": KEY, "User-Agent": CLAUDE_CODE, **BETA})
        assert status == 200
    newest, first = s.requests.entries()
    assert newest.number == first.number + 1
    assert (newest.client, newest.api, newest.model, newest.query) == ("Claude Code", "Messages",
                                                                        "claude-sonnet-4-5", "beta=true")
    assert newest.served == "SmolLM2-135M-Instruct.Q4_1" and newest.status == 200 and newest.stream
    assert [name for name, _ in newest.tools()] == [t["name"] for t in body["tools"]]
    assert newest.prompt_tokens is not None and newest.prompt_tokens > 150
    assert first.cached_tokens == 0 and newest.cached_tokens is not None and newest.cached_tokens > 150
    assert newest.ttft is not None and 0 < newest.ttft < 60 and newest.tps is not None and newest.tps > 0
    assert newest.generated_tokens == 4 and newest.stop == "max tokens" and newest.text
    roles = [role for role, _ in newest.messages()]
    assert roles == ["system", "user"] and "test_nested_lists" in newest.messages()[1][1]


def test_sdks_are_named_and_each_api_listed(serve):
    s = serve(scripted(), api_key=KEY)
    openai.OpenAI(base_url=s.url, api_key=KEY, max_retries=0).chat.completions.create(
        model="local", messages=[{"role": "user", "content": "Weather?"}])
    anthropic.Anthropic(base_url=f"http://127.0.0.1:{s.port}", api_key=KEY, max_retries=0).messages.create(
        model="m", max_tokens=20, messages=[{"role": "user", "content": "Weather?"}])
    openai.OpenAI(base_url=s.url, api_key=KEY, max_retries=0).responses.create(model="local", input="Weather?")
    responses, messages, chat = s.requests.entries()
    assert (chat.client, chat.api) == ("OpenAI Python SDK", "Chat completions")
    assert (messages.client, messages.api) == ("Anthropic Python SDK", "Messages")
    assert (responses.client, responses.api) == ("OpenAI Python SDK", "Responses")
    for entry in (chat, messages, responses):
        assert (entry.text, entry.prompt_tokens, entry.cached_tokens, entry.stop) == ("Sunny.", 40, 10, "end")
        assert entry.ttft == 0.25 and entry.tps == pytest.approx(12.0) and entry.calls == ()
    assert chat.messages() == [("user", "Weather?")] and responses.messages() == [("user", "Weather?")]


def test_a_call_that_breaks_its_schema_is_flagged(serve):
    good = validate_call(parse_call('{"name": "get_weather", "arguments": {"city": "Oslo"}}'), [WEATHER])
    bad = validate_call(parse_call('{"name": "get_weather", "arguments": {"town": 3}}', 1), [WEATHER])
    assert good.valid and not bad.valid
    s = serve(scripted(Turn("", calls=[good, bad], stats=STATS, stream=[])), api_key=KEY)
    status, _, _ = post(s, "/v1/chat/completions", {"model": "m", "tools": [WEATHER], "messages": [
        {"role": "user", "content": "Oslo?"}]}, {"Authorization": f"Bearer {KEY}", "User-Agent": "my-agent/0.3 x"})
    assert status == 200
    (entry,) = s.requests.entries()
    assert entry.client == "my-agent/0.3" and entry.stop == "tool calls" and entry.calls_fit is False
    ok, broken = entry.calls
    assert ok.fits and ok.arguments == {"city": "Oslo"}
    assert not broken.fits and broken.arguments == {"town": 3} and any("city" in e for e in broken.errors)


def test_an_error_answer_is_listed_with_its_message(serve):
    s = serve(scripted(), api_key=KEY)
    status, _, _ = post(s, "/v1/messages", {"model": "m", "messages": "not a list", "max_tokens": 5},
                        {"x-api-key": KEY})
    assert status == 400
    (entry,) = s.requests.entries()
    assert entry.status == 400 and entry.api == "Messages" and entry.prompt_tokens is None
    assert "messages" in entry.error and entry.client.startswith("Python-urllib/")
    status, _, _ = post(s, "/v1/messages/", {"model": "m", "messages": []},  # a client set up with a wrong key
                        {"x-api-key": "wrong", "User-Agent": CLAUDE_CODE})
    assert status == 401
    refused = s.requests.entries()[0]
    assert (refused.status, refused.error, refused.client, refused.api) == (401, "invalid API key", "Claude Code",
                                                                            "Messages")
    assert refused.model == "m" and refused.path == "/v1/messages"


def test_the_last_500_are_kept_newest_first_and_clear_empties():
    log = RequestLog()
    heard: list[int] = []
    log.listeners.append(lambda e: heard.append(e.number))
    for _ in range(503):
        log.add(Entry(log.next_number(), 0.0, "curl/8.5.0", "/v1/chat/completions", "", b"{}", 200, 0.1))
    entries = log.entries()
    assert len(entries) == len(log) == 500 and heard == list(range(1, 504))
    assert entries[0].number == 503 and entries[-1].number == 4  # the three oldest dropped
    log.clear()
    assert log.entries() == [] and len(log) == 0
    log.add(Entry(log.next_number(), 0.0, "", "/v1/messages", "", b"{}", 200, 0.1))
    assert log.entries()[0].number == 504  # numbers go on after a clear: the window tells new from old


def test_past_the_memory_budget_older_bodies_are_let_go():
    log = RequestLog(budget=100)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 20}]}).encode()
    assert 50 < len(body) < 100
    for _ in range(3):
        log.add(Entry(log.next_number(), 0.0, "", "/v1/chat/completions", "", body, 200, 0.1, prompt_tokens=9))
    newest, *older = log.entries()
    assert newest.body == body and newest.messages() == [("user", "x" * 20)] and not newest.body_dropped
    assert all(e.body == b"" and e.body_dropped and e.prompt_tokens == 9 and e.messages() == [] for e in older)


@pytest.mark.parametrize(("agent", "name"), [
    ("claude-cli/2.1.328 (external, cli)", "Claude Code"),
    ("codex_cli_rs/0.169.0 (Ubuntu 24.4.0; x86_64) xterm", "Codex"),
    ("OpenAI/Python 2.1.0", "OpenAI Python SDK"), ("AsyncOpenAI/Python 2.1.0", "OpenAI Python SDK"),
    ("Anthropic/Python 0.70.0", "Anthropic Python SDK"), ("curl/8.5.0", "curl"),
    ("Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", "Browser"), ("python-httpx/0.28.1", "python-httpx/0.28.1"),
    ("", "unknown (no User-Agent)")])
def test_client_names(agent, name):
    assert client_name(agent) == name


@pytest.mark.parametrize("api", ["/v1/chat/completions", "/v1/messages"])
def test_as_curl_sends_the_request_again(serve, api):
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not on PATH: the command cannot be run here")
    s = serve(scripted(), api_key=KEY)
    body = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "It's 'quoted' $HOME `x`"}]}
    status, _, _ = post(s, api, body, {"Authorization": f"Bearer {KEY}"})
    assert status == 200
    command = s.requests.entries()[0].as_curl(s.url, KEY)
    assert command.startswith("curl ") and KEY in command
    done = subprocess.run(["bash", "-c", command + " -o /dev/null -w '%{http_code}'"], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout == "200", done.stderr
    again, first = s.requests.entries()[:2]
    assert again.client == "curl" and again.body == first.body and json.loads(again.body) == body
    assert s.requests.entries()[1].as_curl(s.url, None).count("Bearer") == 0  # no key: no header
