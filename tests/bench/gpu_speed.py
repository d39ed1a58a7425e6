"""Tokens/s for a model of Clover's shape, on whatever llama.cpp build this is (meant for a CUDA GPU).

    python -m tests.bench.gpu_speed [--tokens 256] [--ctx 131072] [--blocks 40] [--cpu-moe 10]

Writes a Clover-shaped GGUF (qwen35moe, 40 blocks, 256 experts, Q4_K-class sizes, 19.7 GB) whose
data section is a sparse hole: every weight is zero, which costs no disk and changes no kernel's
work per token. Then, in one run: plans it for this machine, loads it as planned (everything on
the GPU for a 24 GB+ card), generates, and prints llama.cpp's own prompt and generation speeds and
the time to first token; then the same with the experts of `--cpu-moe` blocks kept in system RAM
(the 16 GB configuration) and the ratio between the two (reported on a 4090: about half).
It also prints the planner's estimates beside llama.cpp's buffer report for each load.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from app.engine.local import ChatRequest, Engine, SamplingParams
from app.gguf.gguf_file import read_header
from app.gguf.model_facts import facts_from_header
from app.machine.gpu import probe
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings, capture_log, parse_buffers
from app.machine.system_memory import system_memory
from app.model.plan import CUDA_COMPUTE_FACTOR, make_plan
from tests.helpers.clover_shape import write_clover_shaped

MiB = 1024 * 1024
PROMPT = [{"role": "user", "content": "word " * 400}]


def run_once(path: Path, settings: LoadSettings, tokens: int, label: str, facts) -> dict:
    engine = Engine()
    t0 = time.perf_counter()
    with capture_log() as lines:
        engine.load(path, settings)
    load_s = time.perf_counter() - t0
    buffers = parse_buffers(lines)
    request = ChatRequest(PROMPT, sampling=SamplingParams(temperature=0.0, max_tokens=tokens))
    engine.generate(ChatRequest(PROMPT, sampling=SamplingParams(temperature=0.0, max_tokens=8)))  # warm-up
    # prompt processing: a 2,048-token prompt of real token ids (the shape's vocabulary is synthetic)
    llama_cpp = llama()

    engine.llm.reset()
    llama_cpp.llama_perf_context_reset(engine.llm.ctx)
    engine.llm.eval(list(range(1000, 1000 + min(2048, settings.n_ctx // 2))))
    perf = llama_cpp.llama_perf_context(engine.llm.ctx)
    pp_tps = perf.n_p_eval / (perf.t_p_eval_ms / 1000) if perf.t_p_eval_ms else 0.0
    engine.llm.reset()
    reply = engine.generate(request)
    s = reply.stats
    gpu_model = buffers.total("model", lambda n: n.startswith("CUDA") and "Host" not in n)
    result = {
        "label": label, "load_seconds": round(load_s, 1), "n_ctx": settings.n_ctx,
        "cpu_moe_blocks": len(settings.cpu_moe_blocks), "kv_type": settings.type_k,
        "prompt_tokens": int(perf.n_p_eval), "prompt_tps": round(pp_tps, 1),
        "ttft_seconds": round(s.ttft_seconds, 3), "generated": s.generated_tokens,
        "generation_tps": round(s.generation_tps, 1), "wall_tps": round(s.wall_tps, 1),
        "gpu_model_mib": round(gpu_model / MiB), "kv_mib": round(buffers.total("KV") / MiB),
        "rs_mib": round(buffers.total("RS") / MiB), "compute_mib": round(buffers.total("compute") / MiB),
        "estimate_kv_mib": round(facts.kv_bytes(settings.n_ctx, settings.type_k, settings.type_v) / MiB),
        "estimate_compute_cpu_mib": round(facts.compute_bytes(settings.n_ctx, n_outputs=1) / MiB),
        "estimate_compute_cuda_mib": round(facts.compute_bytes(settings.n_ctx, n_outputs=1)
                                           * CUDA_COMPUTE_FACTOR / MiB),
        "buffers": {k: {n: round(v / MiB) for n, v in d.items()} for k, d in buffers.sizes.items()},
    }
    engine.unload()
    print(f"\n[{label}] {json.dumps(result, indent=1)}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--ctx", type=int, default=131_072)
    parser.add_argument("--blocks", type=int, default=40, help="fewer blocks for a quick CPU smoke test")
    parser.add_argument("--cpu-moe", type=int, default=10)
    parser.add_argument("--dir", help="where to write the model (default: a temporary folder)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="clover-gpu-speed-"))
    path = write_clover_shaped(folder / "clover-shape.gguf", n_ctx=args.ctx, n_blocks=args.blocks)
    facts = facts_from_header(read_header(path))
    gpus = probe()
    plan = make_plan(facts, gpus, system_memory())
    print("\n".join(plan.lines()))
    base = plan.settings()
    results = [run_once(path, base, args.tokens, "as planned", facts)]
    blocks = tuple(facts.expert_blocks[:args.cpu_moe])
    from dataclasses import replace

    offload = replace(base, cpu_moe_blocks=blocks, n_ctx=min(base.n_ctx, 16_384))
    results.append(run_once(path, offload, args.tokens, f"experts of {len(blocks)} blocks in RAM", facts))
    a, b = results
    print(f"\nsummary ({gpus.summary()}):")
    print(f"  as planned:          {a['generation_tps']:8.1f} tok/s, first token {a['ttft_seconds']:.3f} s "
          f"(reported on an RTX 4090: about 208 tok/s, 0.13-0.31 s)")
    print(f"  {b['label']}: {b['generation_tps']:8.1f} tok/s (reported: about 102 tok/s)")
    print(f"  ratio                {b['generation_tps'] / a['generation_tps']:8.2f} (reported: about 0.5)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
