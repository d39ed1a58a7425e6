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
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per reply")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
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
