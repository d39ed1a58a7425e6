"""`plan`, `setup` and `tune`: how a model fits this machine, getting it ready, measuring it. No Qt."""

from __future__ import annotations

import argparse
import sys

from app.cli.common import Commands, ExitCode, ProgressPrinter, in_words, plan_request
from app.cli.hub_commands import hub_entry


def register_plan(sub: Commands) -> None:
    plan = sub.add_parser(
        "plan", help="how a model fits this machine's GPU: context, KV cache, experts kept in RAM",
        description="Reads only the model's header (a local file, or the first megabytes of a URL) and prints "
                    "the plan with a memory breakdown. Exit codes: 0 fits, 1 does not fit, 2 bad input.")
    plan.add_argument("model", metavar="MODEL_OR_URL", help="a GGUF file or an http(s) URL of one")
    plan.add_argument("--vram-gb", type=float, help="plan for a GPU with this many GiB free instead of this one")
    plan.add_argument("--ctx", type=int, help="context length wanted (default: the model's full window)")
    plan.add_argument("--gpu", type=int, help="plan for this GPU index (default: the one with most free memory)")
    plan.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from app.gguf.gguf_file import GGUFError
    from app.gguf.model_facts import facts_from_header
    from app.machine.snapshot import Machine
    from app.model.plan import GiB, goal_costs, goal_lines, make_plan, plan_for_file
    from app.net.remote_gguf import RemoteError, fetch_header

    request = plan_request(args)
    machine = Machine.read()
    tuned = ""
    try:
        if args.model.startswith(("http://", "https://")):
            facts = facts_from_header(fetch_header(args.model))
            plan = make_plan(facts, machine.gpus, machine.ram, request)
        else:
            planned = plan_for_file(args.model, machine, request, use_tune=not args.vram_gb)
            facts, plan, tuned = planned.facts, planned.plan, planned.tuned
    except (GGUFError, RemoteError, OSError, KeyError, ValueError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print(f"{facts.name or args.model} ({facts.arch}, {facts.weights_bytes / GiB:.2f} GiB of weights, "
          f"{len(facts.blocks)} blocks, {facts.n_ctx_train:,}-token window)")
    for line in plan.lines():
        print(line)
    for line in goal_lines(goal_costs(facts, machine.gpus, machine.ram, request)):
        print(line)
    if tuned:
        print(tuned)
    return ExitCode.OK if plan.fits else ExitCode.FAILED


def register_setup(sub: Commands) -> None:
    setup = sub.add_parser(
        "setup", help="one-click set-up of a catalog model: plan, download, verify, patch, preflight",
        description="Runs the same pipeline as the window's set-up. A stopped set-up continues where it stopped "
                    "when run again. Exit codes: 0 ready, 1 a step failed (it says which and why), 2 bad input, "
                    "130 cancelled.")
    setup.add_argument("model", help="a catalog id (smollm2-135m, clover-35b-a3b, qwen3.6-35b-a3b), a local .gguf, "
                                     "or hub:OWNER/NAME[:FILE_OR_QUANT] (without a file: the one recommended here)")
    setup.add_argument("--url", help="download from this URL instead of the catalog's")
    setup.add_argument("--allow-http", action="store_true", help="allow a plain http:// URL (not only https)")
    setup.set_defaults(func=run_setup)


def run_setup(args: argparse.Namespace) -> int:
    from app.fetch.catalog import CatalogError, entry_for_local_file, find
    from app.fetch.hub import HubError
    from app.fetch.setup_pipeline import SetupError, SetupPipeline
    from app.gguf.gguf_file import GGUFError
    from app.machine.snapshot import Machine
    from app.net.download import Downloader

    try:
        if args.model.startswith("hub:"):
            entry = hub_entry(args.model)
        elif args.model.endswith(".gguf"):
            entry = entry_for_local_file(args.model)
        else:
            entry = find(args.model)
    except (CatalogError, HubError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except (GGUFError, OSError, KeyError, ValueError) as exc:  # a local file that is missing or not a model
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    pipeline = SetupPipeline(entry, Machine.read(), url=args.url, downloader=Downloader(allow_http=args.allow_http))
    try:
        state = pipeline.run(ProgressPrinter())
    except KeyboardInterrupt:
        pipeline.cancel()
        print("cancelled; run the same command again to continue", file=sys.stderr)
        return ExitCode.CANCELLED
    except SetupError as exc:
        print(f"error in step {exc.step}: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    print(f"ready: {state.final_path}")
    return ExitCode.OK


def register_tune(sub: Commands) -> None:
    tune_ = sub.add_parser("tune", help="measure threads, experts in RAM, flash attention, KV type and batch size "
                                        "on this machine; the fastest setting is used by the next load",
                           description="Short measured runs around the plan's settings, in a time budget. Exit codes: "
                                       "0 tuned, 1 the model does not fit or every trial failed, 2 bad input, "
                                       "130 cancelled.")
    tune_.add_argument("model", help="a GGUF file")
    tune_.add_argument("--budget-s", type=float, default=120.0, help="time budget in seconds (default 120)")
    tune_.add_argument("--goal", default="fastest", help="fastest (default), longest-context or balanced")
    tune_.add_argument("--vram-gb", type=float, help="plan for a GPU with this many GiB free")
    tune_.add_argument("--ctx", type=int, help="context length the plan must keep (default: the model's window)")
    tune_.add_argument("--tune-ctx", type=int, default=2048, help="context of the measuring runs (default 2048)")
    tune_.set_defaults(func=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    """Measure settings on this machine; print the sweep and the chosen one (used by the next load)."""
    from app.gguf.gguf_file import GGUFError
    from app.machine.snapshot import Machine
    from app.machine.tune import GOALS, TuneCancelled, table, tune
    from app.model.plan import plan_for_file

    if args.goal not in GOALS:
        print(f"error: --goal must be one of {', '.join(GOALS)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    machine = Machine.read()
    try:
        planned = plan_for_file(args.model, machine, plan_request(args), use_tune=False)
    except (GGUFError, OSError, KeyError, ValueError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    facts, plan = planned.facts, planned.plan
    if not plan.fits:
        print(f"error: the model does not fit this machine: {plan.reason}", file=sys.stderr)
        return ExitCode.FAILED
    if machine.build is None:
        print(f"error: llama.cpp could not be loaded: {machine.build_error}", file=sys.stderr)
        return ExitCode.FAILED
    gpu, build = machine.identity()
    print(f"{plan.reason}\ntuning for '{args.goal}' within {args.budget_s:.0f} s on {gpu} ({build})", flush=True)

    from app.engine.tune_replies import EngineReplies

    n_ctx = min(plan.n_ctx, args.tune_ctx)
    try:  # speculative decoding measured on and off through the engine, for the chosen setting
        result = tune(args.model, planned.settings, expert_blocks=facts.expert_blocks, on_gpu=plan.device == "gpu",
                      gpu=gpu, build=build, goal=args.goal, budget_s=args.budget_s,
                      report=ProgressPrinter(every=0),  # every trial's line
                      n_ctx=n_ctx, replies=EngineReplies(args.model, n_ctx))
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return ExitCode.CANCELLED
    except TuneCancelled:
        return ExitCode.CANCELLED
    print(table(result))
    if result.trials and all(t.error is not None for t in result.trials):
        print(f"error: every trial failed ({result.trials[0].error}); nothing was tuned", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK
