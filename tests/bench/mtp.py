"""Drafting with the MTP head: what a speculative step costs against a plain decode, and exactness.

    python -m tests.bench.mtp [--model PATH] [--tokens 64] [--long-tokens 256] [--rounds 3] [--prompts 12]
                              [--threads N]

Default model: the tiny Clover with an MTP block (qwen35moe, random weights, written to a temporary
folder). Its head's guesses are almost never the target's tokens, so acceptance says nothing here;
what this shows is the cost of each piece and that the tokens are plain decoding's:

- per token, plain decoding (speculative off) against the MTP engine under its own policy (the head
  follows every decode while drafting pays; when no length pays it stops following and guesses one
  token after 8, 16, 32, 64, then every 128 tokens, after a catch-up on the latest 8 positions), over
  `--long-tokens` replies: the overhead when nothing is accepted, per step (median) and over the
  whole reply (the user's wait; issue 25: at most 3 %);
- a speculative step forced at every token with k = 1, 2, 4, 8 draft tokens: k head steps, the verify
  batch of k + 1 and the head following the kept rows, per generated token (nothing accepted: one token
  a step), relative to a plain decode, with each piece's mean time;
- exactness: greedy replies (and a follow-up each) with speculative off and with the head drafting at
  every step: the same tokens.
Rounds alternate the sides; times are medians (of calls, of intervals, of rounds). The whole-reply
overhead says PASS or MISS against its target (<= 1.03x plain) and is repeated last; the command exits 3
when it missed (tests/bench/verdict.py). Exactness is a figure: where replies differ, the near-ties are
printed.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import app.engine.mtp as mtp_module
from app.engine.contract import ChatRequest
from app.engine.drafting import BatchCosts
from app.engine.local import Engine
from app.engine.mtp import MtpHead
from app.engine.sampler import chain_for
from app.engine.slots import Job, Scheduler
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings, default_threads
from tests.bench.verdict import Verdicts
from tests.helpers.decode import greedy_slot

WORDS = "the keeper climbed the stairs while the storm broke over the rocks and the lamp turned".split()


class Timers:
    """Wall time of each call of a few methods, while installed."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def installed(self, targets: list[tuple[Any, str]]) -> Iterator[None]:
        originals = [(owner, name, getattr(owner, name)) for owner, name in targets]
        for owner, name, fn in originals:
            setattr(owner, name, self._wrap(f"{owner.__name__}.{name}", fn))
        try:
            yield
        finally:
            for owner, name, fn in originals:
                setattr(owner, name, fn)

    def _wrap(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds.setdefault(key, []).append(time.perf_counter() - started)
        return timed

    def median_ms(self, key: str) -> float:
        return 1000 * statistics.median(self.seconds[key]) if self.seconds.get(key) else 0.0


@contextlib.contextmanager
def forced(slots: Scheduler, k: int | None) -> Iterator[None]:
    """The head drafts k tokens at every step and the step decodes them all (None: the engine's own policy)."""
    originals = (mtp_module.best_length, slots.costs)
    if k is not None:  # the head's choice, its "does drafting pay" at a reply's start, and the step's lengths
        mtp_module.best_length = lambda rate, costs, k_max: min(k, k_max)
        slots.costs = BatchCosts([1.0] * (slots.draft_max + 1), learn=False)
    try:
        yield
    finally:
        mtp_module.best_length, slots.costs = originals


def prompt_tokens(engine: Engine, text: str) -> list[int]:
    return engine.tokenize_prompt(engine.render_prompt(ChatRequest([{"role": "user", "content": text}],
                                                                   enable_thinking=False)))


def per_token_ms(engine: Engine, prompt: list[int], n: int, draft: bool) -> tuple[float, float, list[int]]:
    """Milliseconds per generated token after the first (the first is the prompt's), from a cold cache:
    the median of the intervals between tokens (robust to a busy machine's stalls; one step each while
    nothing is accepted), and the mean over the reply (what the user waits: the occasional guess and
    catch-up included)."""
    slots = engine.slots
    assert slots is not None and engine.llm is not None
    slots.forget()
    stamps: list[float] = []
    out: list[int] = []
    chain = chain_for(engine.llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0)
    stream = slots.stream(slots.submit(Job(list(prompt), chain, n, eog=lambda t: False, draft=draft)))
    try:
        for token in stream:
            stamps.append(time.perf_counter())
            out.append(token)
            if len(out) >= n:
                break
    finally:
        stream.close()
    intervals = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return 1000 * statistics.median(intervals), 1000 * (stamps[-1] - stamps[0]) / len(intervals), out


def logit_gap(engine: Engine, prompt: list[int], tokens: list[int], a: int, b: int) -> float:
    """How far apart plain decoding puts tokens a and b after `prompt + tokens` (one token at a time)."""
    llm = engine.llm
    assert llm is not None
    llm.reset()
    llm.eval(prompt)
    for t in tokens:
        llm.eval([t])
    logits = np.ctypeslib.as_array(llama().llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
    llm.reset()
    return float(abs(logits[a] - logits[b]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--long-tokens", type=int, default=256, help="the replies the policy is timed on")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--threads", type=int, default=default_threads().generation)
    args = ap.parse_args(argv)
    verdicts = Verdicts()
    with tempfile.TemporaryDirectory(prefix="mtp-bench-") as tmp:
        if args.model:
            path = Path(args.model)
        else:
            from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

            path = write_qwen35moe(Path(tmp) / "qwen35moe-mtp.gguf", qwen35_shape(n_ctx_train=32_768), mtp=True)
        base = LoadSettings(n_ctx=4096, n_threads=args.threads, n_threads_batch=args.threads, n_outputs_max=1)
        plain, spec = Engine(), Engine()
        plain.load(path, replace(base, speculative="off"))
        spec.load(path, replace(base, speculative="mtp"))
        loop = spec.slots
        assert loop is not None and loop.head is not None, "the file has no MTP head"
        print(f"{path.name}, {args.threads} threads, draft at most {loop.draft_max} tokens")
        print("costs at load (verify batch of n + its n-1 head steps, relative to one decode): "
              + ", ".join(f"{n + 1}: {c:.2f}" for n, c in enumerate(loop.costs.relative)))
        prompt = prompt_tokens(spec, "Tell me about the keeper and the lamp, " + " ".join(WORDS))

        timers = Timers()
        sides: dict[str, list[float]] = {"off": [], "loaded": [], "policy": [], **{f"k={k}": [] for k in (1, 2, 4, 8)}}
        keys = [(MtpHead, "draft"), (MtpHead, "follow"), (Scheduler, "_verify")]
        per_k: dict[str, dict[str, float]] = {}
        # the reply's mean ms a token: plain decoding, the MTP engine not drafting (what loading it costs every
        # decode: llama.cpp's rollback snapshots, n_rs_seq), and drafting under the engine's policy
        means: dict[str, list[float]] = {"off": [], "loaded": [], "policy": []}
        per_token_ms(spec, prompt, args.long_tokens, draft=True)  # the policy settles, as in a chat's later replies
        for r in range(args.rounds):  # the policy first, on its own: forced drafts would reset its guess schedule
            for side in (list(means) if r % 2 == 0 else list(reversed(means))):
                # untimed pieces: wrapping the calls would cost the policy side only
                ms, mean, _ = per_token_ms(plain if side == "off" else spec, prompt, args.long_tokens,
                                           draft=side == "policy")
                means[side].append(mean)
                sides[side].append(ms)
        for _ in range(args.rounds):
            for side in [s for s in sides if s not in means]:
                timers = Timers()
                with forced(loop, int(side[2:])), timers.installed(keys):
                    ms, _, _ = per_token_ms(spec, prompt, args.tokens, draft=True)
                per_k[side] = {key: timers.median_ms(key) for key in timers.seconds}
                drafter = loop.slots[0].drafter
                per_k[side]["accepted"] = drafter.stats.accepted if drafter is not None else 0
                sides[side].append(ms)
        timers = Timers()
        per_token_ms(spec, prompt, args.long_tokens, draft=True)  # settled again after the forced drafts
        with timers.installed(keys):  # the policy's pieces, once, apart
            per_token_ms(spec, prompt, args.long_tokens, draft=True)
        p = {key: timers.median_ms(key) for key in timers.seconds}
        off = statistics.median(sides["off"])
        print(f"\nplain decoding: {off:.3f} ms a token ({1000 / off:.0f} tok/s)")
        policy = statistics.median(sides["policy"])
        paired = statistics.median(b / a for a, b in zip(means["off"], means["policy"], strict=True))
        loaded = statistics.median(b / a for a, b in zip(means["off"], means["loaded"], strict=True))
        policy_only = statistics.median(b / a for a, b in zip(means["loaded"], means["policy"], strict=True))
        verdict = verdicts.check("MTP policy / plain, whole reply", paired, paired <= 1.03, "<= 1.03")
        print(f"MTP, the engine's policy, {args.long_tokens}-token replies: {policy:.3f} ms a token (median step), "
              f"{policy / off:.2f}x plain; over the whole reply {paired:.3f}x plain (median of {args.rounds} "
              f"paired rounds; target <= 1.03) {verdict}; one-token guesses after {mtp_module.PROBE_EVERY}, "
              f"{2 * mtp_module.PROBE_EVERY} ... up to every {mtp_module.PROBE_MAX} tokens, each with a catch-up "
              f"on the last {mtp_module.CATCH_UP} positions: {p.get('MtpHead.draft', 0):.3f} ms; "
              f"{len(timers.seconds.get('MtpHead.draft', []))} guesses in a reply)")
        print(f"  of which: the engine loaded with the head but not drafting {loaded:.3f}x plain (llama.cpp's "
              f"per-draft-token rollback snapshots of the recurrent state, n_rs_seq, paid at every decode), and "
              f"the policy {policy_only:.3f}x that")
        print("forced drafts at every step (nothing accepted: one token a step); median time of each piece:")
        for k in (1, 2, 4, 8):
            side = f"k={k}"
            t = statistics.median(sides[side])
            q = per_k[side]
            print(f"  k={k}: {t:.3f} ms a token = {t / off:.2f}x a plain decode; head draft of {k}: "
                  f"{q.get('MtpHead.draft', 0):.3f} ms ({q.get('MtpHead.draft', 0) / off:.2f}x), verify batch of "
                  f"{k + 1} with sampling: {q.get('Scheduler._verify', 0):.3f} ms "
                  f"({q.get('Scheduler._verify', 0) / off:.2f}x; the head following the step: "
                  f"{q.get('MtpHead.follow', 0):.3f} ms); accepted {int(q['accepted'])}")

        # exactness
        rng = random.Random("mtp-bench")
        same = replies = drafted = steps = 0
        gaps: list[float] = []
        for _ in range(args.prompts):
            messages = [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60)))}]
            for turn in range(2):
                tokens = spec.tokenize_prompt(spec.render_prompt(ChatRequest(messages, enable_thinking=False)))
                want, _ = greedy_slot(plain, tokens, args.tokens)
                before = loop.head.steps
                with forced(loop, rng.randint(1, loop.draft_max)):
                    got, job = greedy_slot(spec, tokens, args.tokens, draft=True)
                replies += 1
                same += got == want
                if got != want:
                    j = next((i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y), min(len(got),
                                                                                                       len(want)))
                    if j < min(len(got), len(want)):
                        gaps.append(logit_gap(plain, tokens, want[:j], want[j], got[j]))
                drafted += job.drafts.drafted
                steps += loop.head.steps - before
                if turn == 0:
                    text = spec.llm.detokenize(got, special=False).decode("utf-8", "replace")
                    messages = messages + [{"role": "assistant", "content": text},
                                           {"role": "user", "content": "Again, please."}]
        print(f"\nexactness: {same} of {replies} greedy replies ({args.prompts} prompts and a follow-up each, "
              f"{args.tokens} tokens) identical with the head drafting at every step ({steps} head steps, "
              f"{drafted} draft tokens verified)")
        if gaps:
            print("  the others differ where plain decoding's two best tokens are this close (a verify batch's "
                  "rounding flips such near-ties): " + ", ".join(f"{g:.4f}" for g in gaps))
        plain.unload()
        spec.unload()
    return verdicts.finish()


if __name__ == "__main__":
    sys.exit(main())
