"""Engine tokens/s against llama.cpp's own llama-bench and a raw llama-cpp-python loop, one run.

    python -m tests.bench.engine_speed [--model PATH|big-vocab] [--tokens 128] [--rounds 5] [--threads N]

- llama-bench (built from the same vendored llama.cpp and flags as the wheel by
  `python3 packaging/bootstrap.py llama-bench`, cached like the wheel): tg128 with the same threads,
  at the same depth (`-d`: the KV cache filled with as many tokens as the engine's prompt has, so
  both generate at the same positions; tg128 from an empty cache is ~5 % faster here on SmolLM2,
  attention over fewer positions); the speed anchor, llama.cpp's decode with no Python around it;
- the raw loop: the same `Llama`, prompt and greedy sampling through llama-cpp-python's generator;
- decode only: `llama_decode` in a ctypes loop on the same context after the same prompt, with no
  sampling: it splits the gap to llama-bench into what this process and context cost and what
  everything around the decode costs;
- the engine: a chat request through app.engine.local (template, reasoning split, UTF-8 streaming,
  callbacks, stop checks).
The raw loop and decode only run on the engine's scheduler thread (`Scheduler.call`), the one thread
that decodes in this process, as the engine does (app/machine/llama_backend.on_a_thread_of_its_own:
a second thread that decodes slows every decode of the process). Each round runs all three, in
turn (llama-bench as a child process with one repetition after its warm-up; the engine and the raw
loop in this process, on one loaded model), so that the three share the machine's noise. Speeds are
medians, wall clock from the first to the last generated token.
Printed: each ratio against its target (engine / llama-bench >= 0.95, engine / raw >= 0.97), as the
ratio of the medians and as the median of the rounds' ratios (the sides of one round run within
seconds of each other, so a busy minute moves both), and the time per token the Python side adds
(at 500 tok/s, the H200 figure, 1 ms a token would halve the speed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings, default_threads
from tests.bench.docs_table import add_docs_flag, write_verdicts
from tests.bench.stock_server import llama_tool
from tests.bench.verdict import Verdicts

PROMPT = [{"role": "user", "content": "Write a long, detailed story about a lighthouse keeper and a storm."}]


def raw_loop(llm, tokens: list[int], n: int) -> tuple[int, float]:
    llama_cpp = llama()

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    llm.reset()
    count, first, last = 0, None, None
    for token in llm.generate(tokens, top_k=40, top_p=0.9, min_p=0.05, temp=0.0, repeat_penalty=1.0):
        now = time.perf_counter()
        first = first or now
        last = now
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            break
        count += 1
        llm.detokenize([token])
        if count >= n:
            break
    return count, (last - first) if first and last else 0.0


def decode_only(llm, tokens: list[int], n: int) -> float:
    """tok/s of `llama_decode` alone on the engine's own context, after the same prompt, through
    ctypes with nothing else per token (no sampling: the next token is fixed): what llama.cpp does in
    this process with these context settings. Engine / this is the cost of everything around decode;
    this / llama-bench is the cost of the process and the context."""
    lc = llama()
    llm.reset()
    llm.eval(tokens)
    one = (lc.llama_token * 1)(tokens[-1])
    started = time.perf_counter()
    for _ in range(n):
        lc.llama_decode(llm.ctx, lc.llama_batch_get_one(one, 1))
    elapsed = time.perf_counter() - started
    llm.reset()
    return n / elapsed


def llama_bench(model: str, threads: int, tokens: int, reps: int, depth: int = 0) -> float | None:
    """llama-bench's tg tokens/s (mean of its repetitions), or None if it cannot be built here."""
    exe = llama_tool("llama-bench")
    if exe is None:
        return None
    # its shared libraries (libllama, ggml and the CPU variants) sit beside it
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(
        x for x in (str(Path(exe).parent), os.environ.get("LD_LIBRARY_PATH", "")) if x))
    out = subprocess.run([exe, "-m", model, "-t", str(threads), "-p", "0", "-n", str(tokens), "-d", str(depth),
                          "-r", str(reps),
                          "-o", "json"], capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0:
        print(f"  llama-bench failed: {out.stderr.strip()[-300:]}")
        return None
    runs = json.loads(out.stdout)
    return float(runs[0]["avg_ts"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a GGUF (default: SmolLM2-135M from the test cache), or 'big-vocab': a "
                        "tiny llama with Clover's 248,320-token vocabulary, which runs at GPU-like tokens/s here")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="default: the physical cores (the engine's default)")
    parser.add_argument("--gpu-layers", type=int, default=-1)
    add_docs_flag(parser)
    args = parser.parse_args()
    verdicts = Verdicts()
    if args.model is None:
        from tests.helpers.smollm2 import smollm2_path

        args.model = str(smollm2_path())
    elif args.model == "big-vocab":  # the per-token cost of sampling over a large vocabulary, at ~450 tok/s
        import atexit
        import shutil
        import tempfile

        import numpy as np

        from tests.helpers.gguf_models import ModelShape, write_llama

        folder = Path(tempfile.mkdtemp(prefix="engine-speed-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        args.model = str(write_llama(folder / "big-vocab.gguf", ModelShape(n_vocab=248_320, dtype=np.float16)))
    threads = args.threads or default_threads().generation
    engine = Engine()
    engine.load(args.model, LoadSettings(n_ctx=2048, n_outputs_max=1, n_gpu_layers=args.gpu_layers,
                                         n_threads=threads))
    request = ChatRequest(PROMPT, sampling=SamplingParams(temperature=0.0, max_tokens=args.tokens))
    tokens = engine.tokenize_prompt(engine.render_prompt(request))
    engine_tps, raw_tps, bench_tps, decode_tps = [], [], [], []
    engine.slots.call(lambda: raw_loop(engine.llm, tokens, 8))  # warm-up
    for r in range(args.rounds):
        order = ("engine", "raw", "decode", "bench") if r % 2 == 0 else ("bench", "decode", "raw", "engine")
        for side in order:
            if side == "decode":
                decode_tps.append(engine.slots.call(lambda: decode_only(engine.llm, tokens, args.tokens)))
                print(f"  round {r + 1} decode {args.tokens} tokens  {decode_tps[-1]:8.1f} tok/s", flush=True)
                continue
            if side == "bench":
                tg = llama_bench(args.model, threads, args.tokens, 1, depth=len(tokens))
                if tg is not None:
                    bench_tps.append(tg)
                    print(f"  round {r + 1} llama-bench tg{args.tokens} {tg:8.1f} tok/s", flush=True)
                continue
            if side == "raw":
                n, secs = engine.slots.call(lambda: raw_loop(engine.llm, tokens, args.tokens))
                raw_tps.append((n - 1) / secs)
            else:
                engine.llm.reset()
                reply = engine.generate(request, on_event=lambda k, t: None, should_stop=lambda: False)
                n = reply.stats.generated_tokens
                engine_tps.append(reply.stats.wall_tps)
            tps = (engine_tps if side == 'engine' else raw_tps)[-1]
            print(f"  round {r + 1} {side:<6} {n} tokens  {tps:8.1f} tok/s",
                  flush=True)
    name = engine.info.name if engine.info else "?"
    engine.unload()
    e, w = statistics.median(engine_tps), statistics.median(raw_tps)
    b = statistics.median(bench_tps) if bench_tps else None
    print(f"\nmodel: {name}; {threads} threads; medians of {args.rounds} rounds, wall clock first to last token")
    print(f"  engine        {e:8.1f} tok/s")
    print(f"  raw loop      {w:8.1f} tok/s")
    d = statistics.median(decode_tps)
    print(f"  decode only   {d:8.1f} tok/s  (llama_decode alone in a ctypes loop on the engine's context)")
    if b:
        print(f"  llama-bench   {b:8.1f} tok/s  (tg{args.tokens} at depth {len(tokens)}, the prompt's length: "
              "llama.cpp's decode with no Python around it)")
        pb = statistics.median(x / y for x, y in zip(engine_tps, bench_tps, strict=False))
        print(f"\n  engine/llama-bench  {e / b:6.3f}  (target >= 0.95)  "
              f"{verdicts.check('engine / llama-bench', e / b, e / b >= 0.95, '>= 0.95')}"
              f"   the median of the rounds' ratios: {pb:.3f}")
    pw = statistics.median(x / y for x, y in zip(engine_tps, raw_tps, strict=True))
    print(f"  engine/raw          {e / w:6.3f}  (target >= 0.97)  "
          f"{verdicts.check('engine / raw loop', e / w, e / w >= 0.97, '>= 0.97')}"
          f"   the median of the rounds' ratios: {pw:.3f}")
    pd = statistics.median(x / y for x, y in zip(engine_tps, decode_tps, strict=True))
    print(f"  engine/decode-only  {e / d:6.3f}  (everything around llama_decode: sampling, text, callbacks)"
          f"   the median of the rounds' ratios: {pd:.3f}")
    if b:
        print(f"  decode-only/llama-bench {d / b:6.3f}  (the same decode in this process, with this context)")
        print(f"  per token, the Python side adds {1000 * (1 / e - 1 / b):.3f} ms over llama-bench "
              f"(the raw loop {1000 * (1 / w - 1 / b):.3f} ms); at 500 tok/s a token has 2 ms")
    code = verdicts.finish()
    write_verdicts("engine_speed", verdicts, args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
