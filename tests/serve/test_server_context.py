"""The context's two limits on every API the server speaks (issue 38, item 1): a prompt longer than
the context is refused in the API's own error shape with both numbers and the `--ctx` that would
hold it; a `max_tokens` larger than what the context leaves is cut to fit, never refused (agents ask
for 32,000 whatever the context)."""

from __future__ import annotations

import json
import re

import anthropic
import openai
import pytest

from app.engine.contract import ChatRequest, ContextOverflow
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from app.serve.surface import needed_ctx
from tests.helpers.fakes import ScriptedEngine
from tests.helpers.server_post import post

HUGE = 100_000  # far past any context here


@pytest.fixture(scope="module")
def small_context(smollm2):
    """SmolLM2 in a 256-token context: a prompt near its end is quick to read (no drafts: no costs to
    measure at load)."""
    engine = Engine()
    engine.load(smollm2, LoadSettings(n_ctx=256, n_outputs_max=1, n_threads=2, speculative="off"))
    yield engine
    engine.unload()



def test_chat_completions_refuses_a_prompt_past_the_context_in_openais_shape(serve):
    s = serve(ScriptedEngine(loaded=True, count_error=ContextOverflow(9000, 2048)))
    words = ("the conversation is 9,000 tokens, more than the 2,048-token context; start a new chat or load the "
             "model with a longer context; serve it with --ctx 10240 or more")
    for stream in (False, True):  # a stream too: refused before it starts, never an SSE error
        status, headers, raw = post(s, "/v1/chat/completions", {
            "model": "m", "stream": stream, "max_tokens": HUGE, "messages": [{"role": "user", "content": "Hi"}]})
        assert status == 400 and headers["Content-Type"].startswith("application/json")
        assert json.loads(raw) == {"error": {"message": words, "type": "invalid_request_error", "code": 400}}


def test_chat_completions_counts_a_real_prompt_past_the_context(smollm2_engine, serve):
    s = serve(smollm2_engine)
    c = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "word " * 3000}])
    said = err.value.body["message"]
    found = re.fullmatch(r"the conversation is ([\d,]+) tokens, more than the 2,048-token context; .*; serve it "
                         r"with --ctx (\d+) or more", said)
    assert found, said
    n = int(found[1].replace(",", ""))
    assert n > 3000 and int(found[2]) == needed_ctx(n) and needed_ctx(n) >= n + 1024
    assert err.value.body["type"] == "invalid_request_error"


def near_the_end(engine, room: int) -> str:
    """A user message whose prompt leaves at most `room` tokens of the context: a list of numbers,
    which SmolLM2 goes on with rather than ending its reply."""
    n_ctx, count, step = engine.n_ctx_seq, 10, 16
    while True:
        text = "Continue this list: " + ", ".join(str(i) for i in range(1, count + step + 1)) + ","
        try:
            left = n_ctx - engine.count_tokens(ChatRequest([{"role": "user", "content": text}]))
        except ContextOverflow:
            left = -1
        if 0 < left <= room:
            return text
        if left > room:
            count += step
        elif step == 1:
            raise AssertionError(f"no list leaves 1 to {room} tokens")  # one number is at most 4 tokens
        else:
            step //= 2


def test_a_max_tokens_past_the_context_is_cut_to_fit_on_every_api(small_context, serve):
    """Each asks for 100,000 tokens with a prompt a few tokens short of the context: the reply runs to
    the context's end (prompt + reply = the context) and says it was cut there."""
    s = serve(small_context)
    n_ctx = small_context.n_ctx_seq
    assert n_ctx == 256
    text = near_the_end(small_context, room=8)
    question = [{"role": "user", "content": text}]
    chat = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0, timeout=300)
    r = chat.chat.completions.create(model="m", messages=question, max_tokens=HUGE, temperature=0,
                                     logit_bias={"0": -100, "2": -100})  # SmolLM2's end tokens barred
    assert r.choices[0].finish_reason == "length" and r.usage.prompt_tokens + r.usage.completion_tokens == n_ctx
    m = anthropic.Anthropic(base_url=f"http://127.0.0.1:{s.port}", api_key="none", max_retries=0, timeout=300)
    a = m.messages.create(model="m", max_tokens=HUGE, messages=question, extra_body={"temperature": 0})
    assert a.stop_reason == "model_context_window_exceeded"
    assert a.usage.input_tokens + a.usage.cache_read_input_tokens + a.usage.output_tokens == n_ctx
    resp = chat.responses.create(model="m", input=text, max_output_tokens=HUGE, temperature=0)
    assert resp.status == "incomplete" and resp.usage.input_tokens + resp.usage.output_tokens == n_ctx
