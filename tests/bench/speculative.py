"""Speculative decoding against plain decoding, side by side: tokens/s, acceptance, and the ceiling.

    python -m tests.bench.speculative [--model smollm2|qwen35moe|PATH] [--rounds 5] [--tokens 256] [--threads N]
                                      [--no-stock]

The same file with n-gram drafting on and off, in turn within each round, each side loaded for its
reply and unloaded after it: one engine at a time, because two loaded engines slow each other (each
scheduler thread keeps an OpenMP pool, and with more pool threads than cores libgomp's workers sleep
at every barrier: app/machine/llama_backend.on_a_thread_of_its_own), and drafting, with fewer decodes
a token, hid that. Two requests:
- copy-heavy: rewrite a 30-line function renaming one variable (most of the answer repeats the prompt);
- nothing to copy: a short story (the drafter finds few repeated n-grams, and pays only when it does).
Printed per request: tok/s of each side (median), the median of the rounds' paired ratios (target:
>= 1.3x copy-heavy, >= 0.97x nothing to copy), whether the text is the same, the acceptance rate, the
mean accepted run per verify, the batch costs the engine measured at load, and the ceiling they allow
for that acceptance (the best expected tokens per unit of cost over draft lengths), with how close the
engine came to it; then the ceiling of a drafter that knew which guesses hold, replayed on the plain
reply at the costs the loop measured (`oracle_ceiling`), and those costs. Where the drafted reply parts
from the plain one (a verify batch's numerics move a near-tie; on SmolLM2 on a CPU within the first
few dozen tokens), the two sides' speeds are of different texts: the drafted reply's own ceiling is
printed too. Then stock llama.cpp on the same request (`stock_rounds`, unless `--no-stock`):
llama-server plain and with its n-gram types (`--spec-type`), its own clock, paired the same way:
what the engine's n-grams are weighed against on this machine. Each paired ratio says PASS or MISS
against its target; they are repeated last, and the command exits 3 when any missed
(tests/bench/verdict.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.drafting import BatchCosts, best_length, expected_tokens, lookup
from app.machine.llama_load import LoadSettings, default_threads
from app.machine.tune import SPEC_SNIPPET
from tests.bench.docs_table import add_docs_flag, write_verdicts
from tests.bench.stock_server import llama_server, llama_tool, timed_reply
from tests.bench.verdict import Verdicts
from tests.helpers.engines import loaded_engine

FUNCTION = SPEC_SNIPPET  # the function tune rewrites too
REQUESTS = {
    "copy-heavy": f"Rewrite this function with the variable `settings` renamed to `options`. Output only the "
                  "code.\n\n"
                  f"```python\n{FUNCTION}\n```",
    "nothing to copy": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
}
TARGETS = {"copy-heavy": 1.3, "nothing to copy": 0.97}  # n-grams / plain, the median of the paired rounds
# stock llama.cpp's n-gram drafting (llama-server --spec-type), beside its plain decoding: its defaults
# (made for GPUs: drafts of up to 48-64 tokens) and a short-draft setting closer to what pays on a CPU
STOCK = {"ngram-simple": ["--spec-type", "ngram-simple"],
         "ngram-simple n4 m8": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4",
                                "--spec-ngram-simple-size-m", "8"],
         "ngram-mod": ["--spec-type", "ngram-mod"]}


def stock_rounds(exe: str, path: Path, text: str, tokens: int, rounds: int, threads: int, kv: str) -> None:
    """Stock llama.cpp on the same request: llama-server plain and with each of STOCK's n-gram types,
    one server up at a time, the sides alternated within each round; its own clock (decode tok/s)
    gives each side's speed, and the median of the rounds' paired ratios is printed with its
    acceptance. What the engine's n-grams are weighed against on this machine."""
    sides: dict[str, list[str]] = {"plain": [], **STOCK}
    speeds: dict[str, list[float]] = {name: [] for name in sides}
    drafts: dict[str, list[int]] = {name: [0, 0] for name in sides}
    for r in range(rounds):
        for name in (list(sides) if r % 2 == 0 else list(reversed(sides))):
            with llama_server(exe, str(path), "-c", 4096, "-np", 1, "-t", threads, "-tb", threads,
                              "-ctk", kv, "-ctv", kv, *sides[name]) as url:
                timed_reply(url, text, 8)  # warm-up: the graph, the prompt's cache
                timings = timed_reply(url, text, tokens)["timings"]
            speeds[name].append(float(timings.get("predicted_per_second", 0.0)))
            drafts[name][0] += int(timings.get("draft_n", 0))
            drafts[name][1] += int(timings.get("draft_n_accepted", 0))
    plain = speeds["plain"]
    print(f"  stock llama.cpp (llama-server, its own clock): plain {statistics.median(plain):.1f} tok/s")
    for name in STOCK:
        ratio = statistics.median(b / a for a, b in zip(plain, speeds[name], strict=True) if a > 0)
        drafted, kept = drafts[name]
        print(f"    {name}: {statistics.median(speeds[name]):.1f} tok/s, {ratio:.2f}x plain (median of {rounds} "
              f"paired rounds); drafted {drafted}, accepted {kept} ({kept / drafted if drafted else 0:.0%})")


