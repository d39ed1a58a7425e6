"""How many n-gram guesses hold, and at which draft lengths: the half of drafting's speed that a CPU can measure.

    python -m tests.bench.ngram_acceptance [--model smollm2|PATH] [--tokens 256] [--k-max 8]
                                           [--write resources/drafting/ngram_acceptance.json]

Generates the greedy reply (temperature 0, speculative decoding off) to each of the speculative
bench's requests (copy-heavy: rewrite a function renaming one variable; nothing to copy: a short
story), then replays the engine's own lookup (app/engine/drafting.lookup) over prompt and reply at
each fixed draft length 1..k-max: at every step the guess is checked against the reply's next tokens,
the run that holds is kept with the model's own next token, and nothing found is a plain step. At
temperature 0 a verify batch keeps exactly the model's own tokens, so this is what drafting at that
length accepts (a batch's rounding can flip a near-tie: then the drafted reply is another text).
Whether it pays depends on the GPU's batch costs: app/machine/drafting_gain.py combines the two, and
the GPU check prints the result (`tests.bench.batch_costs`). Where a reply falls into a loop (SmolLM2's
story repeats "2023," to its end) the reply before the loop is replayed too, as its own row: a loop
inflates acceptance. `--write` keeps the result (about 4 KB).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.drafting import lookup
from app.machine.drafting_gain import FixedLength, VerifyCosts
from app.machine.llama_load import LoadSettings, default_threads
from tests.bench.speculative import REQUESTS, model_path
from tests.helpers.engines import loaded_engine


def replay(tokens: list[int], n_prompt: int, k: int) -> FixedLength:
    """The lookup drafting at most k tokens over `tokens` (prompt, then the greedy reply), from the
    reply's first token on: the guesses that hold are kept with the model's next token."""
    ids = np.asarray(tokens, dtype=np.int64)
    n = n_prompt + 1  # the first reply token is sampled from the prompt's logits: nothing to verify yet
    plain = drafted = accepted = 0
    verifies: dict[int, int] = {}
    while n < len(ids):
        guess = lookup(ids[:n], k)[: len(ids) - n - 1]  # room for the model's own token after it
        if not guess:
            plain += 1
            n += 1
            continue
        held = 0
        while held < len(guess) and ids[n + held] == guess[held]:
            held += 1
        verifies[len(guess)] = verifies.get(len(guess), 0) + 1
        drafted += len(guess)
        accepted += held
        n += held + 1
    return FixedLength(k, len(ids) - n_prompt - 1, plain, verifies, drafted, accepted)


def loop_start(reply: list[int], period_max: int = 8, span: int = 24) -> int | None:
    """Where a reply falls into a loop (a small model at temperature 0 may repeat a few tokens to its
    end: SmolLM2's story does), as an index into `reply`; None where it does not."""
    for i in range(len(reply) - span + 1):
        window = reply[i:i + span]
        if any(all(window[j] == window[j + p] for j in range(span - p)) for p in range(1, period_max + 1)):
            return i
    return None


def measure(path: Path, tokens: int, k_max: int, threads: int) -> dict[str, dict[int, FixedLength]]:
    settings = LoadSettings(n_ctx=4096, n_threads=threads, n_threads_batch=threads, n_outputs_max=1,
                            speculative="off")
    sampling = SamplingParams(temperature=0.0, max_tokens=tokens)
    runs: dict[str, dict[int, FixedLength]] = {}
    with loaded_engine(path, settings) as engine:
        for name, text in REQUESTS.items():
            request = ChatRequest([{"role": "user", "content": text}], enable_thinking=False, sampling=sampling)
            reply = engine.generate(request)
            assert engine.slots is not None
            seq = list(engine.slots.slots[0].tokens)
            n_prompt = reply.stats.prompt_tokens
            runs[name] = {k: replay(seq, n_prompt, k) for k in range(1, k_max + 1)}
            loop = loop_start(seq[n_prompt:])
            print(f"{name}: prompt {n_prompt} tokens, reply {len(seq) - n_prompt} tokens"
                  + ("" if loop is None else f", looping from reply token {loop}"), flush=True)
            if loop is not None and loop > 8:  # the same reply without the loop: what prose offers
                cut = seq[:n_prompt + loop]
                runs[f"{name}, before its loop"] = {k: replay(cut, n_prompt, k) for k in range(1, k_max + 1)}
    return runs


def to_dict(runs: dict[str, dict[int, FixedLength]], made: str, meta: dict) -> dict:
    return {"made": made, "meta": meta,
            "runs": {name: {str(k): {"tokens": r.tokens, "plain_steps": r.plain_steps, "drafted": r.drafted,
                                     "accepted": r.accepted,
                                     "verifies": {str(d): c for d, c in sorted(r.verifies.items())}}
                            for k, r in by_k.items()} for name, by_k in runs.items()}}


def table(runs: dict[str, dict[int, FixedLength]]) -> list[str]:
    """Acceptance by draft length, and the speed-up it would give at two illustrative cost curves
    (expected, not measured: a CPU-like 2 tokens = 1.8x one, a GPU-like 9 tokens = 1.2x one)."""
    cpu = VerifyCosts({1: 1.0, 2: 1.8, 4: 3.4, 8: 6.6})
    gpu = VerifyCosts({1: 1.0, 2: 1.03, 4: 1.08, 8: 1.2})
    out = ["prompt                            k  verifies  drafted  accepted  rate   mean run  plain steps   "
           "expected: at 2=1.8x  at 9=1.2x"]
    for name, by_k in runs.items():
        for k, r in sorted(by_k.items()):
            verifies = sum(r.verifies.values())
            out.append(f"{name:<32} {k:>2} {verifies:>9} {r.drafted:>8} {r.accepted:>9} {r.rate:>5.0%} "
                       f"{r.accepted / verifies if verifies else 0:>9.2f} {r.plain_steps:>12} "
                       f"{r.speedup(cpu):>17.2f}x {r.speedup(gpu):>10.2f}x")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--threads", type=int, default=default_threads().generation)
    ap.add_argument("--write", help="keep the result here as JSON (resources/drafting/ngram_acceptance.json)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ngram-acceptance-") as tmp:
        path = model_path(args.model, Path(tmp))
        runs = measure(path, args.tokens, args.k_max, args.threads)
    print("\n".join(table(runs)))
    if args.write:
        made = (f"tests.bench.ngram_acceptance on {path.name}, {args.tokens} greedy tokens a prompt, "
                f"{date.today().isoformat()}")
        meta = {"model": path.name, "tokens": args.tokens, "k_max": args.k_max, "temperature": 0.0}
        Path(args.write).parent.mkdir(parents=True, exist_ok=True)
        Path(args.write).write_text(json.dumps(to_dict(runs, made, meta), indent=1) + "\n")
        print(f"written: {args.write} ({Path(args.write).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

