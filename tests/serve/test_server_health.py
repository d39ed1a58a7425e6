"""`GET /health` and `GET /metrics` (issue 38, item 4): the state of the model and the slots, and
Prometheus counters, read as a prober and a scraper would (no key; the Host guard still applies)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.engine.contract import ReplyStats
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from tests.helpers.fakes import ScriptedEngine, Turn

KEY = "sk-local-test"
# 30 of 40 prompt tokens evaluated in 0.5 s (60 tok/s); 6 of 7 generated tokens evaluated in 0.2 s (30 tok/s)
STATS = ReplyStats(prompt_tokens=40, prompt_evaluated=30, prompt_seconds=0.5, generated_tokens=7, eval_tokens=6,
                   eval_seconds=0.2, wall_seconds=0.25, stop_reason="end")


def get(server, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read()


def health(server) -> tuple[int, dict[str, Any]]:
    status, _, raw = get(server, "/health")
    return status, json.loads(raw)


def samples(server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, ctype, raw = get(server, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(raw.decode()) for s in family.samples}


def wait_for(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_health_says_ready_and_which_slots_are_busy(serve):
    engine = ScriptedEngine(Turn("Sunny.", stats=STATS), loaded=True, gated=True, name="script-model")
    s = serve(engine, api_key=KEY)
    assert health(s) == (200, {"status": "ok", "model": "script-model",
                               "slots": {"busy": 0, "total": 1, "waiting": 0}})
    c = openai.OpenAI(base_url=s.url, api_key=KEY, max_retries=0, timeout=30)
    ask = [threading.Thread(target=c.chat.completions.create,
                            kwargs={"model": "m", "messages": [{"role": "user", "content": "Hi"}]}) for _ in range(2)]
    for t in ask:
        t.start()
    try:
        wait_for(lambda: health(s)[1]["slots"] == {"busy": 1, "total": 1, "waiting": 1})
        values = samples(s)
        assert values[("clover_slots_busy", ())] == 1 and values[("clover_queue_length", ())] == 1
    finally:
        engine.release(2)
        for t in ask:
            t.join(30)
    assert health(s)[1]["slots"] == {"busy": 0, "total": 1, "waiting": 0}


def test_health_without_a_model_and_while_one_loads(serve, smollm2):
    engine = Engine()
    s = serve(engine, api_key=KEY)
    assert health(s) == (503, {"status": "no_model", "model": None, "slots": {"busy": 0, "total": 1, "waiting": 0}})
    started, go_on = threading.Event(), threading.Event()

    def progress(fraction: float) -> bool:
        started.set()
        go_on.wait(30)
        return True

    load = threading.Thread(target=engine.load, args=(smollm2, LoadSettings(n_ctx=512, n_threads=2)),
                            kwargs={"progress": progress})
    load.start()
    try:
        assert started.wait(60)
        assert health(s)[0] == 503 and health(s)[1]["status"] == "loading"
    finally:
        go_on.set()
        load.join(60)
    try:
        assert health(s)[0] == 200 and health(s)[1]["status"] == "ok"
    finally:
        engine.unload()


def test_metrics_count_requests_by_route_and_status_and_tokens(serve):
    s = serve(ScriptedEngine(Turn("Sunny.", stats=STATS), loaded=True), api_key=KEY)
    c = openai.OpenAI(base_url=s.url, api_key=KEY, max_retries=0, timeout=30)
    question = [{"role": "user", "content": "Hi"}]
    c.chat.completions.create(model="m", messages=question)
    list(c.chat.completions.create(model="m", messages=question, stream=True))
    c.responses.create(model="m", input="Hi")
    try:
        openai.OpenAI(base_url=s.url, api_key="wrong", max_retries=0).chat.completions.create(model="m",
                                                                                                messages=question)
    except openai.AuthenticationError:
        pass
    get(s, "/v1/nope", {"Authorization": f"Bearer {KEY}"})
    values = samples(s)
    chat = ("clover_requests_total", (("route", "/v1/chat/completions"), ("status", "200")))
    assert values[chat] == 2
    assert values[("clover_requests_total", (("route", "/v1/chat/completions"), ("status", "401")))] == 1
    assert values[("clover_requests_total", (("route", "/v1/responses"), ("status", "200")))] == 1
    assert values[("clover_requests_total", (("route", "other"), ("status", "404")))] == 1
    assert values[("clover_prompt_tokens_total", ())] == 120 and values[("clover_generated_tokens_total", ())] == 21
    assert values[("clover_prompt_cached_tokens_total", ())] == 30
    assert values[("clover_prompt_evaluated_tokens_total", ())] == 90
    assert values[("clover_prompt_seconds_total", ())] == pytest.approx(1.5)
    assert values[("clover_generation_seconds_total", ())] == pytest.approx(0.6)  # llama.cpp's eval time, not wall
    assert values[("clover_prompt_tokens_per_second", ())] == pytest.approx(60)
    assert values[("clover_generation_tokens_per_second", ())] == pytest.approx(30)
    assert values[("clover_replies_total", (("stop_reason", "end"),))] == 3
    assert values[("clover_slots", ())] == 1 and values[("clover_slots_busy", ())] == 0


def test_metrics_move_with_a_real_reply(smollm2_engine, serve):
    s = serve(smollm2_engine)
    before = samples(s)
    assert before[("clover_prompt_evaluated_tokens_total", ())] == 0
    assert before[("clover_generation_tokens_per_second", ())] == 0
    c = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0, timeout=120)
    # a prompt of its own (the cache holds none of it); SmolLM2's end tokens (<|endoftext|> 0, <|im_end|> 2)
    # barred, so the reply runs its 8 tokens
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Metrics moving test: count to ten."}],
                              max_tokens=8, logit_bias={"0": -100, "2": -100}, temperature=0)
    after = samples(s)
    assert after[("clover_generated_tokens_total", ())] == 8
    assert 0 < after[("clover_prompt_evaluated_tokens_total", ())] <= after[("clover_prompt_tokens_total", ())]
    assert after[("clover_prompt_seconds_total", ())] > 0 and after[("clover_generation_seconds_total", ())] > 0
    assert after[("clover_prompt_tokens_per_second", ())] > 0 and after[("clover_generation_tokens_per_second", ())] > 0
    assert after[("clover_replies_total", (("stop_reason", "length"),))] == 1


def test_health_and_metrics_need_no_key_but_a_loopback_host(serve):
    s = serve(ScriptedEngine(loaded=True), api_key=KEY)
    assert get(s, "/health")[0] == 200 and get(s, "/metrics")[0] == 200
    assert get(s, "/v1/models")[0] == 401  # the rest still needs it
    assert get(s, "/health", {"Host": "evil.example"})[0] == 403
    assert get(s, "/metrics", {"Origin": "http://evil.example"})[0] == 403
