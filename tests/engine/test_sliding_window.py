"""Sliding-window attention (issue 54, item 1), on a tiny gemma3 and gpt-oss: the plan counts its KV cache as
llama.cpp allocates it (the full-size SWA cache, which can be cut back like any other), and through
the server an identical request reads again only its last turn's start, a follow-up only its new
tokens (the answer before it and the new turn) and at most 16 more, also after a restart (the
prompt cache's disk tier). The replies' exactness: test_reproducible and test_prompt_cache."""

from __future__ import annotations

import json

import pytest

from app.engine.contract import ChatRequest
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from app.serve.server import LocalServer
from tests.helpers.engines import wait_for_disk_tier
from tests.helpers.server_post import post

QUESTION = [{"role": "system", "content": "You answer about rivers, seas and stones. " * 6},
            {"role": "user", "content": "Which river is the longest, and which sea is the saltiest?"}]


@pytest.fixture(params=["gemma3", "gpt-oss"])
def swa_model(request):
    return request.getfixturevalue({"gemma3": "gemma3_model", "gpt-oss": "gpt_oss_model"}[request.param])


def test_the_plan_counts_the_sliding_window_cache_as_llama_cpp_allocates_it(swa_model):
    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header
    from app.machine.llama_load import capture_log, load_llama, parse_buffers
    from app.model.plan import breakdown

    facts = facts_from_header(read_header(swa_model))
    planned = breakdown(facts, 1024, (), "f16", "f16", on_gpu=False, parallel=1)
    with capture_log() as lines:
        llm = load_llama(swa_model, LoadSettings(n_ctx=1024), n_threads=2)
    llm.close()
    assert any("using full-size SWA cache" in line for line in lines)  # every cell kept: it cuts back
    kv = parse_buffers(lines).total("KV")
    assert abs(kv - planned.kv) <= max(0.05 * planned.kv, 0.005 * 1024 * 1024), (kv, planned.kv)


def _ask(server: LocalServer, messages: list[dict]) -> tuple[str, int, int]:
    """(the reply, prompt tokens, of them evaluated) of a chat completion at temperature 0."""
    status, _, body = post(server, "/v1/chat/completions", {"model": "m", "messages": messages, "temperature": 0,
                                                            "max_tokens": 16})
    assert status == 200, body
    data = json.loads(body)
    usage = data["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    return data["choices"][0]["message"]["content"], usage["prompt_tokens"], usage["prompt_tokens"] - cached


def _engine(path) -> Engine:
    engine = Engine()
    engine.load(path, LoadSettings(n_ctx=4096, n_threads=2, speculative="off", parallel=2, cache_disk_mb=256))
    wait_for_disk_tier(engine)
    return engine


def test_the_server_reads_only_what_is_new_before_and_after_a_restart(swa_model, serve, clover_home):
    engine = _engine(swa_model)
    try:
        server = serve(engine)
        reply, n, evaluated = _ask(server, QUESTION)
        assert evaluated == n  # cold
        plan = engine.slots.plan
        tokens = engine.tokenize_prompt(engine.render_prompt(ChatRequest(QUESTION)))
        last_turn = int(plan.turn_starts(tokens)[-1])
        assert _ask(server, QUESTION)[2] == n - last_turn  # a rerun: the last turn's start ("<start_of_turn>model")
        follow = [*QUESTION, {"role": "assistant", "content": reply}, {"role": "user", "content": "And the deepest?"}]
        reply2, n2, evaluated2 = _ask(server, follow)
        assert evaluated2 <= n2 - n + 16, (evaluated2, n2, n)
        again = [*follow, {"role": "assistant", "content": reply2}, {"role": "user", "content": "Thank you."}]
    finally:
        engine.unload()  # its prompt cache entries stay on disk
    engine = _engine(swa_model)
    try:
        _, n3, evaluated3 = _ask(serve(engine), again)
        assert evaluated3 <= n3 - n2 + 16, (evaluated3, n3, n2)  # the conversation came back from disk
    finally:
        engine.unload()
