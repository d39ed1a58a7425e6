"""`bench scenarios` and `compare`: the scenario suite on one model, a prompt or the suite on two. No Qt."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from app.cli.bfcl_command import register_bfcl
from app.cli.common import Commands, ExitCode, ProgressPrinter, in_words
from app.cli.engine_spec import parse_engine_spec

if TYPE_CHECKING:
    from app.bench.scenarios import Result, Scenario


def select_scenarios(scenarios: list[Scenario], only: str | None) -> list[Scenario]:
    """The scenarios `--only a,b` names (all without it), in the suite's order; an id the suite does not
    have is a ValueError that lists the known ones (both commands that take --only say so the same way),
    and so is an --only that names nothing (`--only ""` is not "all")."""
    if only is None:
        return scenarios
    wanted = {part.strip() for part in only.split(",")} - {""}
    if not wanted:
        raise ValueError(f"--only names no scenario; known: {', '.join(s.id for s in scenarios)}")
    unknown = wanted - {s.id for s in scenarios}
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(s.id for s in scenarios)}")
    return [s for s in scenarios if s.id in wanted]


def register_bench(sub: Commands) -> None:
    bench = sub.add_parser("bench",
                           help="benchmarks of a model (the article's scenarios, BFCL's function-calling tests)")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    scen = bench_sub.add_parser("scenarios", help="drone dispatch, two tool calls, an HTML calculator, a needle, "
                                                  "a capital: pass/fail and timing, saved for comparison")
    scen.add_argument("model", help="a GGUF file")
    scen.add_argument("--ctx", type=int, help="context length (default: as planned for this machine)")
    scen.add_argument("--only", help="comma-separated scenario ids")
    scen.set_defaults(func=run_bench_scenarios)
    register_bfcl(bench_sub)


def run_bench_scenarios(args: argparse.Namespace) -> int:
    from app.bench.scenarios import load_scenarios, run_all, save_results, table
    from app.engine.contract import EngineError
    from app.engine.local import Engine
    from app.engine.planned_load import load_as_planned
    from app.gguf.gguf_file import GGUFError
    from app.machine.snapshot import Machine
    from app.model.plan import PlanRequest, plan_for_file

    try:
        scenarios = select_scenarios(load_scenarios(), args.only)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    machine = Machine.read()
    try:
        planned = plan_for_file(args.model, machine, PlanRequest(n_ctx=args.ctx))
    except (GGUFError, OSError, KeyError, ValueError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    plan = planned.plan
    print(plan.reason + (f" ({planned.tuned})" if planned.tuned else ""), flush=True)
    engine = Engine()
    try:
        info = load_as_planned(engine, args.model, planned)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED

    printer = ProgressPrinter(every=0)  # a line per scenario

    def progress(i: int, n: int, result: Result | None) -> None:
        if result is not None:
            printer("scenario", i / n if n else None,
                    f"{i}/{n} {result.title}: {'PASS' if result.passed else 'fail'} ({result.seconds:.1f} s)")

    results = run_all(engine, scenarios, progress=progress)
    engine.unload()
    print(table(results))
    path = save_results(results, model=info.name, plan=plan.reason, gpu=machine.gpus.summary())
    print(f"saved {path}")
    return ExitCode.OK


def register_compare(sub: Commands) -> None:
    cmp_ = sub.add_parser("compare", help="the same prompt or the scenario suite on two engines, side by side",
                          description="A and B: a local .gguf, endpoint:NAME, or an OpenAI-compatible URL[#model]. "
                                      "Local models run one after the other. Exit codes: 0 both ran, 1 one failed, "
                                      "2 bad input.")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    what = cmp_.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", help="one prompt for both")
    what.add_argument("--scenarios", action="store_true", help="the scenario suite")
    cmp_.add_argument("--only", help="with --scenarios: comma-separated scenario ids")
    cmp_.add_argument("--ctx", type=int, help="context length for local models")
    cmp_.add_argument("--max-tokens", type=int, default=512)
    cmp_.add_argument("--no-thinking", action="store_true")
    cmp_.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from app.bench.compare import compare, save_markdown, to_markdown
    from app.bench.scenarios import load_scenarios
    from app.engine.contract import SamplingParams

    if args.only is not None and not args.scenarios:
        print("error: --only picks scenarios: it goes with --scenarios, not --prompt", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        specs = [parse_engine_spec(args.a, args.ctx), parse_engine_spec(args.b, args.ctx)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.scenarios:
        try:
            scenarios = select_scenarios(load_scenarios(), args.only)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitCode.BAD_INPUT
        sides = compare(specs, scenarios=scenarios, progress=lambda m: print(m, flush=True))
        title = "Scenario suite, side by side"
    else:
        messages = [{"role": "user", "content": args.prompt}]
        sides = compare(specs, messages=messages, enable_thinking=not args.no_thinking,
                        sampling=SamplingParams(temperature=0.0, max_tokens=args.max_tokens),
                        progress=lambda m: print(m, flush=True))
        title = "Same prompt, side by side"
    text = to_markdown(sides, title, "" if args.scenarios else args.prompt)
    print(text)
    print(f"saved {save_markdown(text)}")
    return ExitCode.FAILED if any(s.error for s in sides) else ExitCode.OK
