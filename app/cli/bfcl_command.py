"""`bench bfcl`: the Berkeley Function Calling Leaderboard's single-turn tests on one model or several,
side by side, thinking on and/or off. No Qt."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.common import Commands, ExitCode

if TYPE_CHECKING:
    from app.bench.bfcl_bench import Step

THINKING = {"on": (True,), "off": (False,), "both": (True, False)}


def register_bfcl(bench_sub: Commands) -> None:
    p = bench_sub.add_parser(
        "bfcl", help="the Berkeley Function Calling Leaderboard's single-turn tests (BFCL v4), scored as BFCL does",
        description="MODEL: a local .gguf, endpoint:NAME (added in the app) or an OpenAI-compatible URL[#model]; "
                    "several run one after the other and are shown side by side. Every run is kept in "
                    "<data>/bench/bfcl/. Exit codes: 0 every run complete, 1 a model failed or a run was cut "
                    "short, 2 bad input, 3 the test files could not be had.")
    p.add_argument("models", nargs="+", metavar="MODEL")
    p.add_argument("--quick", action="store_true",
                   help="a fixed sample of 5 cases of each category, 55 in all (the whole set: 3,491 cases)")
    p.add_argument("--thinking", choices=tuple(THINKING), default="on", help="on, off, or both (two runs)")
    p.add_argument("--categories", help="comma-separated BFCL categories (default: all 11 single-turn ones)")
    p.add_argument("--mode", choices=("auto", "fc", "prompt"), default="auto",
                   help="fc: tools through the chat template; prompt: BFCL's prompt mode; auto: fc where the "
                        "template reads tools")
    p.add_argument("--max-tokens", type=int, help="a reply's limit (default 512, 8192 with thinking)")
    p.add_argument("--ctx", type=int, help="context length for local models (default: as planned)")
    p.add_argument("--data", type=Path, help="a BFCL data folder to use (default: fetched once and kept)")
    p.add_argument("--json", type=Path, metavar="FILE",
                   help="write one record per case: id, category, raw, calls, valid, reason")
    p.add_argument("--csv", type=Path, metavar="FILE", help="write every case of every run as CSV")
    p.set_defaults(func=run_bfcl)


def _json_paths(path: Path, n: int) -> list[Path]:
    return [path] if n == 1 else [path.with_name(f"{path.stem}-{i + 1}{path.suffix}") for i in range(n)]


def run_bfcl(args: argparse.Namespace) -> int:
    from app.bench.bfcl_bench import BenchOptions, bench_specs
    from app.bench.bfcl_cases import DatasetError, parse_categories
    from app.bench.bfcl_store import table_text, write_case_json, write_csv
    from app.cli.engine_spec import parse_engine_spec
    from app.fetch.bfcl_dataset import DatasetUnavailable, source

    try:
        categories = parse_categories(args.categories)
        specs = [parse_engine_spec(m, args.ctx) for m in args.models]
    except (DatasetError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.data is not None and not args.data.is_dir():
        print(f"error: {args.data}: not a folder", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.max_tokens is not None and args.max_tokens < 1:
        print("error: --max-tokens must be at least 1", file=sys.stderr)
        return ExitCode.BAD_INPUT
    options = BenchOptions(quick=args.quick, categories=categories, mode=args.mode, max_tokens=args.max_tokens,
                           data=args.data)
    print(source().credit(), flush=True)
    failures: list[str] = []

    def progress(step: Step) -> None:
        if step.record is None:
            print(f"run {step.run + 1}/{step.runs}: {step.title}, {step.total} cases", flush=True)
            return
        r = step.record
        eta = f", about {step.eta_seconds / 60:.0f} min left" if step.eta_seconds is not None else ""
        verdict = "ok  " if r.valid else "FAIL"
        print(f"  [{step.done}/{step.total}] {verdict} {r.id} ({r.seconds:.1f} s){eta}"
              + ("" if r.valid else f": {r.reason[:150]}"), flush=True)

    def failed(label: str, words: str) -> None:
        failures.append(label)
        print(f"error: {label}: {words}", file=sys.stderr, flush=True)

    try:
        runs = bench_specs(specs, THINKING[args.thinking], options, progress=progress, on_error=failed)
    except DatasetUnavailable as exc:
        print(f"error: {exc}" + (f" ({exc.detail})" if exc.detail else ""), file=sys.stderr)
        return 3
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except KeyboardInterrupt:
        print("stopped: the cases judged so far are kept in <data>/bench/bfcl/", file=sys.stderr)
        return ExitCode.CANCELLED
    if runs:
        print()
        print(table_text(runs))
        for run in runs:
            ended = run.ended or {}
            print(f"kept {run.path} ({len(run.records)} of {run.info.planned_cases} cases, "
                  f"mode {run.info.mode}{', stopped' if ended.get('stopped') else ''})")
    if args.json is not None:
        for run, path in zip(runs, _json_paths(args.json, len(runs)), strict=True):
            print(f"wrote {write_case_json(run.records, path)}")
    if args.csv is not None and runs:
        print(f"wrote {write_csv(runs, args.csv)}")
    short = [r for r in runs if len(r.records) < r.info.planned_cases]
    return ExitCode.FAILED if failures or short or not runs else ExitCode.OK
