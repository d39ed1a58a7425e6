"""What a verify batch costs on this GPU for Clover's shape: the half of drafting's speed that needs the GPU.

    python -m tests.bench.batch_costs [--model clover|qwen35moe|PATH] [--depths 512,8192,32768]
                                      [--sizes 1,2,3,4,8] [--rounds 3] [--slots 4] [--json OUT] [--store]

`clover` (the GPU check's): the Clover shape with its MTP block, sparse as tests/helpers/clover_shape.py
writes it, but with random routers, norms and the embeddings of the tokens timed: zero weights route
every token to the same 8 experts, and a batch of tokens that share their experts costs far less than
real text, whose tokens read up to 8 experts each a block. `qwen35moe`: the tiny Clover (random
weights, an MTP block), for the CPU. One load (the 24 GB plan's settings, 4 slots, 8 rollback
snapshots, the MTP head), then at each context depth: a decode of n tokens with every row's logits (a
verify batch) against one token, the fastest of --rounds each; four slots decoding a token each in one
batch against four decodes one at a time; and the MTP head's draft step. Then what they make of the
acceptance measured on SmolLM2 (resources/drafting/, tests.bench.ngram_acceptance) and of the
published acceptance of Qwen3.6's head: expected, not measured (app/machine/drafting_gain.py).
`--store` keeps the costs where the plan and speculative auto read them (per GPU and model shape).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from app.engine.drafting import fill_batch
from app.machine.drafting_gain import VerifyCosts, load_profile, mtp_table, mtp_tps, ngram_lines, save_measured
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings
from tests.bench.verdict import Verdicts
from tests.helpers.engines import loaded_engine

SGLANG_H200 = 453.59  # tok/s, a guess-then-check mode in another engine on one H200 (the seeds' figure)
EMBEDDED = 16_384  # tokens whose embeddings the Clover shape gets (the timed tokens are among them)
Q4_K_BLOCK = 144  # bytes of 256 weights: f16 d, f16 dmin, 12 bytes of scales, 128 of 4-bit values


def write_routed_clover(path: Path, n_ctx: int = 131_072, n_blocks: int = 40) -> Path:
    """The sparse Clover shape with its MTP block, plus data where routing needs it: norms 1, routers
    random, and valid Q4_K rows (a small d, random scales and values) for the first EMBEDDED tokens."""
    from app.gguf.gguf_file import TensorInfo, encode_header
    from tests.helpers.clover_shape import clover_kvs, clover_tensors

    rng = np.random.default_rng(0)
    infos, offset = [], 0
    for name, shape, ggml_type in clover_tensors(n_blocks, mtp=True):
        infos.append(TensorInfo(name, shape, ggml_type, offset))
        offset += -(-infos[-1].n_bytes // 32) * 32
    head = encode_header(3, clover_kvs(n_ctx=n_ctx, n_blocks=n_blocks, mtp=True), infos, 32)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
        for info in infos:
            f.seek(len(head) + info.offset)
            count = int(np.prod(info.shape))
            if info.name.endswith("norm.weight"):
                f.write(np.ones(count, dtype=np.float32).tobytes())
            elif info.name.endswith("ffn_gate_inp.weight"):
                f.write((rng.standard_normal(count) * 0.05).astype(np.float32).tobytes())
            elif info.name == "token_embd.weight":
                rows = rng.integers(0, 256, size=(EMBEDDED * info.shape[0] // 256, Q4_K_BLOCK), dtype=np.uint8)
                rows[:, 0:2] = np.frombuffer(np.float16(0.02).tobytes(), dtype=np.uint8)  # d
                rows[:, 2:4] = 0  # dmin
                f.write(rows.tobytes())
    return path


def model(name: str, folder: Path, blocks: int = 40) -> Path:
    if name == "clover":
        return write_routed_clover(folder / "clover-routed-mtp.gguf", n_blocks=blocks)
    if name == "qwen35moe":
        from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

        return write_qwen35moe(folder / "qwen35moe-mtp.gguf", qwen35_shape(n_ctx_train=32_768), mtp=True)
    return Path(name)


def settings_for(path: Path, vram_gb: float, depth: int, slots: int, k: int) -> LoadSettings:
    """The plan's settings for a card of vram_gb (0: this machine's), with room for the deepest context,
    `slots` sequences, rollback snapshots for a k-token batch and the MTP head."""
    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header
    from app.machine.gpu import probe
    from app.machine.system_memory import system_memory
    from app.model.plan import GiB, PlanRequest, make_plan

    facts = facts_from_header(read_header(path))
    request = PlanRequest(vram_bytes=int(vram_gb * GiB) if vram_gb else None, speculative="off")
    plan = make_plan(facts, probe(), system_memory(), request)
    n_ctx = max(min(plan.n_ctx, facts.n_ctx_train), depth + 512)
    return replace(plan.settings(), n_ctx=n_ctx, parallel=slots, speculative="mtp", draft_max=k)


def time_decode(lc: Any, ctx: Any, batch: Any) -> float:
    lc.llama_synchronize(ctx)
    started = time.perf_counter()
    if lc.llama_decode(ctx, batch) != 0:
        raise RuntimeError("llama_decode failed")
    lc.llama_synchronize(ctx)
    return time.perf_counter() - started


def rows(batch: Any, entries: list[tuple[int, int, int]]) -> None:
    """A batch of (token, pos, seq) rows, every row's logits asked for."""
    batch.n_tokens = len(entries)
    for i, (token, pos, seq) in enumerate(entries):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = token, pos, 1, seq, 1


