"""One rule for a top-level field the server does not read, on every API it speaks (app/serve/unread.py):
the request is answered and the answer names the field in `X-Clover-Warning` (and its `warnings`),
never silently; a field a surface reads or accepts by its documented rule is not named."""

from __future__ import annotations

import json

import pytest

from app.engine.contract import ReplyStats
from app.serve.schema import parse_request
from app.serve.unread import WORDS
from tests.helpers.fakes import ScriptedEngine, Turn
from tests.helpers.server_post import post

STATS = ReplyStats(prompt_tokens=10, prompt_evaluated=10, generated_tokens=2, stop_reason="end")
HI = [{"role": "user", "content": "Hi"}]



@pytest.fixture()
def server(serve):
    return serve(ScriptedEngine(Turn("Sunny.", stats=STATS), loaded=True))


# each API's body with every field its surface knows that a client commonly sends, and two it does not
KNOWN = {
    "/v1/chat/completions": {"model": "m", "messages": HI, "user": "u1", "metadata": {"a": "b"}, "store": False,
                             "top_k": 20, "min_p": 0.1, "repeat_penalty": 1.1, "prompt_cache_key": "conv-1",
                             "service_tier": "auto", "safety_identifier": "s"},
    "/v1/messages": {"model": "m", "messages": HI, "max_tokens": 20, "metadata": {"user_id": "u1"},
                     "cache_control": {"type": "ephemeral"}, "context_management": {"edits": []},
                     "service_tier": "auto", "container": None},
    "/v1/responses": {"model": "m", "input": "Hi", "user": "u1", "client_metadata": {"x": "y"},
                      "prompt_cache_key": "conv-1", "truncation": "disabled", "service_tier": "auto"},
}
UNREAD = {"ignore_eos": True, "cache_prompt": True}
SAID = WORDS + "cache_prompt, ignore_eos"


@pytest.mark.parametrize("path", list(KNOWN))
def test_each_api_names_the_fields_it_does_not_read(server, path):
    status, headers, raw = post(server, path, KNOWN[path])
    assert status == 200 and "X-Clover-Warning" not in headers and "warnings" not in json.loads(raw)
    status, headers, raw = post(server, path, {**KNOWN[path], **UNREAD})
    assert status == 200 and headers["X-Clover-Warning"] == SAID
    assert json.loads(raw)["warnings"] == [SAID]
    status, headers, raw = post(server, path, {**KNOWN[path], **UNREAD, "stream": True})
    assert status == 200 and headers["X-Clover-Warning"] == SAID


def test_the_header_holds_any_name_and_many_names(server):
    odd = {"naïve\r\nX-Injected: 1": 1, **{f"extra_{i:02}": i for i in range(20)}}
    status, headers, raw = post(server, "/v1/chat/completions", {"messages": HI, **odd})
    assert status == 200 and "X-Injected" not in headers
    said = headers["X-Clover-Warning"]
    assert said.isascii() and said == WORDS + ", ".join(f"extra_{i:02}" for i in range(16)) + " and 5 more"
    status, headers, _ = post(server, "/v1/chat/completions", {"messages": HI, "naïve\r\nX-Injected: 1": 1})
    assert status == 200 and headers["X-Clover-Warning"] == WORDS + "na\\u00efve\\r\\nX-Injected: 1"


def test_llama_servers_sampling_fields_and_the_cache_key_reach_the_engine():
    request, _ = parse_request({"messages": HI, "top_k": 20, "min_p": 0.1, "repeat_penalty": 1.1,
                                "prompt_cache_key": "conv-1"})
    s = request.sampling
    assert (s.top_k, s.min_p, s.repeat_penalty) == (20, 0.1, 1.1) and request.keep_cache
    plain, _ = parse_request({"messages": HI})
    assert not plain.keep_cache and plain.sampling.top_k == 40
