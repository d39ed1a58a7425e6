"""BFCL's quick run of one GGUF through the app's engine and through llama.cpp's own `llama-server`
(same file, same machine, one after the other), in one table, with every case whose verdict or text
differs listed and said why.

    .venv/bin/python -m tests.bench.bfcl_side_by_side [--model M] [--categories ...] [--max-tokens N]

Three runs, thinking off:
- the app, its mode as `auto` chooses it (prompt mode where the template reads no tools, as SmolLM2's);
- llama-server in the same mode (the same messages, rendered by llama.cpp's template engine, answered
  greedily): where the app and stock llama.cpp render and decode alike, every reply is the same text;
- llama-server given the tools (FC): llama.cpp's own tool handling, whatever the template (for a template
  without tools, llama.cpp's generic JSON format under a grammar).
Each run is scored again by BFCL's own code (tests/bench/bfcl_rescore.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from app.bench.bfcl_bench import BenchOptions, bench_engine
from app.bench.bfcl_cases import CATEGORIES, load_cases, parse_categories
from app.bench.bfcl_store import Run, load_run, table_text
from app.bench.compare import EngineSpec, open_engine
from app.engine.remote import Endpoint
from app.machine.snapshot import Machine
from tests.bench.bfcl_reference import bfcl
from tests.bench.bfcl_rescore import rescore
from tests.bench.stock_server import llama_server, llama_tool


def _why(a: str, b: str) -> str:
    if a == b:
        return "the same text"
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"texts part at character {n}: app {a[n:n + 40]!r} / llama-server {b[n:n + 40]!r}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GGUF (default: SmolLM2-135M Q4_1)")
    parser.add_argument("--categories", default=",".join(CATEGORIES))
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--app-run", type=Path, help="a kept run of the app on the same model to use (thinking off, "
                                                     "quick, the same categories) instead of running it again")
    args = parser.parse_args()
    if args.model is None:
        from tests.helpers.smollm2 import smollm2_path

        args.model = str(smollm2_path())
    exe = llama_tool("llama-server")
    if exe is None:
        return 1
    data = bfcl().data
    options = BenchOptions(quick=True, categories=parse_categories(args.categories), max_tokens=args.max_tokens,
                           data=data)
    cases = load_cases(data, options.categories, quick=True)
    machine = Machine.read()
    label = Path(args.model).stem
    runs: list[Run] = []
    seconds: list[float] = []

    def one(engine, plan: str, who: str, mode: str) -> None:
        start = time.perf_counter()
        run = bench_engine(engine, cases, label=f"{label} via {who}", source_text=args.model, plan=plan,
                           thinking=False, options=dataclasses.replace(options, mode=mode),
                           machine=machine)
        seconds.append(time.perf_counter() - start)
        runs.append(run)
        print(f"{run.info.title()}: {len(run.records)} cases in {seconds[-1]:.0f} s, mode {run.info.mode}", flush=True)

    if args.app_run is not None:
        kept = load_run(args.app_run)
        if [r.id for r in kept.records] != [c.id for c in cases] or kept.info.thinking:
            print(f"{args.app_run}: not a whole quick run of these categories with thinking off")
            return 2
        runs.append(kept)
        seconds.append(float((kept.ended or {}).get("seconds", 0.0)))
        print(f"{kept.info.title()}: kept run {args.app_run.name}, {seconds[-1]:.0f} s, mode {kept.info.mode}")
    else:
        engine, plan = open_engine(EngineSpec(label, path=args.model, n_ctx=args.ctx), machine, reproducible=True)
        try:
            one(engine, plan, "the app", "auto")
        finally:
            engine.unload()
    app_mode = runs[0].info.mode
    with llama_server(exe, args.model, "-c", args.ctx, "--jinja", "-t", 2, "-np", 1) as url:
        for mode in dict.fromkeys((app_mode, "fc")):
            remote, _ = open_engine(EngineSpec("llama-server", endpoint=Endpoint("llama-server", url)), machine)
            try:
                one(remote, "", f"llama-server ({mode})", mode)
            finally:
                remote.unload()
    print()
    print(table_text(runs))
    print()
    for run, secs in zip(runs, seconds, strict=True):
        compared, differ, errors = rescore(run, data)
        print(f"{run.info.title()}: {secs:.0f} s; BFCL's own checker on its outputs: {compared} cases, "
              f"{len(differ)} verdicts differ{f', {errors} engine errors' if errors else ''}")
    app, stock = runs[0], runs[1]
    by_id = {r.id: r for r in stock.records}
    same_text = sum(1 for r in app.records if r.id in by_id and r.raw.strip() == by_id[r.id].raw.strip())
    print(f"\nthe app and llama-server in {app_mode} mode: {same_text} of {len(app.records)} replies the same text")
    for r in app.records:
        s = by_id.get(r.id)
        if s is None or (r.valid == s.valid and r.raw.strip() == s.raw.strip()):
            continue
        print(f"  {r.id}: app {'✓' if r.valid else '✗'} llama-server {'✓' if s.valid else '✗'}; "
              f"{_why(r.raw.strip(), s.raw.strip())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