def measure(llm: Any, depths: list[int], sizes: list[int], rounds: int, slots: int) -> dict[str, Any]:
    """On the scheduler's thread: each depth's batch times (seconds, the fastest of `rounds`) and the
    slots' (one at a time, together). Leaves the cache empty."""
    lc = llama()
    mem = lc.llama_get_memory(llm.ctx)
    span = min(int(llm.n_vocab()) - 2, 9000)  # the Clover shape's embedded tokens are among the first EMBEDDED
    tokens = [1 + (37 * i) % span for i in range(max(depths) + 64)]
    batch = lc.llama_batch_init(max(max(sizes), slots), 0, 1)
    out: dict[str, Any] = {}
    try:
        for depth in depths:
            llm.reset()
            lc.llama_memory_clear(mem, True)
            llm.eval(tokens[:depth])
            pos = depth
            times: dict[int, float] = {}
            for r in range(rounds):
                for n in sizes:  # each batch goes on after the last: the depth grows by a few dozen tokens
                    fill_batch(batch, [tokens[(pos + i + r) % len(tokens)] for i in range(n)], pos)
                    times[n] = min(times.get(n, 1e9), time_decode(lc, llm.ctx, batch))
                    pos += n
            one = together = 1e9
            if slots > 1:
                for s in range(1, slots):
                    lc.llama_memory_seq_cp(mem, 0, s, -1, -1)
                at = [pos] * slots
                for _ in range(rounds):
                    alone = 0.0
                    for s in range(slots):
                        rows(batch, [(tokens[at[s] % len(tokens)], at[s], s)])
                        alone += time_decode(lc, llm.ctx, batch)
                        at[s] += 1
                    one = min(one, alone)
                    rows(batch, [(tokens[(at[s] + s) % len(tokens)], at[s], s) for s in range(slots)])
                    together = min(together, time_decode(lc, llm.ctx, batch))
                    at = [p + 1 for p in at]
            out[str(depth)] = {"seconds": {str(n): t for n, t in times.items()},
                               "slots_one_at_a_time": one if slots > 1 else None,
                               "slots_together": together if slots > 1 else None}
    finally:
        lc.llama_batch_free(batch)
        llm.reset()
        lc.llama_memory_clear(mem, True)
    return out


def costs_at(result: dict[str, Any], depth: str, head: float | None, source: str) -> VerifyCosts:
    seconds = {int(n): t for n, t in result[depth]["seconds"].items()}
    return VerifyCosts({n: t / seconds[1] for n, t in seconds.items()}, head, source)


