"""The window's engine in a process of its own (app/engine/hosted.py) against the engine in-process,
one run, side by side.

    python -m tests.bench.engine_host [--model PATH|big-vocab] [--tokens 128] [--rounds 6] [--threads N]

Both load the same file with the same settings (one at a time would free the machine for the other,
so both stay loaded: two copies of a small model); each round asks both for the same greedy reply, in
turn (the order flips each round), with a streaming callback and a stop check per token, as the
window asks (both reuse the prompt their cache holds from the round before). Figures: decode
tokens/s (wall clock, first to last token) hosted / in-process, the median of the rounds' ratios
(target >= 0.97, issue 39), time to first token for each, and that the texts are the same.
`big-vocab`: a tiny llama with Clover's 248,320-token vocabulary, which decodes at GPU-like tokens/s
here, where the per-token cost of the wire shows most.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.hosted import HostedEngine
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings, default_threads
from tests.bench.verdict import Verdicts

PROMPT = [{"role": "user", "content": "Write a long, detailed story about a lighthouse keeper and a storm."}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a GGUF (default: SmolLM2-135M from the test cache), or 'big-vocab'")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=0, help="default: the physical cores (the engine's default)")
    args = parser.parse_args()
    verdicts = Verdicts()
    if args.model is None:
        from tests.helpers.smollm2 import smollm2_path

        args.model = str(smollm2_path())
    elif args.model == "big-vocab":
        import numpy as np

        from tests.helpers.gguf_models import ModelShape, write_llama

        folder = Path(tempfile.mkdtemp(prefix="engine-host-"))
        args.model = str(write_llama(folder / "big-vocab.gguf", ModelShape(n_vocab=248_320, dtype=np.float16)))
    threads = args.threads or default_threads().generation
    settings = LoadSettings(n_ctx=2048, n_outputs_max=1, n_threads=threads)
    hosted, local = HostedEngine(), Engine()
    hosted.load(args.model, settings)
    local.load(args.model, settings)
    request = ChatRequest(PROMPT, sampling=SamplingParams(temperature=0.0, max_tokens=args.tokens))
    engines = {"hosted": hosted, "in-process": local}
    tps: dict[str, list[float]] = {k: [] for k in engines}
    ttft: dict[str, list[float]] = {k: [] for k in engines}
    texts: dict[str, set[str]] = {k: set() for k in engines}
    for engine in engines.values():  # warm-up
        engine.generate(ChatRequest(PROMPT, sampling=SamplingParams(temperature=0.0, max_tokens=8)))
    try:
        for r in range(args.rounds):
            order = list(engines) if r % 2 == 0 else list(engines)[::-1]
            for side in order:
                reply = engines[side].generate(request, on_event=lambda k, t: None, should_stop=lambda: False)
                tps[side].append(reply.stats.wall_tps)
                ttft[side].append(reply.stats.ttft_seconds)
                texts[side].add(reply.text)
                print(f"  round {r + 1} {side:<10} {reply.stats.generated_tokens} tokens  {tps[side][-1]:8.1f} tok/s  "
                      f"first token {reply.stats.ttft_seconds * 1000:6.0f} ms", flush=True)
    finally:
        hosted.unload()
        local.unload()
    ratio = statistics.median(h / i for h, i in zip(tps["hosted"], tps["in-process"], strict=True))
    same = texts["hosted"] == texts["in-process"] and len(texts["hosted"]) == 1
    print(f"\nmodel: {Path(args.model).name}; {threads} threads; {args.rounds} rounds, wall clock first to last token")
    for side in engines:
        print(f"  {side:<10}  {statistics.median(tps[side]):8.1f} tok/s   first token "
              f"{statistics.median(ttft[side]) * 1000:6.0f} ms (medians)")
    print(f"  hosted / in-process  {ratio:.3f}  (target >= 0.97, the median of the rounds' ratios)  "
          f"{verdicts.check('hosted / in-process decode', ratio, ratio >= 0.97, '>= 0.97')}")
    verdict = verdicts.check("same text", float(same), same, "yes", "{:.0f}")
    print(f"  the same text: {'yes' if same else 'NO'}  {verdict}")
    return verdicts.finish()


if __name__ == "__main__":
    raise SystemExit(main())
