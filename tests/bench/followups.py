"""Follow-ups on Clover's architecture: prompt tokens evaluated and time to first token, turn by turn.

    python -m tests.bench.followups [--model qwen35moe|smollm2|PATH] [--tokens 16000] [--turns 20]
                                    [--answer 48] [--ctx N] [--threads N]

A conversation grows over `--turns` turns to about `--tokens` prompt tokens, with thinking on (the
Qwen3.5/3.6 template drops an earlier turn's reasoning from the history, so each follow-up's prompt
differs from the cache inside the previous reply). It runs twice, turn by turn in turn: with the
engine's context checkpoints and without them (`ctx_checkpoints=0`, the engine before them: a
hybrid model evaluates every prompt from token 0). Then one regenerate of the last turn.

Printed per turn: prompt tokens, tokens new since the previous prompt, the previous answer's tokens,
tokens evaluated and the time to first token, for both sides. Then the checks of the issue: every
follow-up evaluates at most its new tokens plus the previous answer, plus at most one prefill chunk
(n_batch: reuse stops at a chunk boundary, so that a reply does not depend on what the cache held); a
regenerate at most one chunk; the last turn's time to first token at most 1.5x the second's; and the
checkpoint memory used. Each check says PASS or MISS; they are repeated last, and the command exits 3
when any missed (tests/bench/verdict.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.engine.slots import shared_prefix
from app.machine.llama_load import LoadSettings, default_threads
from tests.bench.verdict import Verdicts

WORDS = ("the keeper climbed the lighthouse stairs while the storm broke over the rocks and the lamp turned "
         "slowly above the dark water ships passed far out at sea").split()


def model_path(name: str, folder: Path) -> tuple[Path, int]:
    """The model and the largest context it takes."""
    if name == "qwen35moe":
        from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

        return write_qwen35moe(folder / "qwen35moe.gguf", qwen35_shape(n_ctx_train=32_768)), 32_768
    if name == "smollm2":
        from tests.helpers.smollm2 import smollm2_path

        return smollm2_path(), 8192
    return Path(name), 0


def floor_seconds(engine: Engine, prompt: list[int], n_new: int) -> float:
    """The time llama.cpp takes to evaluate the prompt's last n_new tokens after the rest (best of 3)."""
    from app.machine.llama_backend import llama

    lc, llm = llama(), engine.llm
    assert engine.slots is not None
    engine.slots.forget()  # the slots' sequences out of the way: llama-cpp-python's eval uses sequence 0
    best = float("inf")
    for _ in range(3):
        llm.reset()
        lc.llama_memory_clear(lc.llama_get_memory(llm.ctx), True)
        llm.eval(prompt[:len(prompt) - n_new])
        lc.llama_synchronize(llm.ctx)
        started = time.perf_counter()
        llm.eval(prompt[len(prompt) - n_new:])
        lc.llama_synchronize(llm.ctx)
        best = min(best, time.perf_counter() - started)
    llm.reset()
    lc.llama_memory_clear(lc.llama_get_memory(llm.ctx), True)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen35moe")
    ap.add_argument("--tokens", type=int, default=16_000, help="the conversation's size at the last turn")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--answer", type=int, default=48, help="tokens generated per turn")
    ap.add_argument("--ctx", type=int, default=0, help="context (default: the prompt's size plus room)")
    ap.add_argument("--threads", type=int, default=default_threads().generation)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="followups-") as tmp:
        path, max_ctx = model_path(args.model, Path(tmp))
        n_ctx = args.ctx or min(args.tokens + 2048, max_ctx or args.tokens + 2048)
        tokens = min(args.tokens, n_ctx - 2 * args.answer - 512)
        base = LoadSettings(n_ctx=n_ctx, n_threads=args.threads, n_threads_batch=args.threads, n_outputs_max=1)
        sides = {"checkpoints": Engine(), "none": Engine()}
        sides["checkpoints"].load(path, base)
        sides["none"].load(path, replace(base, ctx_checkpoints=0))
        engine = sides["checkpoints"]
        assert engine.slots is not None
        if engine.slots.slots[0].checkpoints is None:
            print(f"{path.name}: its cache can be cut back (no recurrent state): no checkpoints are needed; "
                  "the numbers show llama-cpp-python's own prefix reuse")
        per_turn = max(tokens // args.turns, 32)
        sample = " ".join(WORDS)
        per_word = len(engine.tokenize_prompt(sample)) / len(WORDS)  # the model's own tokenizer decides
        words = max(int(per_turn / per_word) - 8, 8)
        rng = random.Random(7)
        sampling = SamplingParams(temperature=0.0, max_tokens=args.answer)
        messages: dict[str, list[dict]] = {k: [] for k in sides}
        prev_prompt: list[int] = []
        prev_answer = 0
        rows = []
        prompts: list[list[int]] = []
        print(f"{path.name}: {args.turns} turns to about {tokens:,} prompt tokens, thinking on, {args.answer} "
              f"tokens per answer, context {n_ctx:,}, {args.threads} threads")
        print(f"{'turn':>4} {'prompt':>7} {'new':>6} {'prev ans':>8} | {'evaluated':>9} {'TTFT ms':>8} | "
              f"{'no ckpt eval':>12} {'TTFT ms':>8}")
        for turn in range(1, args.turns + 1):
            if len(prev_prompt) + 2 * per_turn + 2 * args.answer > n_ctx:
                print("  (the context is full: stopping here)")
                break
            text = " ".join(rng.choice(WORDS) for _ in range(words))
            out = {}
            for name, eng in sides.items():
                messages[name].append({"role": "user", "content": f"Turn {turn}. {text}"})
                reply = eng.generate(ChatRequest(list(messages[name]), enable_thinking=True, sampling=sampling))
                messages[name].append({"role": "assistant", "content": reply.text})
                out[name] = reply
            prompt = engine.tokenize_prompt(out["checkpoints"].prompt)
            prompts.append(prompt)
            new = len(prompt) - shared_prefix(prompt, prev_prompt)
            c, n = out["checkpoints"].stats, out["none"].stats
            rows.append((turn, len(prompt), new, prev_answer, c.prompt_evaluated, c.ttft_seconds, n.prompt_evaluated,
                         n.ttft_seconds))
            print(f"{turn:>4} {len(prompt):>7,} {new:>6,} {prev_answer:>8} | {c.prompt_evaluated:>9,} "
                  f"{c.ttft_seconds * 1000:>8.0f} | {n.prompt_evaluated:>12,} {n.ttft_seconds * 1000:>8.0f}")
            prev_prompt, prev_answer = prompt, c.generated_tokens + 1  # the end-of-generation token too
        request = ChatRequest(messages["checkpoints"][:-1], enable_thinking=True, sampling=sampling)
        regen = engine.generate(request)
        checkpoints, chunk = engine.slots.slots[0].checkpoints, engine.slots.chunk
        # llama.cpp's own floor: the same new tokens evaluated after the same depth in a fresh cache
        floors = [floor_seconds(engine, p, n) for p, n in ((prompts[1], rows[1][4]), (prompts[-1], rows[-1][4]))] \
            if len(rows) > 1 else [0.0, 0.0]
        for eng in sides.values():
            eng.unload()

    over = [r for r in rows[1:] if r[4] > r[2] + r[3] + chunk]
    second, last = rows[1][5] if len(rows) > 1 else 0.0, rows[-1][5]
    ratio = last / second if second else float("nan")
    verdicts = Verdicts()
    print()
    print(f"follow-ups evaluating more than their new tokens plus the previous answer and a {chunk}-token chunk: "
          f"{len(over)} of "
          f"{len(rows) - 1}" + (f" (turns {', '.join(str(r[0]) for r in over)})" if over else "")
          + f" (target = 0)  "
          f"{verdicts.check('follow-ups over new + answer + chunk', len(over), not over, '= 0', '{:.0f}')}")
    regen_eval = regen.stats.prompt_evaluated
    print(f"regenerate of the last turn: {regen_eval} of {regen.stats.prompt_tokens:,} prompt tokens "
          f"evaluated (target <= {chunk}), time to first token {regen.stats.ttft_seconds * 1000:.0f} ms  "
          f"{verdicts.check('regenerate: tokens evaluated', regen_eval, regen_eval <= chunk, f'<= {chunk}', '{:.0f}')}")
    print(f"time to first token, last turn / second turn: {last * 1000:.0f} / {second * 1000:.0f} ms = "
          f"{ratio:.2f} (target <= 1.5); without checkpoints: "
          f"{rows[-1][7] * 1000:.0f} / {rows[1][7] * 1000 if len(rows) > 1 else 0:.0f} ms  "
          f"{verdicts.check('TTFT last turn / second', ratio, ratio <= 1.5, '<= 1.5', '{:.2f}')}")
    if floors[0] > 0:
        print(f"floor: llama.cpp alone (the same new tokens after the same depth, a fresh cache, no Python around): "
              f"{floors[1] * 1000:.0f} / {floors[0] * 1000:.0f} ms = {floors[1] / floors[0]:.2f}: attention over the "
              f"longer context; the engine's first tokens are {second / floors[0]:.2f}x and {last / floors[1]:.2f}x it")
    total_with = sum(r[4] for r in rows)
    total_without = sum(r[6] for r in rows)
    print(f"prompt tokens evaluated over the conversation: {total_with:,} with checkpoints, {total_without:,} "
          f"without ({total_without / max(total_with, 1):.1f}x)")
    if checkpoints is not None:
        size = checkpoints.items[0].n_bytes if checkpoints.items else 0
        print(f"checkpoint memory: {len(checkpoints.items)} of at most {checkpoints.limit} kept, "
              f"{size:,} bytes each, {checkpoints.n_bytes / 1024**2:.2f} MiB in all")
    return verdicts.finish()


if __name__ == "__main__":
    sys.exit(main())
