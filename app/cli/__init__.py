"""The `cli` floor, the roof: the command line, `python -m app [COMMAND]`. Without a command it opens
the window; with `--self-test [MODEL]` it checks the installation (app/ui/self_test.py) and exits.

Every command calls the same core functions that the window uses. A command lives in one module of
this package with its parser (`register_NAME(sub)`) and its handler (`run_NAME(args)`); `build_parser`
registers them in the order `--help` lists them. What they share is in `common`:
- every handler returns an `ExitCode` (app/base/exit_codes.py, so that `serve` in app.serve and `mcp`
  in app.chat return the same enum), or `patch`'s and `hub`'s own `PatchExit`/`HubExit`;
- a command that shows progress prints it through one `ProgressPrinter`;
- a command that plans reads the machine once (`Machine.read()`, app/machine/snapshot.py) and passes
  that snapshot down.
"""

from __future__ import annotations

import argparse
import logging
import sys

from app import APP_NAME, __version__
from app.cli import app_commands, bench_commands, hub_commands, model_commands, patch_command, serve_commands
from app.cli.common import ExitCode, HubExit, PatchExit, in_words, plan_request

__all__ = ["ExitCode", "HubExit", "PatchExit", "build_parser", "in_words", "main", "plan_request"]

REGISTER = (app_commands.register_gui, app_commands.register_doctor, patch_command.register_patch,
            model_commands.register_plan, model_commands.register_setup, hub_commands.register_hub,
            app_commands.register_gpu_runtime, model_commands.register_tune, bench_commands.register_bench,
            bench_commands.register_compare, serve_commands.register_serve, serve_commands.register_mcp)


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

    for register in REGISTER:
        register(sub)
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
    # a run that died in native code left its trail: say what crashed (the window shows it on screen),
    # and act on it before anything loads llama.cpp; then this run leaves its own trail
    from app.base import crash_trail
    from app.machine.crash_effects import previous_crashes

    for line in previous_crashes():
        if args.command != "gui":
            print(f"note: {line}", file=sys.stderr, flush=True)
    crash_trail.begin(args.command)
    try:
        return int(args.func(args))
    except Exception:
        logging.getLogger("app.cli").exception("%s failed", args.command)
        raise