def report(result: dict[str, Any], head: float | None, slots: int, source: str, verdicts: Verdicts) -> VerifyCosts:
    """The table, ratios side by side, and the expected figures; the costs at the middle depth."""
    depths = list(result)
    sizes = sorted(int(n) for n in result[depths[0]]["seconds"])
    print(f"\nverify batch (n tokens, every row's logits) relative to one token; {source}")
    print(f"  {'depth':>7}  {'1 token':>9}" + "".join(f"{n:>7}" for n in sizes[1:])
          + f"   {slots} slots vs one at a time")
    for depth in depths:
        r = result[depth]
        one = r["seconds"]["1"]
        ratio = "" if r["slots_together"] is None else f"   {r['slots_one_at_a_time'] / r['slots_together']:.2f}x"
        print(f"  {int(depth):>7}  {one * 1000:>6.2f} ms" + "".join(
            f"{r['seconds'][str(n)] / one:>7.2f}" for n in sizes[1:]) + ratio)
    print(f"  MTP head's draft step: {'not measured (no head)' if head is None else f'{head:.2f}x one token'}")
    middle = depths[len(depths) // 2]
    costs = costs_at(result, middle, head, f"{source}, depth {int(middle):,}")
    shallow = result[depths[0]]
    plain_tps = 1 / shallow["seconds"]["1"]
    if 4 in costs.sizes:
        c4 = costs.cost(4)
        print(f"  a batch of 4 tokens at depth {int(middle):,}: {c4:.2f}x one (expected on a GPU: at most 1.2x) "
              f"{verdicts.check('verify batch of 4 / one token', c4, c4 <= 1.2, '<= 1.2 (report)', '{:.2f}')}")
    if shallow["slots_together"]:
        gain = shallow["slots_one_at_a_time"] / shallow["slots_together"]
        print(f"  {slots} slots together / one at a time at depth {int(depths[0]):,}: {gain:.2f}x "
              f"{verdicts.check(f'{slots} slots / one at a time', gain, gain >= 2.0, '>= 2', '{:.2f}')}")
    profile = load_profile()
    copy_gain = None
    if profile is None:
        print("\nno acceptance profile (resources/drafting/ngram_acceptance.json): no expected n-gram speed-up")
    else:
        print("\n" + "\n".join(ngram_lines(profile, costs)))
        if "copy-heavy" in profile.runs:
            copy_gain = profile.best("copy-heavy", costs)[1]
            print(f"  copy-heavy, expected (not measured): {copy_gain:.2f}x "
                  f"{verdicts.check('expected n-gram speed-up, copy-heavy', copy_gain, copy_gain >= 1.3, '>= 1.3')}")
    print(f"\n(plain decoding here: {plain_tps:.1f} tok/s, llama_decode of one token at depth {int(depths[0]):,})")
    print("\n".join(mtp_table(plain_tps, costs)))
    best = max(mtp_tps(plain_tps, 0.8, k, costs) for k in (1, 2, 3))
    print(f"  at acceptance 0.8, expected (not measured): {best:.1f} tok/s against SGLang's {SGLANG_H200} on an H200 "
          f"({best / SGLANG_H200:.2f}x)")
    four = f"{costs.cost(4):.2f}x" if 4 in costs.sizes else "-"
    slot_gain = (f"{shallow['slots_one_at_a_time'] / shallow['slots_together']:.2f}x"
                 if shallow["slots_together"] else "-")
    print(f"\nsummary: batch of 4 = {four} one token; {slots} slots {slot_gain} one at a time; head step "
          f"{'-' if head is None else f'{head:.2f}x'}; plain {plain_tps:.0f} tok/s; expected (not measured): "
          f"n-grams copy-heavy {'-' if copy_gain is None else f'{copy_gain:.2f}x'}, MTP at 0.8 {best:.0f} tok/s")
    return costs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="clover")
    ap.add_argument("--depths", default="512,8192,32768")
    ap.add_argument("--sizes", default="1,2,3,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=40, help="the Clover shape's blocks (fewer: a CPU smoke test)")
    ap.add_argument("--vram-gb", type=float, default=24.0, help="plan the load for this card (0: this GPU)")
    ap.add_argument("--dir", help="where to write the model (default: a temporary folder)")
    ap.add_argument("--json", help="also write the measurements here")
    ap.add_argument("--store", action="store_true", help="keep the costs for the plan and speculative auto")
    args = ap.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    sizes = sorted({1, *(int(n) for n in args.sizes.split(","))})
    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header
    from app.machine.gpu import probe

    gpus = probe()
    device = gpus.gpus[0].name if gpus.has_gpu else "CPU"
    with tempfile.TemporaryDirectory(prefix="batch-costs-", dir=args.dir) as tmp:
        path = model(args.model, Path(tmp), args.blocks)
        settings = settings_for(path, args.vram_gb if gpus.has_gpu else 0, max(depths) + 64 * args.rounds,
                                args.slots, max(sizes))
        if not gpus.has_gpu:
            settings = replace(settings, n_gpu_layers=0)
        print(f"{path.name} on {device}: n_ctx {settings.n_ctx:,}, {args.slots} slots, KV {settings.type_k}, "
              f"{len(settings.cpu_moe_blocks)} expert blocks in RAM", flush=True)
        with loaded_engine(path, settings) as engine:
            loop = engine.slots
            assert loop is not None and engine.llm is not None
            head_step = loop.call(lambda: loop.head.step_cost(engine.llm)) if loop.head is not None else None
            result = loop.call(lambda: measure(engine.llm, depths, sizes, args.rounds, args.slots))
        facts = facts_from_header(read_header(path))
    verdicts = Verdicts()
    source = f"measured on {device} ({args.model}, {time.strftime('%Y-%m-%d')})"
    costs = report(result, head_step, args.slots, source, verdicts)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "model": args.model, "depths": result,
                                               "head_step": head_step, "costs": costs.to_dict(),
                                               "plain_tps": 1 / result[str(depths[0])]["seconds"]["1"]}, indent=1))
    if args.store:
        print(f"stored for the plan and speculative auto: {save_measured(device, facts, costs)}")
    print(f"median verify cost of 2 tokens over the depths: "
          f"{statistics.median(r['seconds']['2'] / r['seconds']['1'] for r in result.values()):.2f}x"
          if 2 in sizes else "")
    return verdicts.finish()


if __name__ == "__main__":
    sys.exit(main())
