"""A request's prompt is checked without the engine's lock, before it waits for the engine (issue 29,
item 4): a request past the context is refused while the engine is busy, and a small request is not
delayed by a large one's tokenizing. The real SmolLM2 (2,048-token context); each test failed
before its fix."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from app.engine.contract import ChatRequest
from app.serve.prompts import PromptCheck
from app.serve.server import LocalServer

QUESTION = {"role": "user", "content": "What is the capital of France?"}


def conversation(n: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i}"} for i in range(n)]


@pytest.fixture()
def server(serve, smollm2_engine) -> LocalServer:
    return serve(smollm2_engine)


def client(server: LocalServer, timeout: float = 60) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=timeout)


def post_large(server: LocalServer, body: bytes, timeout: float) -> tuple[int, str]:
    """Raw HTTP: the openai client spends seconds of its own (in this process) on 10,000 messages."""
    req = urllib.request.Request(server.url + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def large_body(n: int) -> bytes:
    return json.dumps({"messages": conversation(n), "max_tokens": 4}).encode()


def test_the_servers_tokenizer_counts_as_the_engine_does(smollm2_engine):
    vocab = PromptCheck().vocab(smollm2_engine.info.path)
    assert vocab is not None
    for messages in ([QUESTION], conversation(40), [{"role": "user", "content": "naïve café 東京 🙂\n\n  x"}]):
        prompt = smollm2_engine.render_prompt(ChatRequest(messages))
        assert vocab.tokenize(prompt, smollm2_engine.template.bos_token) == smollm2_engine.tokenize_prompt(prompt)
    assert PromptCheck().vocab("/nonexistent/model.gguf") is None


@pytest.mark.slow
def test_a_request_past_the_context_is_refused_while_the_engine_is_busy(server, smollm2_engine):
    bodies = [(large_body(10_000), "at least"), (large_body(3_000), "tokens, more than the 2,048-token context")]
    smollm2_engine._lock.acquire()  # the window's reply holds the engine
    try:
        for body, words in bodies:
            started = time.monotonic()
            status, answer = post_large(server, body, timeout=15)
            assert status == 400 and words in answer and time.monotonic() - started < 5
    finally:
        smollm2_engine._lock.release()


@pytest.mark.slow
def test_a_small_request_is_not_delayed_by_a_large_ones_tokenizing(server):
    outcome: dict[str, tuple[int, str]] = {}
    body = large_body(10_000)
    small = client(server)

    def large() -> None:
        outcome["refused"] = post_large(server, body, timeout=60)

    thread = threading.Thread(target=large)
    thread.start()
    time.sleep(0.3)  # it is being checked (rendered, tokenized) now
    started = time.monotonic()
    r = small.chat.completions.create(model="m", messages=[QUESTION], temperature=0, max_tokens=2)
    waited = time.monotonic() - started
    thread.join(60)
    assert r.usage.completion_tokens == 2 and waited < 2.5, waited
    assert outcome["refused"][0] == 400 and "context" in outcome["refused"][1]
