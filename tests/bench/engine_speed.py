"""Engine tokens/s against a raw llama-cpp-python loop, same model, same prompt, one process.

    python -m tests.bench.engine_speed [--model PATH] [--tokens 128] [--rounds 5]

Both sides use the same loaded `Llama`, the same prompt tokens and greedy sampling, so they
generate the same tokens; each round runs both, in alternating order. Generation speed is
measured by the wall clock from the first to the last generated token (what a user sees), and
the engine's extra work (template, reasoning split, UTF-8 streaming, callbacks, stop checks) is
what the ratio shows. Target: engine / raw >= 0.97.
"""

from __future__ import annotations

import argparse
import statistics
import time

from app.engine import ChatRequest, Engine, SamplingParams
from app.llama_backend import llama
from app.llama_load import LoadSettings

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a GGUF (default: SmolLM2-135M from the test cache)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gpu-layers", type=int, default=-1)
    args = parser.parse_args()
    if args.model is None:
        from tests.helpers.smollm2 import smollm2_path

        args.model = str(smollm2_path())
    engine = Engine()
    engine.load(args.model, LoadSettings(n_ctx=2048, n_outputs_max=1, n_gpu_layers=args.gpu_layers))
    request = ChatRequest(PROMPT, sampling=SamplingParams(temperature=0.0, max_tokens=args.tokens))
    tokens = engine.tokenize_prompt(engine.render_prompt(request))
    engine_tps, raw_tps = [], []
    raw_loop(engine.llm, tokens, 8)  # warm-up
    for r in range(args.rounds):
        order = ("engine", "raw") if r % 2 == 0 else ("raw", "engine")
        for side in order:
            if side == "raw":
                n, secs = raw_loop(engine.llm, tokens, args.tokens)
                raw_tps.append((n - 1) / secs)
            else:
                engine.llm.reset()
                reply = engine.generate(request, on_event=lambda k, t: None, should_stop=lambda: False)
                n = reply.stats.generated_tokens
                engine_tps.append(reply.stats.wall_tps)
            print(f"  round {r + 1} {side:<6} {n} tokens  {(engine_tps if side == 'engine' else raw_tps)[-1]:8.1f} tok/s")
    e, w = statistics.median(engine_tps), statistics.median(raw_tps)
    print(f"\nmodel: {engine.info.name}; medians of {args.rounds} rounds, wall clock first to last token")
    print(f"  engine      {e:8.1f} tok/s")
    print(f"  raw loop    {w:8.1f} tok/s")
    print(f"  engine/raw  {e / w:8.3f}  (target >= 0.97)  {'PASS' if e / w >= 0.97 else 'MISS'}")
    engine.unload()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
