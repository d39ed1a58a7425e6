"""Tokens/s for a model of Clover's shape, on whatever llama.cpp build this is (meant for a CUDA GPU).

    python -m tests.bench.gpu_speed [--tokens 256] [--ctx 131072] [--blocks 40] [--vram-gb 24,16]

Writes a Clover-shaped GGUF (qwen35moe, 40 blocks, 256 experts, Q4_K-class sizes, 19.7 GB) whose
data section is a sparse hole: every weight is zero, which costs no disk and changes no kernel's
work per token. Then, for each GPU budget of `--vram-gb` (a 24 GB card: everything on the GPU; a
16 GB card: the experts of some blocks in system RAM), plans it as the app would for that card,
loads it as planned, and generates with speculative decoding off (a zero-weight model repeats one
token, which n-grams would guess every time), printing the engine's tokens/s beside llama.cpp's
own timing of the same reply (`llama_perf_context`: the C side's decode time alone), llama.cpp's
prompt speed and the time to first token, then the ratio of the two budgets (reported on a 4090:
about half). It also prints the planner's estimates beside llama.cpp's buffer report for each load.
`--vram-gb 0` plans for this machine's own GPU instead.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
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
    prompt = list(range(1000, 1000 + min(2048, settings.n_ctx // 2)))
    t_pp = time.perf_counter()
    engine.llm.eval(prompt)  # the wall clock: llama.cpp's prompt counters stay 0 for these batches
    pp_tps = len(prompt) / (time.perf_counter() - t_pp)
    engine.llm.reset()
    llama_cpp.llama_perf_context_reset(engine.llm.ctx)
    reply = engine.generate(request)
    own = llama_cpp.llama_perf_context(engine.llm.ctx)  # llama.cpp's timing of this very reply
    llama_tps = own.n_eval / (own.t_eval_ms / 1000) if own.t_eval_ms else 0.0
    s = reply.stats
    gpu_model = buffers.total("model", lambda n: n.startswith("CUDA") and "Host" not in n)
    result = {
        "label": label, "load_seconds": round(load_s, 1), "n_ctx": settings.n_ctx,
        "cpu_moe_blocks": len(settings.cpu_moe_blocks), "kv_type": settings.type_k,
        "prompt_tokens": len(prompt), "prompt_tps": round(pp_tps, 1),
        "ttft_seconds": round(s.ttft_seconds, 3), "generated": s.generated_tokens,
        "generation_tps": round(s.generation_tps, 1), "wall_tps": round(s.wall_tps, 1),
        "llama_cpp_tps": round(llama_tps, 1), "llama_cpp_eval_tokens": int(own.n_eval),
        # the engine's speed as a client sees it (first to last token, wall clock) over llama.cpp's
        # own decode time for the same tokens: what the Python side around llama_decode costs
        "engine_tps": round(s.wall_tps, 1),
        "engine_vs_llama_cpp": round(s.wall_tps / llama_tps, 3) if llama_tps else None,
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
    parser.add_argument("--vram-gb", default="24,16", help="GPU budgets to plan for, comma-separated (0: this GPU)")
    parser.add_argument("--cpu-moe", type=int, help="(old option, ignored: the 16 GB plan decides)")
    parser.add_argument("--dir", help="where to write the model (default: a temporary folder)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    from dataclasses import replace

    from app.model.plan import GiB, PlanRequest

    folder = Path(args.dir or tempfile.mkdtemp(prefix="clover-gpu-speed-"))
    path = write_clover_shaped(folder / "clover-shape.gguf", n_ctx=args.ctx, n_blocks=args.blocks)
    facts = facts_from_header(read_header(path))
    gpus = probe()
    results = []
    for gb in (float(x) for x in args.vram_gb.split(",") if x.strip()):
        request = PlanRequest(n_ctx=args.ctx, vram_bytes=int(gb * GiB) if gb else None, speculative="off")
        plan = make_plan(facts, gpus, system_memory(), request)
        label = f"planned for {gb:g} GB" if gb else "planned for this GPU"
        print(f"\n[{label}]\n" + "\n".join(plan.lines()), flush=True)
        settings = replace(plan.settings(), speculative="off")
        results.append(run_once(path, settings, args.tokens, label, facts))
        if args.json:  # after each run: a later crash or time-out keeps what was measured
            Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"\nsummary ({gpus.summary()}; speculative decoding off):")
    for r in results:
        ratio = f"{r['engine_vs_llama_cpp']:.3f}" if r["engine_vs_llama_cpp"] else "-"
        print(f"  {r['label']:<22} {r['engine_tps']:8.1f} tok/s engine, {r['llama_cpp_tps']:8.1f} tok/s "
              f"llama.cpp's own timing ({ratio}x), first token {r['ttft_seconds']:.3f} s, prompt "
              f"{r['prompt_tps']:.0f} tok/s; {r['cpu_moe_blocks']} expert blocks in RAM, {r['n_ctx']:,} ctx, "
              f"KV {r['kv_type']}")
    print("  reported on an RTX 4090: about 208 tok/s all on the GPU (first token 0.13-0.31 s), about 102 tok/s "
          "with the experts of 10 blocks in RAM")
    if len(results) >= 2 and results[0]["engine_tps"]:
        print(f"  ratio {results[1]['label']} / {results[0]['label']}: "
              f"{results[1]['engine_tps'] / results[0]['engine_tps']:.2f} (reported: about 0.5)")
    path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
