"""Speculative decoding in the parallel slots (app/engine/slots.py): at temperature 0, the replies of
several slots at once with drafting are the replies of the same traffic without it, on SmolLM2 and on
Clover's hybrid architecture (a recurrent state per sequence, rolled back by llama.cpp's per-sequence
n_rs_seq snapshots); drafts are checked and cut per slot, and the engine reports them.

Like with like: one loaded engine, its slots cleared before each round, the same prompts given to the
same slots in the same step, drafting off then on (`Job.draft`). What drafting changes is only how
the tokens are batched: a reply's accepted tokens are decoded in its verify rows instead of one a
step, and the steps' rows (and so llama.cpp's micro-batches, split per sequence) differ for every
reply. Where a kernel rounds a row otherwise in another batch (SmolLM2's Q4_1), a near-tie may flip;
the test then asserts that it was one: at the first token where the replies part, the reply made
without drafts preferred its token by less than ROUNDING, and at every token before it the two runs'
logits agreed within ROUNDING (a wrong rollback moves them by whole logits: measured up to 19).
Measured on this CPU: none of SmolLM2's replies differ and no logit moves; the hybrid's replies are
the same tokens, their logits within 5e-3. The tiny hybrid's random weights copy nothing, so its
drafts come from an oracle that knows the plain reply and errs at a random place (`_oracle`): every
verify keeps some of a draft and rolls the rest back, in several sequences of one batch."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from app.engine.contract import ChatRequest, ReplyStats, SamplingParams
from app.engine.drafting import BatchCosts, DraftStats, micro_batches
from app.engine.local import Engine
from app.engine.sampler import chain_for
from app.engine.slots import Job, Scheduler, Slot
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings
from tests.helpers.engines import loaded_engine

ROUNDING = 1.0  # SmolLM2's Q4_1 rows round up to 0.72 of a logit otherwise in another batch (test_slots)
# the F32 hybrid's logits move by rounding where rows are batched otherwise (a verify batch's tokens
# read in one chunk by the gated delta net, other replies' micro-batches split otherwise): measured up
# to 5e-3 of logits near 14, as much with drafts all kept (nothing rolled back) as all rejected; a
# recurrent state rolled back wrong moves them by whole logits (checkpoints.py: up to 19)
HYBRID_ROUNDING = 0.05
TOP = 5  # candidates recorded per token

WORDS = ("the keeper climbed stairs while a storm broke over rocks and the lamp turned slowly north "
         "river stone paper seven green quiet market window bread").split()
LIST = ["apples", "brown bread", "three candles", "a blue notebook", "olive oil", "rope", "matches",
        "a tin of sardines", "fresh basil", "lamp oil", "two batteries", "a sharp knife"]
CODE = "\n".join(f"def step_{i}(value, total):\n    total = total + value * {i}\n    return total" for i in range(5))


def _prompts(rng: random.Random, n: int) -> list[str]:
    """Copy-heavy requests (a list to repeat, code to edit) and requests with nothing to copy."""
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            items = rng.sample(LIST, rng.randint(6, len(LIST)))
            out.append("Repeat this list exactly, one item a line:\n" + "\n".join(f"- {x}" for x in items))
        elif kind == 1:
            out.append(f"Rename `total` to `acc` in this code and write it out in full:\n\n{CODE}\n\n"
                       f"Note: {' '.join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))}")
        else:
            out.append("Tell me a short story about " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))))
    return out


@dataclass
class Run:
    """One reply: its tokens and, for each, the TOP best candidates of the logits it was sampled from."""

    tokens: list[int] = field(default_factory=list)
    top: list[dict[int, float]] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0


def _round(engine: Engine, prompts: list[list[int]], n: int, draft: bool, stagger: int = 0) -> list[Run]:
    """The prompts' greedy replies (up to n tokens), all submitted in one step to slots cleared of
    everything, so that each round of the same prompts meets the same traffic. `stagger`: the last
    prompt goes first, to slot len(prompts) - 1, and the others (to the slots before it) once its reply has
    `stagger` tokens: their prompts are read in batches that start with its rows."""
    sched: Scheduler = engine.slots
    lc, llm = llama(), engine.llm
    vocab = lc.llama_model_get_vocab(llm.model)
    n_vocab = llm.n_vocab()
    with sched._cond:  # noqa: SLF001 (the test's like-for-like start: empty slots, picked in order)
        assert sched.busy() == 0
        for i, slot in enumerate(sched.slots):
            sched._clear(slot)  # noqa: SLF001
            slot.used_at = 0.0 if not stagger or i == len(prompts) - 1 else 1.0
    runs = [Run() for _ in prompts]
    jobs = []

    def recorder(run: Run):
        def on_token(token: int, row: int) -> int:
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(llm.ctx, row), shape=(n_vocab,))
            best = np.argpartition(-logits, TOP)[:TOP]
            run.top.append({int(t): float(logits[t]) for t in best} | {token: float(logits[token])})
            return token
        return on_token

    def job_for(tokens: list[int], run: Run) -> Job:
        chain = chain_for(llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0)
        return Job(tokens, chain, n, eog=lambda t: bool(lc.llama_vocab_is_eog(vocab, t)),
                   client="api", draft=draft, on_token=recorder(run))

    if stagger:
        first = sched.submit(job_for(prompts[-1], runs[-1]))
        deadline = time.monotonic() + 60
        while first.generated < stagger:
            if first.slot >= 0 and sched.slots[first.slot].job is not first or time.monotonic() > deadline:
                break  # it ended sooner
            time.sleep(0.001)
    with sched._cond:  # noqa: SLF001 (every job waits for the same step)
        for tokens, run in zip(prompts[:-1] if stagger else prompts, runs, strict=False):
            jobs.append(sched.submit(job_for(tokens, run)))
    if stagger:
        jobs.append(first)
    for job, run in zip(jobs, runs, strict=True):
        run.tokens = list(sched.stream(job))
        run.drafted, run.accepted = job.drafts.drafted, job.drafts.accepted
    return runs


def _agree(want: Run, got: Run, rounding: float = ROUNDING) -> tuple[bool, float]:
    """(whether the replies are the same tokens, the most a best candidate's logit moved before they
    part); asserts that they part, if they do, at a near-tie, after logits that agreed."""
    moved = 0.0
    for j, (a, b) in enumerate(zip(want.tokens, got.tokens, strict=False)):
        if a != b:
            assert b in want.top[j], f"token {j}: the drafted reply took a token far from the plain one's"
            gap = want.top[j][a] - want.top[j][b]
            assert gap < rounding, f"token {j}: the plain reply preferred its token by {gap:.3f}"
            return False, moved
        shared = set(want.top[j]) & set(got.top[j])
        assert a in shared, f"token {j}: the logits moved"
        moved = max(moved, *(abs(want.top[j][t] - got.top[j][t]) for t in shared))
        assert moved <= rounding, f"token {j}: the logits moved by {moved}"
    assert len(want.tokens) == len(got.tokens), "one reply ended where the other went on"
    return True, moved


def _compare(engine: Engine, seed: str, n_prompts: int, per_round: int, n: int, capsys) -> tuple[int, int, int]:
    rng = random.Random(seed)
    texts = _prompts(rng, n_prompts)
    prompts = [engine.tokenize_prompt(engine.render_prompt(ChatRequest([{"role": "user", "content": t}],
                                                                       enable_thinking=False)))
               for t in texts]
    drafted = accepted = differ = copy_drafted = copy_accepted = 0
    moved = 0.0
    for i in range(0, n_prompts, per_round):
        group = prompts[i:i + per_round]
        plain = _round(engine, group, n, draft=False)
        spec = _round(engine, group, n, draft=True)
        for k, (want, got) in enumerate(zip(plain, spec, strict=True)):
            assert want.drafted == 0
            same, by = _agree(want, got)
            differ, moved = differ + (not same), max(moved, by)
            drafted, accepted = drafted + got.drafted, accepted + got.accepted
            if (i + k) % 3 != 2:
                copy_drafted, copy_accepted = copy_drafted + got.drafted, copy_accepted + got.accepted
    with capsys.disabled():
        print(f"\n  {n_prompts} prompts, {per_round} slots at once: {drafted} draft tokens verified, {accepted} "
              f"accepted ({copy_accepted} of {copy_drafted} on the copy-heavy ones); "
              f"{differ} replies differ from the plain ones, at near-ties; logits moved by at most {moved:.4f}")
    assert copy_drafted > 0 and copy_accepted > 0  # the drafts were checked, and kept
    assert drafted > accepted  # and rejected tails were cut
    return drafted, accepted, differ


# a GPU's flat costs: rows are free, only micro-batches cost, so the slots draft all they can in as few
# micro-batches as they can (the most verifies and cuts)
FLAT = BatchCosts([1.0] * 9, learn=False)


@pytest.mark.slow
def test_slots_with_drafts_write_the_replies_they_write_without_on_smollm2(smollm2, capsys):
    # a partitioned cache: in one pool a reply's cells (and so its rounding) depend on the others' traffic
    settings = LoadSettings(n_ctx=1024, n_batch=64, n_ubatch=64, n_threads=2, parallel=4, speculative="ngram",
                            kv_unified=False)
    with loaded_engine(smollm2, settings) as engine:
        assert engine.slots.draft_max == 8
        engine.slots.costs = FLAT
        _, _, differ = _compare(engine, "slots-smollm2", 12, 4, 48, capsys)
        assert differ <= 2


def _oracle(engine: Engine, prompts: list[list[int]], n: int, seed: str):
    """A drafter for a model that copies nothing (the tiny hybrid's random weights): it knows each
    prompt's plain reply and guesses what follows in it, wrong at a random place in most guesses, so
    that verifies keep from none to all of a draft and the rest is rolled back, in several sequences
    of one batch. Off the plain reply (a near-tie flipped) it guesses nothing."""
    plain = {tuple(p): r.tokens for p, r in zip(prompts, _round(engine, prompts, n, draft=False), strict=True)}
    n_vocab = engine.llm.n_vocab()

    def lookup(history: np.ndarray, k: int) -> list[int]:
        for prompt, reply in plain.items():
            if len(history) > len(prompt) and tuple(history[:len(prompt)].tolist()) == prompt:
                made = history[len(prompt):].tolist()
                if made != reply[:len(made)]:
                    return []
                guess = list(reply[len(made):len(made) + k])
                rng = random.Random(f"{seed}-{len(prompt)}-{len(made)}")
                wrong = rng.randint(0, len(guess))  # len(guess): all of it right
                if wrong < len(guess):
                    guess[wrong] = (guess[wrong] + 1 + rng.randrange(n_vocab - 1)) % n_vocab
                return guess
        return []
    return lookup


@pytest.mark.slow
def test_slots_with_drafts_write_the_replies_they_write_without_on_the_hybrid(qwen35moe_model, capsys):
    """The hybrid's rejected tails are rolled back by n_rs_seq, several sequences in one batch, each
    by its own number of tokens (or none)."""
    settings = LoadSettings(n_ctx=1024, n_batch=64, n_ubatch=64, n_threads=2, parallel=3, speculative="ngram",
                            ctx_checkpoints=6)
    with loaded_engine(qwen35moe_model, settings) as engine:
        assert llama().llama_n_rs_seq(engine.llm.ctx) == 8 and engine.slots.draft_max == 8
        engine.slots.costs = FLAT
        rng = random.Random("slots-hybrid")
        texts = _prompts(rng, 12)
        prompts = [engine.tokenize_prompt(engine.render_prompt(ChatRequest([{"role": "user", "content": t}],
                                                                           enable_thinking=False)))
                   for t in texts]
        drafted = accepted = 0
        most = 0.0
        for i in range(0, len(prompts), 3):
            group = prompts[i:i + 3]
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr("app.engine.drafting.lookup", _oracle(engine, group, 48, f"hybrid-{i}"))
                plain = _round(engine, group, 48, draft=False)
                spec = _round(engine, group, 48, draft=True)
            for want, got in zip(plain, spec, strict=True):
                same, moved = _agree(want, got, rounding=HYBRID_ROUNDING)
                assert same  # token for token
                most = max(most, moved)
                drafted, accepted = drafted + got.drafted, accepted + got.accepted
        with capsys.disabled():
            print(f"\n  hybrid: {len(prompts)} prompts, 3 slots at once: {drafted} draft tokens verified, "
                  f"{accepted} accepted; every reply the plain one, token for token, logits within {most:.2g}")
        assert accepted > 100 and drafted - accepted > 100  # long accepted runs, and long tails rolled back


def test_without_rollback_snapshots_the_hybrids_slots_do_not_draft(qwen35moe_model):
    # draft_max 0: the load asks for no snapshots (n_rs_seq 0), and a rollback would need them
    settings = LoadSettings(n_ctx=512, n_batch=32, n_ubatch=32, n_threads=2, parallel=2, speculative="ngram",
                            draft_max=0)
    with loaded_engine(qwen35moe_model, settings) as engine:
        assert llama().llama_n_rs_seq(engine.llm.ctx) == 0 and engine.slots.draft_max == 0


def test_the_slots_drafts_stay_within_the_contexts_rows_of_logits(smollm2):
    """llama.cpp aborts a batch that asks for more logits than n_outputs_max: the load raises the plan's
    1 to a pending token and a whole draft for every slot, within the batch (3 x 9 = 27 of 32 here), and
    the scheduler keeps each step's rows within it."""
    settings = LoadSettings(n_ctx=512, n_batch=32, n_ubatch=32, n_threads=2, parallel=3, n_outputs_max=1,
                            speculative="ngram")
    with loaded_engine(smollm2, settings) as engine:
        assert engine.slots.outputs == 27 and engine.slots.draft_max == 8
        engine.slots.costs = FLAT
        prompt = engine.tokenize_prompt(engine.render_prompt(ChatRequest(
            [{"role": "user", "content": "Repeat this list exactly:\n" + "\n".join(LIST)}], enable_thinking=False)))
        runs = _round(engine, [prompt] * 3, 24, draft=True)
        assert all(len(r.tokens) == 24 for r in runs)


def test_the_engine_reports_the_slots_drafts(smollm2):
    settings = LoadSettings(n_ctx=1024, n_batch=64, n_ubatch=64, n_threads=2, parallel=2, speculative="ngram")
    with loaded_engine(smollm2, settings) as engine:
        engine.slots.costs = FLAT
        messages = [{"role": "user", "content": "Repeat this list exactly:\n" + "\n".join(LIST)}]
        request = ChatRequest(messages, enable_thinking=False, sampling=SamplingParams(temperature=0.0, max_tokens=40))
        reply = engine.generate(request)
        stats: ReplyStats = reply.stats
        assert stats.drafted > 0 and 0 < stats.accepted <= stats.drafted
        assert stats.generated_tokens > stats.drafted - stats.accepted  # every token handed out, in order
        with_logprobs = engine.generate(replace(request, logprobs=2))  # logprobs: no drafts, as in the token loop
        assert with_logprobs.stats.drafted == 0 and with_logprobs.stats.generated_tokens > 0
    with loaded_engine(smollm2, replace(settings, speculative="off")) as engine:
        assert engine.slots.draft_max == 0


def test_a_step_is_costed_as_llama_cpp_splits_it_into_micro_batches():
    """llama-batch.cpp's split_equal: the same rows from every sequence of a micro-batch; with a KV
    stream per sequence only consecutive ids together; n_rs_seq + 1 last rows of each sequence kept
    in one micro-batch."""
    def split(rows, n_ubatch=512, **kw):
        return micro_batches(rows, n_ubatch, equal=kw.pop("equal", True), **kw)

    assert split([(0, 1), (1, 1), (2, 1)]) == [3]
    assert split([(0, 5), (1, 5), (2, 5)], keep_tail=9) == [15]  # drafts of one length: one micro-batch
    assert split([(0, 1), (1, 5), (2, 1)]) == [3, 4]  # a draft beside plain steps: one more
    assert split([(0, 1), (1, 5), (2, 1)], keep_tail=9) == [1, 5, 1]  # and on a hybrid, each apart
    assert split([(0, 1), (2, 1)]) == [1, 1]  # sequences 0 and 2 are not consecutive
    assert split([(0, 1), (2, 1)], sequential=False) == [2]
    assert split([(0, 1), (1, 1), (2, 40)], 32) == [3, 32, 7]
    assert split([(0, 1), (1, 100)], 32, keep_tail=9) == [2, 32, 32, 26, 9]
    assert split([(0, 1), (1, 100)], 32, equal=False) == [32, 32, 32, 5]


def _chooser(costs: BatchCosts, rates: list[float], keep_tail: int = 0) -> tuple[Scheduler, list[Slot]]:
    sched = Scheduler.__new__(Scheduler)  # only what `_lengths` reads
    sched.costs, sched.n_ubatch, sched.keep_tail = costs, 512, keep_tail
    sched.equal_split = sched.sequential = True  # a KV stream per slot, as llama_load makes them
    slots = []
    for i, rate in enumerate(rates):
        job = Job([1, 2, 3], None, 100, eog=lambda t: False, draft=True)
        job.drafts = DraftStats(rate=rate)
        slots.append(Slot(i, job=job))
    return sched, slots


def test_the_slots_draft_where_the_step_gains_and_a_reply_that_guesses_wrong_stops():
    """This CPU's SmolLM2 costs (one token 1, 4 rows 2.6, 15 rows 7.3: as measured in one step of 3
    slots): one reply's draft beside two plain tokens costs a micro-batch of its own and does not pay;
    drafts of one length in all three do, at a good rate; a reply whose rate fell drafts nothing."""
    cpu = BatchCosts([1.0, 1.6, 2.28, 2.6, 3.1, 3.68, 4.1, 4.5, 4.92, 5.5, 6.0, 6.5, 6.9, 7.1, 7.32], learn=False)
    guess = [7] * 4
    sched, slots = _chooser(cpu, [0.8, 0.8, 0.8])
    assert sched._lengths(slots, [], {1: guess}, 100) == {}  # noqa: SLF001
    # at 0.8 two rows each pay best: 3 x 2.44 expected tokens for 9 rows (4.92) against 3 for 2.28
    assert sched._lengths(slots, [], {0: guess, 1: guess, 2: guess}, 100) == {0: 2, 1: 2, 2: 2}  # noqa: SLF001
    assert sched._lengths(slots, [], {0: guess, 1: guess, 2: guess}, 3) == {0: 1, 1: 1, 2: 1}  # noqa: SLF001 (room)
    assert sched._lengths(slots, [], {0: guess, 1: guess, 2: guess}, 2) == {}  # noqa: SLF001 (two would split)
    sched, slots = _chooser(cpu, [0.95, 0.95, 0.1])
    assert sched._lengths(slots, [], {0: guess, 1: guess, 2: guess}, 100) == {0: 4, 1: 4}  # noqa: SLF001
    sched, slots = _chooser(FLAT, [0.8])  # alone, on a GPU's flat costs: the whole guess, as the token loop
    assert sched._lengths(slots, [], {0: [7] * 8}, 100) == {0: 8}  # noqa: SLF001
