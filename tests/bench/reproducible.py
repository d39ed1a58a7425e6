"""Reproducible at temperature 0, cache or no cache: what a warm rerun reads, and what still changes a reply.

    python -m tests.bench.reproducible [--model smollm2|qwen35moe|PATH] [--prompts 12] [--tokens 64]
                                       [--threads 1]

Three parts on one file, greedy (temperature 0, seed 1), every read of a prompt cold unless said:
- rerun: the engine as loaded by default (n_batch 512), speculative decoding off; each prompt (half of
  them copy-heavy; about 150 to 1,500 tokens) read cold, then again warm (its cache holds the prompt
  and the reply): the prompt tokens the warm read still evaluates (reuse stops at the last chunk
  boundary before the prompt's last token: at most one chunk, where it was the last token alone), its
  time against the cold read's, and whether the replies are the same (target: all of them);
- drafting: n-gram drafting made to draft at every guess (flat batch costs, as on a GPU, fixed): each
  drafted reply against the plain one, and a warm drafted rerun against the drafted reply (a verify
  batch rounds a token otherwise than a one-token decode; with measured costs, which move with the
  machine's load, the draft lengths and so the batches change from run to run too);
- traffic: 4 parallel slots: each prompt alone, then again while 3 other requests are written beside it
  (rows summed beside other sequences' rows, and pieces split by them, round otherwise).

    python -m tests.bench.reproducible --speed [--model smollm2] [--rounds 2] [--tokens 96] [--threads 2]

`--speed`: what the setting "Reproducible replies" costs (issue 54, item 3). Two loads of 4 slots, as the
plan loads them on the CPU: today's default (one pool of cells, flash attention, speculative auto) and
reproducible (plan_memory.reproducible_layout); in each round 4 requests one at a time and the same 4 at
once on each, every measurement on a fresh load, in alternating order: aggregate output tok/s side by
side, 4 at once against one at a time (target >= 1.3x), reproducible against the default (ratios paired
within rounds), and how many replies written at once are the reply written alone.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from app.engine.contract import ChatRequest, Reply, SamplingParams
from app.engine.drafting import BatchCosts
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from tests.bench.followups import model_path
from tests.bench.verdict import Verdicts

WORDS = ("the keeper climbed the lighthouse stairs while the storm broke over the rocks and the lamp turned "
         "slowly above the dark water ships passed far out at sea").split()
CODE = "\n".join(f"def step_{i}(value, total):\n    total = total + value * {i}\n    return total" for i in range(12))


def prompts(n: int, rng: random.Random) -> list[list[dict]]:
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(100, 1100)))
        if i % 2 == 0:
            text = f"Copy this code exactly, then explain it:\n\n{CODE}\n\n{text}"
        out.append([{"role": "user", "content": text}])
    return out


def clear(engine: Engine) -> None:
    """Forget every cached token: the next read is cold."""
    assert engine.slots is not None
    engine.slots.forget()


def ask(engine: Engine, messages: list[dict], tokens: int) -> Reply:
    return engine.generate(ChatRequest(messages, enable_thinking=False,
                                       sampling=SamplingParams(temperature=0.0, seed=1, max_tokens=tokens)))


def at_once(engine: Engine, requests: list[list[dict]], tokens: int) -> list[Reply]:
    replies: list[Reply | None] = [None] * len(requests)

    def run(i: int) -> None:
        replies[i] = ask(engine, requests[i], tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is not None for r in replies)
    return [r for r in replies if r is not None]


SPEED_PROMPTS = ["Write a long story about a lighthouse keeper.", "Write a long story about a robot who learns to "
                 "paint.", "Write a long story about a river town in winter.", "Write a long story about two rival "
                 "bakers."]


def speed(path: Path, rounds: int, tokens: int, threads: int) -> int:
    """Aggregate tok/s of 4 requests one at a time and at once, today's default against reproducible:
    each measurement on a fresh load (two engines' decode threads in one process slow each other:
    benchmarks.md), the four in a round in alternating order, ratios paired within each round."""
    from app.model.plan_memory import reproducible_layout

    base = LoadSettings(n_ctx=2048, n_threads=threads, n_threads_batch=threads, n_outputs_max=1, parallel=4)
    loads = {"default": base, "reproducible": reproducible_layout(base)}
    requests = [[{"role": "user", "content": p}] for p in SPEED_PROMPTS]
    rates: dict[str, list[float]] = {f"{n} {m}": [] for n in loads for m in ("one at a time", "4 at once")}
    replies: dict[str, list[Reply]] = {}
    same = {name: 0 for name in loads}
    for r in range(rounds):
        order = [(n, m) for m in ("one at a time", "4 at once") for n in loads]
        for name, mode in order if r % 2 == 0 else order[::-1]:
            engine = Engine()
            info = engine.load(path, loads[name])
            t0 = time.perf_counter()
            got = [ask(engine, m, tokens) for m in requests] if mode == "one at a time" else \
                at_once(engine, requests, tokens)
            rate = sum(g.stats.generated_tokens for g in got) / (time.perf_counter() - t0)
            engine.unload()
            rates[f"{name} {mode}"].append(rate)
            replies[f"{name} {mode}"] = got
            print(f"round {r + 1} {name}, {mode}: {rate:.1f} tok/s (speculative decoding: {info.drafting})", flush=True)
        for name in loads:
            same[name] += sum(a.raw == b.raw for a, b in zip(replies[f"{name} one at a time"],
                                                               replies[f"{name} 4 at once"], strict=True))

    def paired(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True))

    verdicts = Verdicts()
    n = rounds * len(requests)
    print(f"\n{path.name}, {threads} thread(s), {tokens} tokens a reply, {rounds} rounds: median tok/s (all "
          "replies), ratios paired within rounds")
    print(f"{'':>14} | {'one at a time':>13} | {'4 at once':>9} | {'4 / one':>7} | {'= alone':>9}")
    for name in loads:
        one, four = (statistics.median(rates[f"{name} {m}"]) for m in ("one at a time", "4 at once"))
        gain = paired(f"{name} 4 at once", f"{name} one at a time")
        print(f"{name:>14} | {one:>13.1f} | {four:>9.1f} | {gain:>6.2f}x | {same[name]:>3} of {n}")
    ratio = paired("reproducible 4 at once", "default one at a time")
    print(f"reproducible 4 at once / the default one at a time: {ratio:.2f}x "
          f"{verdicts.check('reproducible 4 at once / one at a time', ratio, ratio >= 1.3, '>= 1.3', '{:.2f}x')}")
    print(f"reproducible / default: 4 at once {paired('reproducible 4 at once', 'default 4 at once'):.2f}x, one at a "
          f"time {paired('reproducible one at a time', 'default one at a time'):.2f}x")
    held = verdicts.check("reproducible replies = alone", same["reproducible"], same["reproducible"] == n, f"= {n}",
                          "{:.0f}")
    print(f"replies written at once that are the reply written alone: reproducible {same['reproducible']} of {n} "
          f"{held}, default {same['default']} of {n}")
    return verdicts.finish()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per reply")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--speed", action="store_true", help="what reproducible replies cost: tok/s of 4 at once")
    ap.add_argument("--rounds", type=int, default=2, help="--speed: rounds")
    args = ap.parse_args(argv)
    if args.speed:
        with tempfile.TemporaryDirectory(prefix="reproducible-") as tmp:
            return speed(model_path(args.model, Path(tmp))[0], args.rounds, args.tokens, args.threads)
    rng = random.Random(5)
    with tempfile.TemporaryDirectory(prefix="reproducible-") as tmp:
        path, _ = model_path(args.model, Path(tmp))
        base = LoadSettings(n_ctx=4096, n_threads=args.threads, n_threads_batch=args.threads, n_outputs_max=1,
                            speculative="off")
        plain, spec, slots = Engine(), Engine(), Engine()
        plain.load(path, base)
        spec.load(path, replace(base, speculative="ngram"))
        slots.load(path, replace(base, n_ctx=2048, parallel=4))
        assert plain.slots is not None and spec.slots is not None and slots.slots is not None
        spec.slots.costs = BatchCosts([1.0] * (spec.slots.draft_max + 1), learn=False)
        print(f"{path.name}: {args.prompts} prompts, {args.tokens} tokens per reply, prefill chunk "
              f"{plain.slots.chunk} (slots {slots.slots.chunk}), {args.threads} thread(s)")
        print(f"{'prompt':>6} | {'warm read':>9} {'ms':>6} {'cold ms':>7} {'same':>4} | {'drafted':>7} "
              f"{'= plain':>7} {'rerun =':>7} | {'beside 3':>8}")
        warm_read, warm_same, draft_same, draft_rerun, traffic_same = [], 0, 0, 0, 0
        sizes, drafted = [], 0
        batch = prompts(args.prompts, rng)
        for i, messages in enumerate(batch):
            clear(plain)
            cold = ask(plain, messages, args.tokens)
            warm = ask(plain, messages, args.tokens)
            clear(spec)
            d_cold = ask(spec, messages, args.tokens)
            d_warm = ask(spec, messages, args.tokens)
            clear(slots)
            alone = ask(slots, messages, args.tokens)
            clear(slots)
            others = [batch[(i + k) % len(batch)] for k in (1, 2, 3)]
            beside = at_once(slots, [messages, *others], args.tokens)[0]
            sizes.append(cold.stats.prompt_tokens)
            warm_read.append(warm.stats.prompt_evaluated)
            drafted += d_cold.stats.drafted
            same = warm.raw == cold.raw
            warm_same += same
            draft_same += d_cold.raw == cold.raw
            draft_rerun += d_warm.raw == d_cold.raw
            traffic_same += beside.raw == alone.raw
            print(f"{cold.stats.prompt_tokens:>6} | {warm.stats.prompt_evaluated:>9} "
                  f"{warm.stats.prompt_seconds * 1000:>6.0f} {cold.stats.prompt_seconds * 1000:>7.0f} "
                  f"{'yes' if same else 'NO':>4} | {d_cold.stats.drafted:>7} {str(d_cold.raw == cold.raw):>7} "
                  f"{str(d_warm.raw == d_cold.raw):>7} | {str(beside.raw == alone.raw):>8}")
        for engine in (plain, spec, slots):
            engine.unload()
    n = len(batch)
    verdicts = Verdicts()
    print()
    print(f"warm reruns: {warm_same} of {n} the cold reply (target: all) "
          f"{verdicts.check('warm reruns = cold replies', warm_same, warm_same == n, f'= {n}', '{:.0f}')}; they "
          f"read {min(warm_read)}-{max(warm_read)} prompt tokens (mean {sum(warm_read) / n:.0f}) of "
          f"{min(sizes)}-{max(sizes)}")
    print(f"drafting (every guess drafted, {drafted} draft tokens verified): {draft_same} of {n} replies the plain "
          f"one; a warm drafted rerun the drafted reply {draft_rerun} of {n}")
    print(f"traffic: {traffic_same} of {n} replies written beside 3 others are the reply written alone")
    return verdicts.finish()


if __name__ == "__main__":
    sys.exit(main())
