"""Reproducible replies (issue 54, item 3): under the setting, 4 requests written at once give, at
temperature 0, each the reply it gives alone on a cold engine, token for token, in rounds of random
traffic (prompt lengths across chunk bounds and past 256 cells, reply lengths, arrivals that land a
prompt's read among replies being written, requests before a round that leave other conversations,
and shared starts, in the slots).

Today's default (4 slots in one pool of cells, flash attention, drafts) parts: a sequence's cells lie
wherever the pool had room and attention sums them in cell order, llama.cpp cuts a prompt piece that
shares a batch with pending tokens into other micro-batches (and attention kernels), and flash
attention splits a lone sequence's token over the threads past 512 cells. The layout
(app.model.plan_memory.reproducible_layout) gives each slot its own cells, reads a piece in a step of
its own, and on the CPU leaves flash attention off. On SmolLM2 (Q4_1 weights: one kernel whatever
the rows) the logprobs are equal too; the tiny qwen35moe's F32 weights take tinyBLAS for 2 rows or
more and vec_dot for one (test_slots.py), so a lone token's logits differ in the sixth digit there:
its replies' tokens are compared.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from app.engine.contract import ChatRequest, Reply, SamplingParams
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from app.model.plan_memory import reproducible_layout

WORDS = ("the keeper climbed stairs while storm broke over rocks and lamp turned def add total value return "
         "list seven green quiet market window bread north river stone paper robot write count step").split()
SLOTS = 4
CHUNK = 64  # n_batch: prompts are read in pieces of 61 tokens (room for the others' pending tokens)


def _settings() -> LoadSettings:
    return reproducible_layout(LoadSettings(n_ctx=1024, n_batch=CHUNK, n_ubatch=CHUNK, n_threads=2,
                                            n_threads_batch=2, n_outputs_max=1, parallel=SLOTS,
                                            ctx_checkpoints=8 * SLOTS))


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _request(messages: list[dict], tokens: int) -> ChatRequest:
    return ChatRequest(messages, enable_thinking=False, logprobs=1,
                       sampling=SamplingParams(temperature=0.0, seed=1, max_tokens=tokens))


def _round(rng: random.Random, systems: list[str], most: int) -> list[tuple[list[dict], int, float]]:
    """4 requests (messages, reply tokens, arrival delay): short and long prompts (up to `most` words,
    about 330 tokens), some after a shared system message, arriving at once or while others are written."""
    out = []
    for _ in range(SLOTS):
        head = [{"role": "system", "content": rng.choice(systems)}] if rng.random() < 0.5 else []
        user = _words(rng, 3, 12) if rng.random() < 0.3 else _words(rng, most // 6, most)
        out.append(([*head, {"role": "user", "content": user}], rng.randint(4, 24),
                    rng.choice([0.0, 0.0, 0.02, 0.15, 0.4])))
    return out


def _at_once(engine: Engine, requests: list[tuple[list[dict], int, float]]) -> list[Reply]:
    replies: list[Reply | None] = [None] * len(requests)

    def run(i: int) -> None:
        messages, tokens, delay = requests[i]
        time.sleep(delay)
        replies[i] = engine.generate(_request(messages, tokens))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in replies if r is not None]


@pytest.mark.slow
@pytest.mark.parametrize("which, rounds, most", [("smollm2", 8, 260), ("qwen35moe", 20, 70)])
def test_four_at_once_give_the_replies_each_gives_alone(smollm2, qwen35moe_model, which, rounds, most, capsys):
    engine = Engine()
    engine.load(smollm2 if which == "smollm2" else qwen35moe_model, _settings())
    try:
        slots = engine.slots
        assert slots is not None and slots.apart and slots.pool is None and slots.draft_max == 0
        rng = random.Random(f"traffic-{which}")
        systems = [_words(rng, most // 12, most // 6) for _ in range(2)]
        differ: list[str] = []
        total = logprob_gap = 0
        for r in range(rounds):
            requests = _round(rng, systems, most)
            alone = []
            for messages, tokens, _ in requests:  # each on a cold engine: nothing ran before it
                slots.forget()
                alone.append(engine.generate(_request(messages, tokens)))
            for _ in range(rng.randint(0, 2)):  # what ran before the round: other conversations in the slots
                engine.generate(_request([{"role": "user", "content": _words(rng, 5, most)}], rng.randint(2, 12)))
            together = _at_once(engine, requests)
            assert len(together) == SLOTS
            for i, (a, b) in enumerate(zip(alone, together, strict=True)):
                total += 1
                gaps = [abs(x["logprob"] - y["logprob"]) for x, y in zip(a.logprobs, b.logprobs, strict=False)]
                logprob_gap = max([logprob_gap, *gaps])
                if a.raw != b.raw or (which == "smollm2" and any(gaps)):
                    differ.append(f"round {r}, request {i} ({a.stats.prompt_tokens} prompt tokens): "
                                  f"{a.raw[:40]!r} alone, {b.raw[:40]!r} beside 3 others")
        with capsys.disabled():
            print(f"\n  {which}: {total - len(differ)} of {total} replies written 4 at once are the reply written "
                  f"alone; {slots.shared_steps} of {slots.steps} decodes carried several replies, {slots.turns} "
                  f"steps took turns between a prompt's read and pending tokens; logprobs up to "
                  f"{logprob_gap:.2g} apart")
            for line in differ:
                print("   ", line)
        assert not differ
        assert slots.shared_steps > 0 and slots.turns > 0  # the replies did share decodes and reads came between
    finally:
        engine.unload()
