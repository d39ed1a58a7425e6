"""Speculative decoding: the n-gram drafter, the draft length from measured costs, and verification
that gives the tokens of plain decoding (on SmolLM2 and on Clover's hybrid architecture, whose
rejected draft tokens are rolled back with llama.cpp's n_rs_seq inside the verify batch)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.drafting import (
    BatchCosts,
    DraftStats,
    NgramDrafter,
    auto_drafting,
    best_length,
    break_even_rate,
    expected_tokens,
    lookup,
)
from app.engine.local import Engine
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings, load_llama
from tests.helpers.decode import greedy_slot

ROUNDING = 0.5  # as in test_checkpoints: the most two batch splits of one state move a logit


def test_lookup_takes_the_longest_latest_n_gram_and_what_followed_it():
    h = np.array([5, 1, 2, 3, 9, 9, 7, 2, 3, 4, 4, 1, 2, 3], dtype=np.int32)
    # "1 2 3" ends the history; it occurred at 1..3, followed by 9 9 7; "2 3" also at 7..8 (then 4),
    # but the longer match wins
    assert lookup(h, 3) == [9, 9, 7]
    assert lookup(h, 1) == [9]
    assert lookup(np.array([1, 2, 3, 4], dtype=np.int32), 4) == []  # nothing repeats
    assert lookup(np.array([8, 6, 1, 2, 8, 6], dtype=np.int32), 4) == [1, 2, 8, 6]
    assert lookup(np.array([8, 6, 8], dtype=np.int32), 4) == []  # a 1-gram is not enough
    assert lookup(h, 0) == []
    # a copy under way: its 6-token match (at 0..5, then 7) beats the later 4-gram (at 8..11, then 0)
    copy = np.array([1, 2, 3, 4, 5, 6, 7, 0, 3, 4, 5, 6, 0, 9, 1, 2, 3, 4, 5, 6], dtype=np.int32)
    assert lookup(copy, 2) == [7, 0]


def test_the_costs_steps_measured_in_the_loop_replace_the_load_figures():
    costs = BatchCosts([1.0, 1.6, 2.05, 2.5])
    for _ in range(3):
        costs.observe(1, 0.010)
        costs.observe(4, 0.030)  # the loop's verify of 4 tokens: 3x a plain step, not the load's 2.5x
    costs.observe(3, 0.040)  # a size seen once keeps its load figure
    assert costs.cost(4) == pytest.approx(3.0) and costs.cost(3) == 2.05 and costs.cost(2) == 1.6
    assert best_length(0.9, costs, 3) == 2 and best_length(0.9, BatchCosts([1.0, 1.6, 2.05, 2.5]), 3) == 3
    for _ in range(600):  # no verify of 4 for a long while: its time is forgotten, the load figure is back
        costs.observe(1, 0.010)
    assert costs.cost(4) == 2.5
    given = BatchCosts([1.0] * 4, learn=False)
    for _ in range(5):
        given.observe(1, 0.010)
        given.observe(4, 0.090)
    assert given.cost(4) == 1.0


def test_the_draft_length_follows_the_measured_costs_and_the_acceptance_rate():
    gpu = BatchCosts([1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14, 1.16])  # bandwidth-bound: batches are free
    cpu = BatchCosts([1.0, 1.6, 2.05, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0])  # the 2-core SmolLM2 figures
    assert best_length(0.8, gpu, 8) == 8
    assert best_length(0.2, gpu, 8) >= 1  # even a poor guess is nearly free on a GPU
    assert 1 <= best_length(0.8, cpu, 8) <= 4
    assert best_length(0.95, cpu, 8) > best_length(0.8, cpu, 8)
    assert best_length(0.5, cpu, 8) == 0  # no length beats one plain token: nothing is drafted
    assert expected_tokens(0.0, 4) == 1.0 and expected_tokens(0.5, 1) == 1.5
    assert abs(expected_tokens(0.999, 8) - 9) < 0.05


def test_auto_drafts_only_where_a_draft_pays_at_the_rate_ngrams_reach():
    """Under auto, n-grams draft where a draft breaks even below 55 % of guesses right (they hold about
    half): on a GPU, not on this 2-core CPU, where the costs below (measured at load, one engine in the
    process) break even at 70 % and n-grams forced gave 0.94x plain on a copy-heavy rewrite."""
    gpu = BatchCosts([1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14, 1.16])
    here = BatchCosts([1.0, 1.80, 2.18, 2.56, 2.97, 3.38, 3.79, 4.20, 4.92])
    assert break_even_rate(gpu, 8) < 0.1 and 0.6 < break_even_rate(here, 8) < 0.75
    on, why_on = auto_drafting(gpu, 8)
    off, why_off = auto_drafting(here, 8)
    assert on and why_on.startswith("n-gram drafts pay here from ")
    assert not off and why_off.startswith("off on this machine: a batch of 2 tokens costs 1.80x one, so a draft "
                                          "pays only when at least 70% of guesses hold")
    assert auto_drafting(BatchCosts([1.0, 1.5, 1.8, 2.0, 2.2, 2.4, 2.6, 2.8, 3.0]), 8)[0]  # breaks even below 55 %
    assert not auto_drafting(here, 0)[0]  # no draft length allowed: nothing pays


def test_the_ngram_drafter_looks_up_the_sequence_its_slot_holds_and_counts_what_was_checked():
    drafter = NgramDrafter(64)
    drafter.start([5, 1, 2, 3, 9, 7, 1, 2], draft=True)
    assert drafter.propose(3, 4) == [9, 7, 1, 2]  # "1 2 3" occurred before: what followed it
    drafter.checked([9, 7, 1, 2], [9, 7, 4], drafted=True)  # two kept, then the model's own 4
    assert (drafter.stats.drafted, drafter.stats.accepted, drafter.stats.verifies) == (4, 2, 1)
    drafter.kept([3, 9, 7], 8, row=0)  # the pending token and the accepted part are in the sequence
    assert drafter.propose(4, 2) == []  # "7 4" never occurred
    drafter.cut(6)  # the slot went back to a checkpoint: its history is the sequence's again
    drafter.kept([1, 2], 6, row=0)
    assert drafter.propose(3, 1) == [9]
    rate = drafter.stats.rate
    drafter.checked([9], [8], drafted=False)  # checked for free by plain decoding: only the rate moves
    assert drafter.stats.rate < rate and drafter.stats.verifies == 1
    drafter.start([5, 1, 2, 5, 1], draft=False)  # a reply that reads logprobs: nothing proposed
    assert drafter.propose(2, 4) == [] and drafter.stats.verifies == 0  # and each reply starts afresh


def test_the_running_rate_moves_with_every_checked_guess():
    stats = DraftStats()
    start = stats.rate
    for _ in range(10):
        stats.observe(False)
    assert stats.rate < 0.2 < start
    for _ in range(20):
        stats.observe(True)
    assert stats.rate > 0.9


COPY = "\n".join(f"def step_{i}(value, total):\n    total = total + value * {i}\n    return total" for i in range(6))


def _prompts(rng: random.Random, n: int) -> list[list[dict]]:
    words = "the keeper climbed the stairs while the storm broke over the rocks and the lamp turned".split()
    out = []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(4, 40)))
        if i % 2 == 0:
            text = f"Copy this code exactly, then explain it:\n\n{COPY}\n\n{text}"
        out.append([{"role": "user", "content": text}])
    return out


def _run(engine: Engine, messages: list[dict], n: int, draft: bool) -> tuple[list[int], int, int]:
    """Up to n greedy tokens of a reply, straight from the token loop, and the draft tokens it verified
    and accepted."""
    prompt = engine.tokenize_prompt(engine.render_prompt(ChatRequest(messages, enable_thinking=False)))
    out, job = greedy_slot(engine, prompt, n, draft=draft)
    return out, job.drafts.drafted, job.drafts.accepted


@contextlib.contextmanager
def plain_and(path, settings: LoadSettings, speculative: str) -> Iterator[tuple[Engine, Engine]]:
    """Two engines on one file: speculative decoding off, and `speculative`; both unloaded at the end."""
    plain, spec = Engine(), Engine()
    try:
        plain.load(path, replace(settings, speculative="off"))
        spec.load(path, replace(settings, speculative=speculative))
        yield plain, spec
    finally:
        plain.unload()
        spec.unload()


def near_tie(path, settings, prompt: list[int], want: list[int], got: list[int]) -> float:
    """Where a drafted reply leaves the plain one: asserts plain decoding's two candidates there were
    less than ROUNDING apart (a verify batch's rounding flips only such near-ties); returns the gap."""
    j = next((i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y), None)
    assert j is not None, "one reply is a prefix of the other"
    gap = _logit_gap_at(path, settings, prompt, want[:j], want[j], got[j])
    assert gap < ROUNDING, f"a draft changed token {j}: the plain path prefers it by {gap}"
    return gap


def again(engine, messages: list[dict], got: list[int]) -> list[dict]:
    """The conversation with `got` as the assistant's answer and a follow-up question."""
    text = engine.llm.detokenize(got, special=False).decode("utf-8", "replace")
    return messages + [{"role": "assistant", "content": text}, {"role": "user", "content": "Again, please."}]


def _logit_gap_at(path, settings: LoadSettings, prompt: list[int], tokens: list[int], a: int, b: int) -> float:
    """Plain decoding's logits after `prompt + tokens`: how far apart a and b are (both must be in its top two)."""
    llm = load_llama(path, settings)
    try:
        llm.eval(prompt)
        for t in tokens:
            llm.eval([t])
        logits = np.ctypeslib.as_array(llama().llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        assert {a, b} <= set(np.argsort(logits)[-2:].tolist())
        return float(abs(logits[a] - logits[b]))
    finally:
        llm.close()


@pytest.fixture(scope="module")
def models(smollm2, qwen35moe_model):
    return {"smollm2": smollm2, "qwen35moe": qwen35moe_model}


@pytest.mark.slow
@pytest.mark.parametrize("which, n_prompts", [("smollm2", 6), ("qwen35moe", 30)])
def test_greedy_tokens_with_drafts_are_the_tokens_without(models, which, n_prompts, capsys):
    """Over many prompts (half of them copy-heavy) and follow-ups, at temperature 0. The drafter is
    made to draft whenever it has a guess (a GPU's flat batch costs), so verification and rollback
    run as often as possible; the hybrid's rejected tails are rolled back by n_rs_seq."""
    path = models[which]
    base = LoadSettings(n_ctx=4096, n_threads=2, n_threads_batch=2, n_outputs_max=1)
    with plain_and(path, base, "ngram") as (plain, spec):
        assert spec.slots.draft_max == 8 and plain.slots.draft_max == 0
        spec.slots.costs = BatchCosts([1.0] * 9, learn=False)
        rng = random.Random(f"spec-{which}")
        drafted = accepted = differ = 0
        for messages in _prompts(rng, n_prompts):
            for turn in range(2):  # and a follow-up, from the cache
                want, _, _ = _run(plain, messages, 48, draft=False)
                got, d, a = _run(spec, messages, 48, draft=True)
                drafted, accepted = drafted + d, accepted + a
                if got != want:
                    prompt = spec.tokenize_prompt(spec.render_prompt(ChatRequest(messages, enable_thinking=False)))
                    near_tie(path, base, prompt, want, got)
                    differ += 1
                if turn == 0:
                    messages = again(spec, messages, got)
    with capsys.disabled():
        print(f"\n  {which}: {2 * n_prompts} replies, {drafted} draft tokens verified, {accepted} accepted; "
              f"{differ} replies differ from plain decoding, by rounding")
    assert drafted > 50 and accepted > 0  # the verify path and the rollback really ran
    assert drafted > accepted  # and rejected tails were cut


def test_no_drafts_when_logprobs_are_asked_for(smollm2):
    engine = Engine()
    engine.load(smollm2, LoadSettings(n_ctx=1024, n_threads=2, n_outputs_max=1, speculative="ngram"))
    try:
        engine.slots.costs = BatchCosts([1.0] * 9, learn=False)
        messages = [{"role": "user", "content": f"Copy this code exactly:\n\n{COPY}"}]
        reply = engine.generate(ChatRequest(messages, enable_thinking=False, logprobs=2,
                                            sampling=SamplingParams(temperature=0.0, max_tokens=40)))
        assert reply.stats.drafted == 0 and len(reply.logprobs) == reply.stats.generated_tokens
        again = engine.generate(ChatRequest(messages, enable_thinking=False,
                                            sampling=SamplingParams(temperature=0.0, max_tokens=40)))
        assert again.stats.drafted > 0
    finally:
        engine.unload()


def test_off_means_no_draft_context(smollm2):
    engine = Engine()
    engine.load(smollm2, LoadSettings(n_ctx=512, n_threads=2, n_outputs_max=1, speculative="off"))
    try:
        assert engine.slots.draft_max == 0 and engine.slots.costs.relative == [1.0]
    finally:
        engine.unload()
