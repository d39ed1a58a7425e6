"""The command line: `python -m app [COMMAND]`. Without a command it opens the window.

Every command calls the same core functions that the window uses; later commands (patch, plan,
setup, bench, ...) are added here as subparsers.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from app import APP_NAME, __version__

if TYPE_CHECKING:
    from app.bench.compare import EngineSpec
    from app.bench.scenarios import Result
    from app.fetch.catalog import CatalogEntry
    from app.fetch.hub import HubError
    from app.model.plan import PlanRequest


def _cmd_gui(args: argparse.Namespace) -> int:
    from app.ui.application import run_gui  # Qt is imported only when a window is wanted

    return run_gui(sys.argv[:1] + list(args.qt_args), crash_dialog=not args.no_crash_dialog)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from app.machine.doctor import report

    failures = report(sys.stdout)
    if failures:
        print(f"\n{failures} section(s) could not be read; see FAILED above.", file=sys.stderr)
        return 1
    return 0


def in_words(exc: BaseException) -> str:
    """An error as a sentence: an OSError without its "[Errno N]" prefix, a KeyError without quotes."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)


# Exit codes of `patch` (documented in the README).
PATCH_OK = 0  # patched, or nothing needed (the file already matches upstream)
PATCH_RULE_FAILED = 1  # a rule cannot apply: nothing written
PATCH_BAD_INPUT = 2  # usage error, unreadable or malformed GGUF, unknown profile, target exists
PATCH_VERIFY_FAILED = 3  # the written file did not verify: nothing kept
PATCH_CANCELLED = 130


