"""Drafting with the model's MTP head (app/engine/mtp.py) on the tiny Clover with an MTP block: which
drafter a file gets, the head's cache following the target's, and verification that gives the tokens
of plain decoding at temperature 0, over many prompts and follow-ups.

The tiny model's weights are random, so its head's guesses are almost never the target's tokens. The
exactness test therefore makes the loop draft at every step (the longest draft, whatever it costs),
and in half the prompts replaces part of the head's guess with the target's own next tokens (known
from the plain run), so that verification also accepts drafts and the head follows accepted rows."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

import app.engine.mtp as mtp_module
from app.engine.contract import ChatRequest, SamplingParams
from app.engine.drafting import BatchCosts
from app.engine.local import Engine
from app.engine.mtp import MtpHead, drafter, has_head
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings, load_llama
from tests.engine.test_slot_drafting import HYBRID_ROUNDING, _agree, _round
from tests.engine.test_speculative import again, near_tie, plain_and
from tests.helpers.decode import greedy_slot
from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

BASE = LoadSettings(n_ctx=4096, n_threads=2, n_threads_batch=2, n_outputs_max=1)


@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory):
    return write_qwen35moe(tmp_path_factory.mktemp("models") / "qwen35moe-mtp.gguf",
                           qwen35_shape(n_ctx_train=32_768), mtp=True)


def test_the_setting_picks_the_head_where_the_file_has_one(mtp_model, qwen35moe_model):
    with_head = load_llama(mtp_model, replace(BASE, speculative="auto"))
    without = load_llama(qwen35moe_model, replace(BASE, speculative="auto"))
    try:
        assert has_head(with_head) and not has_head(without)
        assert [drafter(with_head, s) for s in ("auto", "mtp", "ngram", "off")] == ["mtp", "mtp", "ngram", ""]
        assert [drafter(without, s) for s in ("auto", "mtp", "ngram", "off")] == ["ngram", "", "ngram", ""]
        with pytest.raises(ValueError):
            MtpHead(without)
    finally:
        with_head.close()
        without.close()
    assert LoadSettings(speculative="auto").mtp and LoadSettings(speculative="mtp").mtp
    assert not LoadSettings(speculative="ngram").mtp and not LoadSettings(speculative="off", parallel=2).mtp
    assert LoadSettings(speculative="auto", parallel=4).mtp  # the head drafts for every slot of any count


def test_the_engine_attaches_the_head_and_off_loads_none(mtp_model):
    engine = Engine()
    try:
        engine.load(mtp_model, replace(BASE, speculative="auto"))
        assert engine.slots.head is not None and engine.slots.draft_max == 8
        # a verify batch of n costs the batch plus the n - 1 head steps that drafted it
        assert engine.slots.costs.relative[0] == 1.0 and len(engine.slots.costs.relative) == 9
        reply = engine.generate(ChatRequest([{"role": "user", "content": "Hello there"}], enable_thinking=False,
                                            sampling=SamplingParams(temperature=0.0, max_tokens=24)))
        assert reply.stats.generated_tokens > 0 and reply.stats.eval_tokens == 0  # timed by the clock
        assert reply.stats.generation_tps == reply.stats.wall_tps
        # the tiny model's random head never guesses right: the engine stops drafting, then following, and
        # guesses one token at 8, 24, 56, 120 ... tokens (each after a catch-up on the latest 8 positions)
        head = engine.slots.head
        steps = head.steps
        long = engine.generate(ChatRequest([{"role": "user", "content": "Tell me a long story"}],
                                           enable_thinking=False,
                                           sampling=SamplingParams(temperature=0.0, max_tokens=120)))
        if long.stats.generated_tokens >= 100 and long.stats.accepted == 0:
            assert not head.following
            assert head.steps - steps <= long.stats.drafted + 5  # drafts, 4 guesses, one at the start
            assert _head_pos_max(engine) < len(engine.slots.slots[0].tokens) - 1  # behind: it stopped following
            # the rate is the model's: the next reply starts where this one ended, without following its
            # prompt, and the guesses go on every 128 tokens at most, across replies
            steps = head.steps
            third = engine.generate(ChatRequest([{"role": "user", "content": "And another"}],
                                                enable_thinking=False,
                                                sampling=SamplingParams(temperature=0.0, max_tokens=20)))
            assert third.stats.drafted == 0 and not head.following
            fourth = engine.generate(ChatRequest([{"role": "user", "content": "Tell me a longer story"}],
                                                 enable_thinking=False,
                                                 sampling=SamplingParams(temperature=0.0, max_tokens=140)))
            if third.stats.generated_tokens + fourth.stats.generated_tokens >= 130:
                assert head.steps > steps
        engine.load(mtp_model, replace(BASE, speculative="off"))
        assert engine.slots.head is None and engine.slots.draft_max == 0
        engine.load(mtp_model, replace(BASE, speculative="ngram"))
        assert engine.slots.head is None and engine.slots.draft_max == 8
    finally:
        engine.unload()


def _prompts(rng: random.Random, n: int) -> list[list[dict]]:
    words = "the keeper climbed the stairs while the storm broke over the rocks and the lamp turned".split()
    return [[{"role": "user", "content": " ".join(rng.choice(words) for _ in range(rng.randint(3, 60)))}]
            for _ in range(n)]


def _head_pos_max(engine: Engine, seq: int = 0) -> int:
    lc = llama()
    return int(lc.llama_memory_seq_pos_max(engine.slots.head.mem, seq))


@pytest.mark.slow
@pytest.mark.parametrize("drafting", ["at every step", "now and then"])
def test_greedy_tokens_with_mtp_drafts_are_the_tokens_without(mtp_model, monkeypatch, capsys, drafting):
    """40 prompts (20 now and then), each with a follow-up from the cache (the hybrid restores a
    checkpoint, the head cuts its cache to match), 40 tokens each, the head drafting 1-8 tokens at every
    step, or now and then: where no length pays (six steps in ten) the head stops following, keeps the
    latest rows, catches up on them for a one-token guess, and follows again when drafting pays."""
    every = drafting == "at every step"
    with plain_and(mtp_model, BASE, "mtp") as (plain, spec):
        head = spec.slots.head
        assert head is not None and plain.slots.head is None
        rng = random.Random("mtp")
        length = {"k": 8}
        def best_length(rate, costs, k):  # the head's choice, and the loop's "does drafting pay" at a reply's start
            return min(k, length["k"]) if every or rng.random() < 0.4 else 0

        monkeypatch.setattr(mtp_module, "best_length", best_length)
        spec.slots.costs = BatchCosts([1.0] * 9, learn=False)  # the step decodes whatever the head drafted
        oracle: dict[str, object] = {"want": None, "start": 0, "keep": 0.0}
        real_draft = MtpHead.draft

        def draft(self, token, pos, k):  # the head's real steps; then, in oracle prompts, the target's own tokens
            guess = real_draft(self, token, pos, k)
            want, j = oracle["want"], pos - oracle["start"]
            if want is not None and guess:
                for i in range(len(guess)):
                    if j + 1 + i < len(want) and rng.random() < oracle["keep"]:
                        guess[i] = want[j + 1 + i]
            return guess

        monkeypatch.setattr(MtpHead, "draft", draft)
        replies = drafted = accepted = differ = steps = 0
        gaps: list[float] = []
        for p, messages in enumerate(_prompts(rng, 40 if every else 20)):
            for turn in range(2):
                prompt = spec.tokenize_prompt(spec.render_prompt(ChatRequest(messages, enable_thinking=False)))
                want, _ = greedy_slot(plain, prompt, 40, draft=False)
                length["k"] = rng.randint(1, 8)
                oracle.update(want=want if p % 2 else None, start=len(prompt), keep=0.8)
                steps_before = head.steps
                got, job = greedy_slot(spec, prompt, 40, draft=True)
                replies += 1
                drafted += job.drafts.drafted
                accepted += job.drafts.accepted
                steps += head.steps - steps_before
                if got != want:  # only where plain decoding itself hardly prefers its token (a verify batch's rounding)
                    gaps.append(near_tie(mtp_model, BASE, prompt, want, got))
                    differ += 1
                # the head's cache ends where the target's does: it followed every decode, cut and rollback
                # (now and then: it may have stopped following, never gone past the target)
                held = len(spec.slots.slots[0].tokens)
                assert head.ok and head.n <= held and _head_pos_max(spec) <= held - 1
                if every:
                    assert head.n == held and _head_pos_max(spec) == held - 1
                if turn == 0:
                    messages = again(spec, messages, got)
    with capsys.disabled():
        print(f"\n  MTP drafting {drafting}: {replies} replies of up to 40 tokens, {steps} head steps, "
              f"{drafted} draft tokens verified, "
              f"{accepted} accepted; {differ} replies differ from plain decoding, at near-ties "
              f"{', '.join(f'{g:.4f}' for g in gaps) or '-'}")
    assert differ <= replies // 10  # rounding flips a near-tie now and then, not a reply in ten
    assert drafted > (2000 if every else 300) and steps > (2000 if every else 300)  # the head drafted
    assert 0 < accepted < drafted  # accepted runs and rejected tails both happened


def test_the_plan_counts_the_head_where_it_drafts_and_puts_it_with_the_last_block(mtp_model, qwen35moe_model):
    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header
    from app.machine.gpu import probe_with
    from app.machine.system_memory import SystemMemory
    from app.model.plan import GiB, PlanRequest, breakdown, make_plan
    from tests.helpers.fakes import FakeNVML

    facts = facts_from_header(read_header(mtp_model))
    assert facts.extra_blocks == (4,) and 0 < facts.unused_expert_bytes < facts.unused_bytes
    ram = SystemMemory(64 * GiB, 56 * GiB)
    cpu = probe_with(FakeNVML([]))
    used = make_plan(facts, cpu, ram, PlanRequest(n_ctx=4096))
    off = make_plan(facts, cpu, ram, PlanRequest(n_ctx=4096, speculative="off"))
    slots = make_plan(facts, cpu, ram, PlanRequest(n_ctx=4096, parallel=2))
    assert used.breakdown.mtp > 0 and off.breakdown.mtp == 0 and slots.breakdown.mtp == used.breakdown.mtp
    assert used.breakdown.ram_total - off.breakdown.ram_total == used.breakdown.mtp
    assert used.breakdown.mtp > facts.unused_bytes + facts.mtp_kv_bytes(4096)
    assert facts.mtp_kv_bytes(4096) * len(facts.attention_blocks) == facts.kv_bytes(4096)  # one attention block's
    text = "\n".join(used.lines() + used.warnings)
    assert "MTP head" in text and "not loaded" not in text
    assert any("not loaded" in w and "speculative decoding: off" in w for w in off.warnings)
    assert not any("not loaded" in w for w in slots.warnings)
    no_head = facts_from_header(read_header(qwen35moe_model))
    assert make_plan(no_head, cpu, ram, PlanRequest(n_ctx=4096)).breakdown.mtp == 0
    # on a GPU the head's experts go where the last block's go
    on_gpu = breakdown(facts, 4096, (0, 1), "f16", "f16", on_gpu=True, mtp=True)
    all_ram = breakdown(facts, 4096, (0, 1, 2, 3), "f16", "f16", on_gpu=True, mtp=True)
    assert on_gpu.mtp_ram == 0 and not on_gpu.mtp_experts_in_ram
    assert all_ram.mtp_ram == facts.unused_expert_bytes and all_ram.mtp_experts_in_ram
    assert on_gpu.mtp_gpu - all_ram.mtp_gpu == facts.unused_expert_bytes
    # and llama.cpp is told so: the head's block joins the blocks whose experts stay in RAM
    from dataclasses import replace as change

    assert change(used, device="gpu", breakdown=all_ram, cpu_moe_blocks=(0, 1, 2, 3)).settings().cpu_moe_blocks \
        == (0, 1, 2, 3, 4)
    assert change(used, device="gpu", breakdown=on_gpu, cpu_moe_blocks=(0, 1)).settings().cpu_moe_blocks == (0, 1)


@pytest.mark.slow
def test_with_several_slots_the_head_drafts_for_each_from_its_own_rows(mtp_model, monkeypatch, capsys):
    """--parallel 2 with the head (issue 39, item 2): each slot drafts with it (a sequence each in one
    draft context, as llama-server's draft-mtp), in the same batches, starting together or slot 1
    first. Every reply is the plain one (a near-tie flipped by rounding aside, as with one slot), and
    each slot's head is handed, position by position, the hidden states it gets when that prompt runs
    alone: its rows are picked out of batches shared with the other slot (llama.cpp reorders the
    hybrid's micro-batches), and its cache follows its own sequence."""
    settings = replace(BASE, n_ctx=2048, parallel=2)
    with plain_and(mtp_model, settings, "mtp") as (plain, spec):
        head = spec.slots.head
        assert head is not None and len(spec.slots.slots) == 2
        heads = [s.drafter.head for s in spec.slots.slots]
        assert heads[0] is head and heads[1].seq == 1 and heads[1].shared is head.shared
        assert spec.info.drafting == "the model's MTP head drafts for every slot"
        monkeypatch.setattr(mtp_module, "best_length", lambda rate, costs, k: k)  # the head drafts at every step
        spec.slots.costs = BatchCosts([1.0] * 9, learn=False)
        oracle: dict[int, tuple[list[int], int]] = {}  # a slot's reply made alone, and where it starts
        real_draft, real_follow = MtpHead.draft, MtpHead.follow
        rows: dict[tuple[int, int], np.ndarray] = {}

        def draft(self, token, pos, k):  # the head's real guess, then (in 4 of 5 places) the target's own token
            guess = real_draft(self, token, pos, k)
            want, start = oracle.get(self.seq, (None, 0))
            j = pos - start
            for i in range(len(guess)):
                if want is not None and j + 1 + i < len(want) and random.Random(f"{pos}-{i}").random() < 0.8:
                    guess[i] = want[j + 1 + i]
            return guess

        def follow(self, tokens, pos, row=0):  # what the target hands the head for its slot's positions
            if self._extracting:
                hidden = np.ctypeslib.as_array(self.ext.llama_get_embeddings_nextn(self.target),
                                               shape=(row + len(tokens), self.n_embd))
                rows.update({(self.seq, pos + i): hidden[row + i].copy() for i in range(len(tokens))})
            return real_follow(self, tokens, pos, row)

        monkeypatch.setattr(MtpHead, "draft", draft)
        monkeypatch.setattr(MtpHead, "follow", follow)
        rng = random.Random("mtp-slots")
        replies = differ = drafted = accepted = compared = 0
        moved = 0.0
        texts = _prompts(rng, 16)
        for i in range(0, len(texts), 2):
            group = [spec.tokenize_prompt(spec.render_prompt(ChatRequest(m, enable_thinking=False)))
                     for m in texts[i:i + 2]]
            want = _round(plain, group, 32, draft=False)
            alone, alone_rows = [], []
            for k in range(2):  # each prompt alone, in slot 0
                oracle.clear()
                oracle[0] = (want[k].tokens, len(group[k]))
                rows.clear()
                alone.append(_round(spec, group[k:k + 1], 32, draft=True)[0])
                alone_rows.append({pos: r for (_, pos), r in rows.items()})
            oracle.clear()
            oracle.update({k: (want[k].tokens, len(group[k])) for k in range(2)})
            rows.clear()
            # in half the groups slot 1 writes first, so that slot 0's prompt is read after its rows
            together = _round(spec, group, 32, draft=True, stagger=6 * (i // 2 % 2))
            for k, (a, b) in enumerate(zip(want, together, strict=True)):
                same, _ = _agree(a, b, rounding=HYBRID_ROUNDING)
                differ += not same
                replies += 1
                drafted += b.drafted
                accepted += b.accepted
                # slot k's head followed its sequence to its end, through batches it shared with the other
                held = len(spec.slots.slots[k].tokens)
                assert heads[k].ok and heads[k].n == held and _head_pos_max(spec, k) == held - 1
                # ... from its own rows: the same hidden states as alone, up to where the replies part
                parts = next((j for j, (x, y) in enumerate(zip(alone[k].tokens, b.tokens, strict=False)) if x != y),
                             min(len(alone[k].tokens), len(b.tokens)))
                for pos in range(len(group[k]) + parts):
                    if pos in alone_rows[k] and (k, pos) in rows:
                        x, y = alone_rows[k][pos], rows[(k, pos)]
                        moved = max(moved, float(np.abs(x - y).max()) / float(np.abs(x).max()))
                        compared += 1
    with capsys.disabled():
        print(f"\n  MTP head in each of 2 slots: {replies} replies, {drafted} head draft tokens verified, {accepted} "
              f"accepted, {differ} replies differ from plain decoding; {compared} hidden-state rows compared "
              f"with the prompt alone, moved at most {moved:.2g} of their largest value")
    assert compared > 600 and moved < 0.01  # the slot's own rows (another slot's would differ by all of them)
    assert differ <= replies // 10 and 0 < accepted < drafted
