"""Between two decodes, the scheduler's thread samples every reply's rows before it hands any reader a
token, and asks llama.cpp whether a token ends generation once per token a load.

Why it matters (tests/bench/parallel_serve.py): each call into llama.cpp through ctypes lets another
thread take the GIL. A reader woken with its token while other replies still had to sample took the GIL
at the next call and held the step up while it handled its token (text pipeline, the server's buffer
and event loop): with 4 slots behind the server the time between two decodes was 1.6 ms, 0.6 ms once
the hand-off comes after the sampling. The readers' text of each token is asked of llama.cpp once a
load too."""

from __future__ import annotations

import queue
import threading
from collections import Counter
from dataclasses import replace

import pytest

from app.engine import slots
from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings

BASE = LoadSettings(n_ctx=2048, n_threads=2, parallel=4)
PROMPTS = ["Write a story about a lighthouse.", "List the days of the week, twice.",
           "Count from one to twenty in words.", "Write a poem about bread."]


@pytest.fixture
def scheduler_calls(monkeypatch):
    """What the scheduler's thread does, in order: "decode", "logits" (a row read to sample it), "put" (a
    token or an end handed to a reply's reader); and how often each token was asked about, by question:
    "eog" (whether it ends generation), "piece" (its text)."""
    llama_cpp = llama()
    bindings = llama_cpp.llama_cpp
    events: list[str] = []
    asked: dict[str, Counter[int]] = {"eog": Counter(), "piece": Counter()}

    def on_slots(name, real):
        def call(*args):
            if threading.current_thread().name == "slots":
                events.append(name)
            return real(*args)
        return call

    def counted(question, real):
        def call(vocab, token, *args):
            asked[question][int(getattr(token, "value", token))] += 1
            return real(vocab, token, *args)
        return call

    is_eog = counted("eog", bindings.llama_vocab_is_eog)
    to_piece = counted("piece", bindings.llama_token_to_piece)
    for module in (bindings, llama_cpp):
        monkeypatch.setattr(module, "llama_token_to_piece", to_piece)
        monkeypatch.setattr(module, "llama_decode", on_slots("decode", bindings.llama_decode))
        monkeypatch.setattr(module, "llama_get_logits_ith", on_slots("logits", bindings.llama_get_logits_ith))
        monkeypatch.setattr(module, "llama_vocab_is_eog", is_eog)
    put = on_slots("put", queue.SimpleQueue.put)

    class Outbox(queue.SimpleQueue):
        def put(self, item, block=True, timeout=None):
            put(self, item, block, timeout)

    monkeypatch.setattr(slots, "outbox", Outbox)
    return events, asked


@pytest.mark.parametrize("speculative", ["off", "ngram"])
def test_every_reply_samples_before_any_reader_gets_its_token(smollm2, scheduler_calls, speculative):
    events, asked = scheduler_calls
    engine = Engine()
    try:
        engine.load(smollm2, replace(BASE, speculative=speculative))
        events.clear()
        replies: list = [None] * len(PROMPTS)

        def ask(i: int) -> None:
            replies[i] = engine.generate(ChatRequest([{"role": "user", "content": PROMPTS[i]}],
                                                     sampling=SamplingParams(temperature=0.0, max_tokens=40)))

        for _ in range(2):  # the second time, every token was seen before
            threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert all(r.stats.generated_tokens > 0 for r in replies)
        assert events.count("decode") > 20
        assert events.count("put") > 20  # the outbox patch took (slots.Job looks `outbox` up for each job)
        steps = " ".join(events).split("decode")[1:]
        together = [s.split() for s in steps if s.split().count("logits") >= 2]  # steps that sampled 2+ rows
        assert len(together) > 20  # the replies ran side by side
        for step in together:
            assert "put" not in step or "logits" not in step[step.index("put"):], step
        for question in ("eog", "piece"):  # each token asked once each, in both rounds
            assert asked[question] and max(asked[question].values()) == 1, question
    finally:
        engine.unload()


def test_readers_asking_for_the_same_token_at_once_ask_llama_cpp_once(smollm2):
    """The replies' readers share one TokenFacts: four asking for a new token together (each call into
    llama.cpp lets the next in) make one call, not four (the CI run where token 198 was asked twice)."""
    import time

    from app.engine.local import TokenFacts

    class Slow:
        model = None
        calls = 0

        def detokenize(self, tokens, special=False):
            self.calls += 1
            time.sleep(0.05)  # as a ctypes call: the GIL is let go
            return b"x"

    llm = llama().Llama(model_path=str(smollm2), n_ctx=64, vocab_only=True, verbose=False)
    try:
        facts = TokenFacts(llm)
        slow = Slow()
        facts.llm = slow
        threads = [threading.Thread(target=facts.piece, args=(198,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert slow.calls == 1 and facts.piece(198) == b"x"
    finally:
        llm.close()