def model_path(name: str, folder: Path) -> Path:
    if name == "smollm2":
        from tests.helpers.smollm2 import smollm2_path

        return smollm2_path()
    if name == "qwen35moe":
        from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

        return write_qwen35moe(folder / "qwen35moe.gguf", qwen35_shape())
    return Path(name)


def near_tie(path: Path, settings: LoadSettings, request: ChatRequest, drafted: str) -> str:
    """Where the drafted reply leaves the plain one, and how far apart the plain run's two candidates
    were there (its logprobs, not timed): a verify batch's rounding flips only near-ties."""
    with loaded_engine(path, settings) as engine:
        plain = engine.generate(replace(request, logprobs=3))
    pos = 0
    for i, entry in enumerate(plain.logprobs or []):
        piece = bytes(entry["bytes"]).decode("utf-8", "replace")
        if drafted[pos:pos + len(piece)] != piece:
            gaps = [entry["logprob"] - alt["logprob"] for alt in entry["top_logprobs"]
                    if alt["token"] != entry["token"] and drafted[pos:].startswith(alt["token"])]
            return (f"no, from token {i}, where plain decoding's two best were {gaps[0]:.3f} apart (rounding)"
                    if gaps else f"NO, from token {i}, to a token outside plain decoding's top 3")
        pos += len(piece)
    return "NO (the texts differ after the plain reply's tokens)"


