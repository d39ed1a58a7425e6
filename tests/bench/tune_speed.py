"""Tune against the untuned default, measured side by side after the sweep, one run.

    python -m tests.bench.tune_speed [--budget-s 120] [--rounds 7] [--models moe,moe-q4k,smollm2]

Models (built here; nothing is downloaded beyond the package registry):
- `moe`: the tests' MoE double (deepseek architecture, shared expert, F32, about 1 MB);
- `moe-q4k`: an MoE double in Clover's quant mix: 8 blocks of 8 experts of which 4 run, 1024 wide,
  written at Q8_0 and quantized to Q4_K_M by llama.cpp's own quantizer (Q4_K experts, Q6_K on some
  `ffn_down` and the output, F32 routers and norms: what llama.cpp gives a Q4_K_M file of Clover);
- `smollm2`: SmolLM2-135M Q4_1 (the tests' chat model), when the registry package can be had.

For each: the app's sweep (`app.machine.tune.tune`, on the plan's settings, in a throw-away cache
folder), then, in one loaded model per setting shape and in turn for `--rounds` rounds, so that they
share the machine's noise: the untuned default (llama-cpp-python's own thread count, half of the
logical CPUs; the rest the plan's), the chosen setting, and the runner-up (the best other setting).
Printed per model: median generation tok/s of each, and, as the median of the rounds' paired ratios
(a busy minute on this machine slows both sides of a round), chosen / default (target >= 1.3 on 2
cores) and chosen / runner-up (>= 0.97: the choice is the fastest tried, within noise), each with PASS or
MISS; they are repeated last, and the command exits 3 when any missed (tests/bench/verdict.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.bench.verdict import Verdicts

BUILDERS = ("moe", "moe-q4k", "smollm2")


def build_model(name: str, folder: Path) -> Path | None:
    from tests.helpers.gguf_models import ModelShape, quantize_with_llama_cpp, write_deepseek_moe

    if name == "moe":
        return write_deepseek_moe(folder / "moe.gguf")
    if name == "moe-q4k":
        q8 = write_deepseek_moe(folder / "moe-q8.gguf", ModelShape(
            n_embd=1024, n_head=8, n_head_kv=4, n_layer=8, n_ff=2048, n_expert=8, n_expert_used=4,
            n_ff_exp=1024, qtype="Q8_0"))
        out = quantize_with_llama_cpp(q8, folder / "moe-q4k.gguf", "Q4_K_M")
        q8.unlink()
        return out
    if name == "smollm2":
        from tests.helpers.smollm2 import smollm2_path

        try:
            return smollm2_path()
        except Exception as exc:  # noqa: BLE001 - no registry: the other models still run
            print(f"  smollm2: not available ({exc})")
            return None
    raise ValueError(name)


def side_by_side(path: Path, n_ctx: int, plan_settings: Any, expert_blocks: list[int],
                 named: dict[str, dict[str, Any]], rounds: int) -> dict[str, list[float]]:
    """Generation tok/s of each named setting, measured in turn, `rounds` times."""
    from app.machine.tune import Measurer, apply

    measurer = Measurer(path, n_ctx)
    speeds: dict[str, list[float]] = {name: [] for name in named}
    try:
        measurer.measure(apply(plan_settings, next(iter(named.values())), expert_blocks))  # warm-up
        for r in range(rounds):  # the order turns every round, so that neither side always goes first
            for name in (list(named) if r % 2 == 0 else list(reversed(named))):
                speeds[name].append(measurer.measure(apply(plan_settings, named[name], expert_blocks))[0])
    finally:
        measurer.close()
    return speeds


def bench(name: str, path: Path, budget_s: float, rounds: int, verdicts: Verdicts) -> dict[str, float] | None:
    from app.machine.snapshot import Machine
    from app.machine.tune import Trial, table, tune
    from app.model.plan import PlanRequest, plan_for_file

    machine = Machine.read()
    planned = plan_for_file(path, machine, PlanRequest(), use_tune=False)
    plan, facts = planned.plan, planned.facts
    if not plan.fits:
        print(f"  {name}: does not fit this machine: {plan.reason}")
        return None
    gpu, build = machine.identity()
    n_ctx = min(plan.n_ctx, 2048)
    print(f"\n== {name}: {path.name}, {path.stat().st_size / 2**20:.0f} MiB, on {gpu} ({build})", flush=True)
    result = tune(path, plan.settings(), expert_blocks=facts.expert_blocks, on_gpu=plan.device == "gpu", gpu=gpu,
                  build=build, budget_s=budget_s, n_ctx=n_ctx)
    print(table(result), flush=True)
    chosen = result.best
    if chosen is None:
        print("  no setting could be measured")
        return None
    default = result.trials[0].settings  # the sweep's baseline: the plan's settings, llama-cpp-python's threads

    others = [t.settings for t in result.trials if t.error is None and t.settings not in (chosen, default)]
    named = {"default": default, "chosen": chosen}
    if others:
        named["runner-up"] = max(others, key=lambda s: result.mean_tps(s)[0])
    speeds = side_by_side(path, n_ctx, plan.settings(), facts.expert_blocks, named, rounds)
    med = {k: statistics.median(v) for k, v in speeds.items()}
    print(f"  side by side, {rounds} rounds (median gen tok/s; each round's values in brackets):")
    labels = {"default": "untuned default", "chosen": "chosen", "runner-up": "runner-up"}
    for key, values in speeds.items():
        print(f"    {labels[key]:<16} {med[key]:8.1f}  [{', '.join(f'{v:.0f}' for v in values)}]  "
              f"{Trial(named[key]).label()}")

    def paired(a: str, b: str) -> float:
        """The median of the rounds' ratios: each round measured both within seconds of each other,
        so a slow minute on this machine moves both sides."""
        return statistics.median(x / y for x, y in zip(speeds[a], speeds[b], strict=True))

    figures = {"chosen/default": paired("chosen", "default")}
    r = figures["chosen/default"]
    line = (f"  chosen / untuned default: {r:.2f} (median of the rounds' ratios; "
            f"of the medians {med['chosen'] / med['default']:.2f}; target >= 1.3)  "
            f"{verdicts.check(f'{name}: chosen / default', r, r >= 1.3, '>= 1.3', '{:.2f}')}")
    if "runner-up" in med:
        r = figures["chosen/runner-up"] = paired("chosen", "runner-up")
        line += (f"\n  chosen / runner-up: {r:.2f} (of the medians "
                 f"{med['chosen'] / med['runner-up']:.2f}; >= 0.97: the fastest tried, within noise)  "
                 f"{verdicts.check(f'{name}: chosen / runner-up', r, r >= 0.97, '>= 0.97', '{:.2f}')}")
    print(line, flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--models", default=",".join(BUILDERS))
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in BUILDERS]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; choose from {', '.join(BUILDERS)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tune-bench-") as tmp:
        os.environ["CLOVER_HOME"] = str(Path(tmp) / "home")  # the sweep's cache stays out of the user's
        folder = Path(tmp)
        summary = {}
        verdicts = Verdicts()
        for name in names:
            path = build_model(name, folder)
            if path is not None:
                figures = bench(name, path, args.budget_s, args.rounds, verdicts)
                if figures is not None:
                    summary[name] = figures
    print("\nsummary (chosen / untuned default, target >= 1.3; chosen / runner-up, >= 0.97):")
    for name, figures in summary.items():
        print(f"  {name:<8} " + "  ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    return verdicts.finish()


if __name__ == "__main__":
    sys.exit(main())