def _cmd_patch(args: argparse.Namespace) -> int:
    from app.gguf.gguf_file import GGUFError
    from app.model.patch import PatchCancelled, PatchError, VerificationError, patch_file, patch_in_place

    def show(done: int, total: int) -> None:
        print(f"\r  {done / max(total, 1):6.1%}  {done / 1e9:.2f} / {total / 1e9:.2f} GB", end="",
              file=sys.stderr, flush=True)

    progress = show if not args.quiet and sys.stderr.isatty() else None
    if args.in_place and (args.target or args.dry_run or args.verify_data):
        print("error: --in-place takes no TARGET, --dry-run or --verify-data", file=sys.stderr)
        return PATCH_BAD_INPUT
    try:
        if args.in_place:
            report = patch_in_place(args.source, args.profile)
        else:
            report = patch_file(args.source, args.target, args.profile, dry_run=args.dry_run,
                                verify_data=args.verify_data, overwrite=args.force, progress=progress)
    except KeyboardInterrupt:
        print("\ncancelled: nothing written", file=sys.stderr)
        return PATCH_CANCELLED
    except PatchCancelled:
        print("cancelled: nothing written", file=sys.stderr)
        return PATCH_CANCELLED
    except VerificationError as exc:
        print(f"error: verification failed, nothing kept: {exc}", file=sys.stderr)
        return PATCH_VERIFY_FAILED
    except (GGUFError, PatchError, OSError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return PATCH_BAD_INPUT
    finally:
        if progress:
            print(file=sys.stderr)
    print(f"{report.source}  (profile {report.profile})")
    for result in report.results:
        print(f"  {result.line(report.dry_run)}")
    for note in report.notes:
        print(note)
    if report.written:
        mb_s = report.bytes_copied / 1e6 / max(report.seconds, 1e-9)
        print(f"wrote {report.target} in {report.seconds:.2f} s ({mb_s:.0f} MB/s, {report.method}); "
              f"header and tensors verified{', data bytes verified' if report.data_verified else ''}")
    return PATCH_RULE_FAILED if report.failed else PATCH_OK


def _cmd_plan(args: argparse.Namespace) -> int:
    from app.gguf.gguf_file import GGUFError
    from app.gguf.model_facts import facts_from_header
    from app.machine.gpu import probe
    from app.machine.system_memory import system_memory
    from app.model.plan import GiB, goal_costs, goal_lines, make_plan, plan_for_file
    from app.net.remote_gguf import RemoteError, fetch_header

    request = plan_request(args)
    tuned = ""
    try:
        if args.model.startswith(("http://", "https://")):
            facts = facts_from_header(fetch_header(args.model))
            plan = make_plan(facts, probe(), system_memory(), request)
        else:
            planned = plan_for_file(args.model, probe(), system_memory(), request, use_tune=not args.vram_gb)
            facts, plan, tuned = planned.facts, planned.plan, planned.tuned
    except (GGUFError, RemoteError, OSError, KeyError, ValueError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return 2
    print(f"{facts.name or args.model} ({facts.arch}, {facts.weights_bytes / GiB:.2f} GiB of weights, "
          f"{len(facts.blocks)} blocks, {facts.n_ctx_train:,}-token window)")
    for line in plan.lines():
        print(line)
    for line in goal_lines(goal_costs(facts, probe(), system_memory(), request)):
        print(line)
    if tuned:
        print(tuned)
    return 0 if plan.fits else 1


# Exit codes of `hub` (README).
HUB_OK, HUB_NOTHING_FITS, HUB_BAD_INPUT, HUB_UNREACHABLE = 0, 1, 2, 3


def _hub_error_code(exc: HubError) -> int:
    return HUB_UNREACHABLE if exc.kind in ("offline", "rate-limited", "error") else HUB_BAD_INPUT


def _cmd_hub_search(args: argparse.Namespace) -> int:
    from app.fetch.hub import Hub, HubError

    try:
        found = Hub().search(args.query, limit=args.limit)
    except HubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return _hub_error_code(exc)
    if not found:
        print(f"no GGUF models match {args.query!r}")
        return HUB_OK
    print(f"{'repo':<56} {'downloads':>10} {'likes':>6}  {'licence':<14} {'updated':<10}")
    for m in found:
        updated = m.last_modified.strftime("%Y-%m-%d") if m.last_modified else "?"
        gated = "  (gated)" if m.gated else ""
        print(f"{m.repo_id:<56} {m.downloads:>10,} {m.likes:>6,}  {m.license[:14]:<14} {updated:<10}{gated}")
    return HUB_OK


def plan_request(args: argparse.Namespace) -> PlanRequest:
    from app.model.plan import GiB, PlanRequest

    return PlanRequest(n_ctx=getattr(args, "ctx", None),
                       vram_bytes=int(args.vram_gb * GiB) if getattr(args, "vram_gb", None) else None,
                       gpu_index=getattr(args, "gpu", None))


def _cmd_hub_files(args: argparse.Namespace) -> int:
    from app.fetch.hub import Hub, HubError, plan_files
    from app.machine.gpu import probe
    from app.machine.system_memory import system_memory

    try:
        listing = Hub().listing(args.repo)
    except HubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return _hub_error_code(exc)
    gated = " · gated: accept the licence on the model page and set a token" if listing.gated else ""
    print(f"{listing.repo_id} · licence {listing.license or '?'}{gated}")
    plans = None
    if args.plan and listing.models:
        plans = plan_files(listing.repo_id, listing.models, probe(), system_memory(), plan_request(args))
    for i, m in enumerate(listing.models):
        parts = f" ({len(m.parts)} parts)" if len(m.parts) > 1 else ""
        missing = f" MISSING {m.missing_parts} part(s)" if m.missing_parts > 0 else ""
        line = f"  {m.name:<60} {m.quant or '?':<11} {m.size / 1e9:7.2f} GB{parts}{missing}"
        if plans:
            p = plans[i]
            mark = "★ " if p.recommended else "  "
            line = f"{mark}{line.strip()}\n      {p.summary()}"
            line += f"\n      recommended: {p.why}" if p.recommended else ""
        print(line)
    for title, files in (("vision projectors (mmproj), not models", listing.mmproj), ("other files", listing.other)):
        if files:
            print(f"{title}: " + ", ".join(f.path for f in files))
    if plans is not None and not any(p.recommended for p in plans):
        print("nothing in this repo fits this machine")
        return HUB_NOTHING_FITS
    return HUB_OK


def _hub_entry(spec: str) -> CatalogEntry:
    """A catalog entry for `hub:REPO[:FILE_OR_QUANT]`: the file named, else the one recommended here."""
    from app.fetch.catalog import entry_for_hub
    from app.fetch.hub import Hub, parse_hub_spec, pick, plan_files
    from app.machine.gpu import probe
    from app.machine.system_memory import system_memory

    repo, choice = parse_hub_spec(spec)
    listing = Hub().listing(repo)
    plans = None if choice else plan_files(repo, listing.models, probe(), system_memory())
    model = pick(listing, choice, plans)
    return entry_for_hub(repo, model)


def _cmd_setup(args: argparse.Namespace) -> int:
    import time

    from app.fetch.catalog import CatalogError, entry_for_local_file, find
    from app.fetch.hub import HubError
    from app.fetch.setup_pipeline import SetupError, SetupPipeline
    from app.machine.gpu import probe
    from app.net.download import Downloader

    try:
        if args.model.startswith("hub:"):
            entry = _hub_entry(args.model)
        elif args.model.endswith(".gguf"):
            entry = entry_for_local_file(args.model)
        else:
            entry = find(args.model)
    except (CatalogError, HubError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    pipeline = SetupPipeline(entry, probe(), url=args.url, downloader=Downloader(allow_http=args.allow_http))
    last_t, last_step = 0.0, ""

    def report(step: str, fraction: float | None, text: str) -> None:
        nonlocal last_t, last_step
        now = time.monotonic()
        final = fraction == 1.0
        if not final and step == last_step and now - last_t < 2.0:
            return
        last_t, last_step = now, step
        pct = f"{fraction:6.1%}" if fraction is not None else "   ...  "
        print(f"[{step:<9}] {'done  ' if final else pct} {text}", flush=True)

    try:
        state = pipeline.run(report)
    except KeyboardInterrupt:
        pipeline.cancel()
        print("cancelled; run the same command again to continue", file=sys.stderr)
        return 130
    except SetupError as exc:
        print(f"error in step {exc.step}: {exc}", file=sys.stderr)
        return 1
    print(f"ready: {state.final_path}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    """Measure settings on this machine; print the sweep and the chosen one (used by the next load)."""
    from app.gguf.gguf_file import GGUFError
    from app.machine.gpu import probe
    from app.machine.llama_backend import build_info
    from app.machine.system_memory import system_memory
    from app.machine.tune import GOALS, TuneCancelled, machine_identity, table, tune
    from app.model.plan import plan_for_file

    if args.goal not in GOALS:
        print(f"error: --goal must be one of {', '.join(GOALS)}", file=sys.stderr)
        return 2
    gpus = probe()
    try:
        planned = plan_for_file(args.model, gpus, system_memory(), plan_request(args), use_tune=False)
    except (GGUFError, OSError, KeyError, ValueError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return 2
    facts, plan = planned.facts, planned.plan
    if not plan.fits:
        print(f"error: the model does not fit this machine: {plan.reason}", file=sys.stderr)
        return 1
    gpu, build = machine_identity(gpus, build_info())
    print(f"{plan.reason}\ntuning for '{args.goal}' within {args.budget_s:.0f} s on {gpu} ({build})", flush=True)

    def report(step: str, fraction: float | None, text: str) -> None:
        print(f"  [{(fraction or 0):4.0%}] {text}", flush=True)

    try:
        result = tune(args.model, planned.settings, expert_blocks=facts.expert_blocks, on_gpu=plan.device == "gpu",
                      gpu=gpu, build=build, goal=args.goal, budget_s=args.budget_s, report=report,
                      n_ctx=min(plan.n_ctx, args.tune_ctx))
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return 130
    except TuneCancelled:
        return 130
    print(table(result))
    if result.trials and all(t.error is not None for t in result.trials):
        print(f"error: every trial failed ({result.trials[0].error}); nothing was tuned", file=sys.stderr)
        return 1
    return 0


def _cmd_gpu_runtime(args: argparse.Namespace) -> int:
    """Whether CUDA can run here, and (install) fetch the GPU runtime the CUDA build needs."""
    from app.machine import gpu_runtime
    from app.machine.gpu import probe
    from app.machine.llama_backend import build_info

    if args.action == "status":
        try:
            build = build_info()
        except Exception as exc:  # reported as what it is: llama.cpp itself did not load
            print(f"llama.cpp could not be loaded: {exc}", file=sys.stderr)
            return 1
        ready = gpu_runtime.readiness(probe(), build)
        found = gpu_runtime.find_libs()
        print(ready.text)
        for name, path in found.items():
            print(f"  {name}: {path}")
        return 0 if ready.level in ("ok", "info") else 1
    last = {"t": 0.0}

    def report(step: str, fraction: float | None, text: str) -> None:
        import time

        now = time.monotonic()
        if step != "download" or fraction == 1.0 or now - last["t"] > 2:
            last["t"] = now
            pct = f"{fraction:6.1%}" if fraction is not None and fraction >= 0 else "   ... "
            print(f"[{step:<8}] {pct} {text}", flush=True)

    try:
        path = gpu_runtime.install(report)
    except KeyboardInterrupt:
        print("cancelled; the download resumes next time", file=sys.stderr)
        return 130
    except Exception as exc:  # a message a user can act on (index unreachable, hash mismatch, disk)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"GPU runtime in {path}; restart the app to use the GPU")
    return 0


def _cmd_bench_scenarios(args: argparse.Namespace) -> int:
    from app.bench.scenarios import load_scenarios, run_all, save_results, table
    from app.engine.local import Engine, EngineError
    from app.gguf.gguf_file import GGUFError
    from app.machine.gpu import probe
    from app.machine.system_memory import system_memory
    from app.model.plan import PlanRequest, plan_for_file

    scenarios = load_scenarios()
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.id for s in scenarios}
        if unknown:
            print(f"error: unknown scenario(s) {', '.join(sorted(unknown))}; known: "
                  f"{', '.join(s.id for s in scenarios)}", file=sys.stderr)
            return 2
        scenarios = [s for s in scenarios if s.id in wanted]
    gpus = probe()
    try:
        planned = plan_for_file(args.model, gpus, system_memory(), PlanRequest(n_ctx=args.ctx))
    except (GGUFError, OSError, KeyError, ValueError) as exc:
        print(f"error: {in_words(exc)}", file=sys.stderr)
        return 2
    plan = planned.plan
    print(plan.reason + (f" ({planned.tuned})" if planned.tuned else ""), flush=True)
    engine = Engine()
    try:
        info = engine.load(args.model, planned.settings)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    def progress(i: int, n: int, result: Result | None) -> None:
        if result is not None:
            print(f"  [{i}/{n}] {result.title}: {'PASS' if result.passed else 'fail'} ({result.seconds:.1f} s)",
                  flush=True)

    results = run_all(engine, scenarios, progress=progress)
    engine.unload()
    print(table(results))
    path = save_results(results, model=info.name, plan=plan.reason, gpu=gpus.summary())
    print(f"saved {path}")
    return 0


def parse_engine_spec(text: str, n_ctx: int | None = None) -> EngineSpec:
    """A compare operand: a .gguf path, `endpoint:NAME` (added in the app), or `URL[#model]`."""
    from pathlib import Path

    from app.bench.compare import EngineSpec
    from app.engine.endpoints import load_endpoints
    from app.engine.remote import Endpoint

    if text.startswith("endpoint:"):
        name = text.split(":", 1)[1]
        for e in load_endpoints():
            if e.name == name:
                return EngineSpec(name, endpoint=e)
        raise ValueError(f"no endpoint named {name!r} (add it on the Engines page)")
    if text.startswith(("http://", "https://")):
        url, _, model = text.partition("#")
        return EngineSpec(text, endpoint=Endpoint(url, url, model))
    if not Path(text).is_file():
        raise ValueError(f"{text}: not a GGUF file, an endpoint:NAME or a URL")
    return EngineSpec(Path(text).stem, path=text, n_ctx=n_ctx)


def _cmd_compare(args: argparse.Namespace) -> int:
    from app.bench.compare import compare, save_markdown, to_markdown
    from app.bench.scenarios import load_scenarios
    from app.engine.local import SamplingParams

    try:
        specs = [parse_engine_spec(args.a, args.ctx), parse_engine_spec(args.b, args.ctx)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.scenarios:
        scenarios = load_scenarios()
        if args.only:
            scenarios = [s for s in scenarios if s.id in set(args.only.split(","))]
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
    return 1 if any(s.error for s in sides) else 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """The local OpenAI-compatible server without the window, until Ctrl-C or SIGTERM."""
    from app.serve.headless import serve_model

    return serve_model(args.model, host=args.host, port=args.port, ctx=args.ctx, parallel=args.parallel,
                       speculative=args.speculative, api_key=args.api_key or os.environ.get("CLOVER_API_KEY"),
                       say=lambda line: print(line, flush=True))


def _cmd_mcp(args: argparse.Namespace) -> int:
    from app.chat.mcp_commands import run

    return run(args, sys.stdout, sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m app",
        description=f"{APP_NAME} {__version__}: run Clover-35B-A3B locally. Without a command, opens the window.",
    )
    parser.add_argument("--version", action="version", version=f"{APP_NAME} {__version__}")
    parser.add_argument("--no-crash-dialog", action="store_true",
                        help="log an unexpected error instead of showing a dialog (CI, kiosks)")
    parser.add_argument("--self-test", nargs="?", const="", metavar="MODEL",
                        help="check this installation (window, llama.cpp, and decoding MODEL if given), then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gui = sub.add_parser("gui", help="open the window (the default)")
    gui.add_argument("qt_args", nargs=argparse.REMAINDER, help="arguments passed on to Qt")
    gui.set_defaults(func=_cmd_gui)

    doctor = sub.add_parser("doctor", help="print Python, Qt, llama.cpp build, GPU (NVML) and folder facts")
    doctor.set_defaults(func=_cmd_doctor)

    patch = sub.add_parser(
        "patch", help="fix a GGUF file's metadata for upstream llama.cpp (the Clover dialect)",
        description="Write a patched copy of SOURCE: new header, every tensor byte copied unchanged, verified, "
                    "renamed into place atomically. The source is never modified. Exit codes: 0 patched or "
                    "nothing needed, 1 a rule cannot apply, 2 bad input, 3 verification failed, 130 cancelled.")
    patch.add_argument("source", help="the GGUF file to patch")
    patch.add_argument("target", nargs="?", help="where to write (default: SOURCE_STEM.patched.gguf beside it)")
    patch.add_argument("--profile", default="clover", help="patch profile name or JSON file (default: clover)")
    patch.add_argument("--dry-run", action="store_true", help="report what each rule would do; write nothing")
    patch.add_argument("--verify-data", action="store_true", help="also compare every data byte with the source")
    patch.add_argument("--force", action="store_true", help="replace TARGET if it exists")
    patch.add_argument("--in-place", action="store_true",
                       help="rewrite only SOURCE's header, with an undo journal; refused unless the data section "
                            "stays where it is (the new header fits the old padding)")
    patch.add_argument("--quiet", action="store_true", help="no progress display")
    patch.set_defaults(func=_cmd_patch)

    plan = sub.add_parser(
        "plan", help="how a model fits this machine's GPU: context, KV cache, experts kept in RAM",
        description="Reads only the model's header (a local file, or the first megabytes of a URL) and prints "
                    "the plan with a memory breakdown. Exit codes: 0 fits, 1 does not fit, 2 bad input.")
    plan.add_argument("model", metavar="MODEL_OR_URL", help="a GGUF file or an http(s) URL of one")
    plan.add_argument("--vram-gb", type=float, help="plan for a GPU with this many GiB free instead of this one")
    plan.add_argument("--ctx", type=int, help="context length wanted (default: the model's full window)")
    plan.add_argument("--gpu", type=int, help="plan for this GPU index (default: the one with most free memory)")
    plan.set_defaults(func=_cmd_plan)

    setup = sub.add_parser(
        "setup", help="one-click set-up of a catalog model: plan, download, verify, patch, preflight",
        description="Runs the same pipeline as the window's set-up. A stopped set-up continues where it stopped "
                    "when run again. Exit codes: 0 ready, 1 a step failed (it says which and why), 2 bad input, "
                    "130 cancelled.")
    setup.add_argument("model", help="a catalog id (smollm2-135m, clover-35b-a3b, qwen3.6-35b-a3b), a local .gguf, "
                                     "or hub:OWNER/NAME[:FILE_OR_QUANT] (without a file: the one recommended here)")
    setup.add_argument("--url", help="download from this URL instead of the catalog's")
    setup.add_argument("--allow-http", action="store_true", help="allow a plain http:// URL (not only https)")
    setup.set_defaults(func=_cmd_setup)

    hub = sub.add_parser("hub", help="find GGUF models on the Hugging Face Hub and plan each file before downloading",
                         description="Uses HF_ENDPOINT (default https://huggingface.co) and the token pasted in the "
                                     "app or HF_TOKEN. Exit codes: 0 ok, 1 nothing fits this machine (files --plan), "
                                     "2 bad input (no such repo, gated, ...), 3 the Hub cannot be reached.")
    hub_sub = hub.add_subparsers(dest="hub", metavar="ACTION", required=True)
    hub_search = hub_sub.add_parser("search", help="GGUF model repos matching QUERY, most downloaded first")
    hub_search.add_argument("query")
    hub_search.add_argument("--limit", type=int, default=20)
    hub_search.set_defaults(func=_cmd_hub_search)
    hub_files = hub_sub.add_parser("files", help="a repo's GGUF files grouped by quant, with sizes; --plan: how "
                                                 "each fits this machine, read from its header")
    hub_files.add_argument("repo", metavar="OWNER/NAME")
    hub_files.add_argument("--plan", action="store_true", help="read each file's header and plan it (the page's table)")
    hub_files.add_argument("--vram-gb", type=float, help="plan for a GPU with this many GiB free")
    hub_files.add_argument("--ctx", type=int, help="context length wanted (default: each model's full window)")
    hub_files.set_defaults(func=_cmd_hub_files)

    runtime = sub.add_parser("gpu-runtime", help="whether CUDA can run here; install the GPU runtime (cuBLAS) the "
                                                 "CUDA build needs, from the package registry",
                             description="status: CUDA in use, or why not. install: download NVIDIA's cuBLAS wheel "
                                         "(pinned with its SHA-256), resumable, and unpack it into the data folder. "
                                         "CLOVER_PYPI_INDEX sets the package index. Exit codes: 0 ok, 1 not usable "
                                         "or failed, 130 cancelled.")
    runtime.add_argument("action", choices=("status", "install"))
    runtime.set_defaults(func=_cmd_gpu_runtime)

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
    tune_.set_defaults(func=_cmd_tune)

    bench = sub.add_parser("bench", help="benchmarks of a model (the article's scenarios)")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    scen = bench_sub.add_parser("scenarios", help="drone dispatch, two tool calls, an HTML calculator, a needle, "
                                                  "a capital: pass/fail and timing, saved for comparison")
    scen.add_argument("model", help="a GGUF file")
    scen.add_argument("--ctx", type=int, help="context length (default: as planned for this machine)")
    scen.add_argument("--only", help="comma-separated scenario ids")
    scen.set_defaults(func=_cmd_bench_scenarios)

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
    cmp_.set_defaults(func=_cmd_compare)

    serve = sub.add_parser("serve", help="the OpenAI-compatible server for MODEL, without the window",
                           description="Plans and loads MODEL as the window does, prints 'listening on URL' when "
                                       "ready, and serves /v1/chat/completions and /v1/models until Ctrl-C or "
                                       "SIGTERM. Exit codes: 0 stopped, 1 the model does not fit or load or the "
                                       "port is taken, 2 bad input.")
    serve.add_argument("model", help="a GGUF file")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080; a taken port: the next free one)")
    serve.add_argument("--ctx", type=int, help="context per slot, in tokens (default: as planned for this machine)")
    serve.add_argument("--parallel", type=int, default=1,
                       help="requests written at once, each in its own slot of --ctx tokens (default 1)")
    serve.add_argument("--speculative", default="auto", help="auto (default), mtp, ngram or off")
    serve.add_argument("--api-key", help="clients must send it as a Bearer token (default: $CLOVER_API_KEY, else none)")
    serve.set_defaults(func=_cmd_serve)

    from app.chat.mcp_commands import EXIT_CODES, add_arguments

    mcp = sub.add_parser("mcp", help="MCP servers of mcp.json: list their tools, call one",
                         description=f"Servers from mcp.json in the config folder (or --config FILE). {EXIT_CODES}")
    add_arguments(mcp)
    mcp.set_defaults(func=_cmd_mcp)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test is not None:
        from app.ui.self_test import run_self_test

        return run_self_test(args.self_test or None)
    if args.command is None:
        args = parser.parse_args(["gui"])
    if args.command != "gui":  # the window sets up its own logging (and the crash dialog)
        from app.base.logs import setup_logging

        setup_logging()
        logging.getLogger("app.cli").info("python -m app %s", " ".join(sys.argv[1:] if argv is None else argv))
    try:
        return int(args.func(args))
    except Exception:
        logging.getLogger("app.cli").exception("%s failed", args.command)
        raise