def oracle_ceiling(tokens: list[int], n_prompt: int, costs: BatchCosts, k_max: int) -> float:
    """The speed-up over plain decoding of a drafter that knew which of the lookup's guesses hold, on this
    reply (`tokens`: prompt and reply) at these costs: at each step it drafts exactly the guess's
    tokens that plain decoding then writes (nothing where none holds, a plain step). No draft-length
    policy with this lookup does better; the i.i.d. ceiling above assumes every guess is as good as the
    average one, which copying is not (a guess inside a copied passage is far better than one outside)."""
    ids = np.asarray(tokens, dtype=np.int64)
    n, cost = n_prompt + 1, 0.0
    while n < len(ids):
        guess = lookup(ids[:n], k_max)
        held = 0
        while held < len(guess) and n + held < len(ids) and ids[n + held] == guess[held]:
            held += 1
        cost += min(costs.cost(held + 1), held + 1.0) if held else 1.0
        n += held + 1
    return (len(ids) - n_prompt - 1) / cost if cost else 1.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=default_threads().generation)
    ap.add_argument("--no-stock", action="store_true", help="skip stock llama.cpp's n-gram drafting (llama-server)")
    ap.add_argument("--kv", default="f16", help="the KV cache's type, both sides (q8_0: on a CPU a verify batch's "
                    "attention is then computed as one token's is, so the drafted reply is the plain one)")
    add_docs_flag(ap)
    args = ap.parse_args(argv)
    stock = None if args.no_stock else llama_tool("llama-server")
    verdicts = Verdicts()
    with tempfile.TemporaryDirectory(prefix="spec-bench-") as tmp:
        path = model_path(args.model, Path(tmp))
        base = LoadSettings(n_ctx=4096, n_threads=args.threads, n_threads_batch=args.threads, n_outputs_max=1,
                            type_k=args.kv, type_v=args.kv)
        sampling = SamplingParams(temperature=0.0, max_tokens=args.tokens)
        settings = {spec: replace(base, speculative=spec) for spec in ("off", "ngram")}
        costs: BatchCosts | None = None
        draft_limit = 0
        for name, text in REQUESTS.items():
            request = ChatRequest([{"role": "user", "content": text}], enable_thinking=False, sampling=sampling)
            speeds: dict[str, list[float]] = {"off": [], "ngram": []}
            texts: dict[str, str] = {}
            plain_tokens: list[int] = []
            drafted_tokens: list[int] = []  # the drafted reply's (it may part from the plain one at a near-tie)
            n_prompt = 0
            drafted = accepted = verifies = 0
            for r in range(args.rounds):
                order = ("off", "ngram") if r % 2 == 0 else ("ngram", "off")
                for side in order:
                    with loaded_engine(path, settings[side]) as engine:  # one engine loaded at a time
                        reply = engine.generate(request)  # from a cold cache: the same prompt work on both sides
                        loop = engine.slots
                        assert loop is not None
                        speeds[side].append(reply.stats.wall_tps)
                        texts[side] = reply.raw
                        if side == "off":
                            plain_tokens = list(loop.slots[0].tokens)
                            n_prompt = reply.stats.prompt_tokens
                        else:
                            drafted_tokens = list(loop.slots[0].tokens)
                            if costs is None:  # the first drafting load: what it measured
                                print(f"{path.name}, {args.threads} threads, draft at most {loop.draft_max} tokens")
                                print("batch costs measured at load (n tokens, relative to 1): "
                                      + ", ".join(f"{n + 1}: {c:.2f}" for n, c in enumerate(loop.costs.relative)))
                            costs, draft_limit = loop.costs, loop.draft_max  # the latest load's, and its loop's
                            drafted += reply.stats.drafted
                            accepted += reply.stats.accepted
                            verifies += loop.slots[0].drafter.stats.verifies if loop.slots[0].drafter else 0
            assert costs is not None
            ratios = [b / a for a, b in zip(speeds["off"], speeds["ngram"], strict=True) if a > 0]
            med_off, med_on = statistics.median(speeds["off"]), statistics.median(speeds["ngram"])
            rate = accepted / drafted if drafted else 0.0
            k = best_length(rate, costs, draft_limit) if drafted else 0
            ceiling = expected_tokens(rate, k) / costs.cost(k + 1) if k else 1.0
            paired = statistics.median(ratios) if ratios else float("nan")
            same = "yes" if texts["off"] == texts["ngram"] else near_tie(path, settings["off"], request, texts["ngram"])
            target = TARGETS[name]
            verdict = verdicts.check(f"{name}: n-grams / plain", paired, paired >= target, f">= {target}", "{:.2f}")
            print(f"\n{name}: plain {med_off:.1f} tok/s, n-grams {med_on:.1f} tok/s: {med_on / med_off:.2f}x "
                  f"(median of {len(ratios)} paired rounds: {paired:.2f}x; target >= {target}) {verdict}; "
                  f"same text: {same}")
            print(f"  drafted {drafted} tokens in {verifies} verifies, accepted {accepted} ({rate:.0%}), "
                  f"mean accepted run {accepted / verifies if verifies else 0:.2f}")
            print(f"  ceiling for {rate:.0%} acceptance with these costs: {ceiling:.2f}x (draft length {k}); "
                  f"the engine reached {paired / ceiling:.0%} of it" if ceiling > 1 else
                  "  at this acceptance no draft length beats plain decoding: the ceiling is 1.00x")
            oracle = oracle_ceiling(plain_tokens, n_prompt, costs, draft_limit)
            print(f"  a drafter that knew which guesses hold, on the plain reply at the costs measured in the "
                  f"loop: {oracle:.2f}x; the engine reached {paired / oracle:.0%} of it")
            if texts["off"] != texts["ngram"]:  # what the reply drafting wrote offered: another text, another ceiling
                offered = oracle_ceiling(drafted_tokens, n_prompt, costs, draft_limit)
                print(f"  the drafted reply is another text (above): its own ceiling {offered:.2f}x, the engine "
                      f"reached {paired / offered:.0%} of it; the two sides' speeds are of different replies")
            if stock:
                stock_rounds(stock, path, text, args.tokens, args.rounds, args.threads, args.kv)
        if costs is not None:
            print("\nbatch costs measured in the last loop (n tokens, relative to a plain step): "
                  + ", ".join(f"{n}: {c:.2f}" for n, c in sorted(costs.measured.items())))
    code = verdicts.finish()
    write_verdicts("speculative", verdicts, args)
    return code


if __name__ == "__main__":
    sys.exit(main())
