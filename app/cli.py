"""The command line: `python -m app [COMMAND]`. Without a command it opens the window.

Every command calls the same core functions that the window uses; later commands (patch, plan,
setup, bench, ...) are added here as subparsers.
"""

from __future__ import annotations

import argparse
import sys

from app import APP_NAME, __version__


def _cmd_gui(args: argparse.Namespace) -> int:
    from app.ui.application import run_gui  # Qt is imported only when a window is wanted

    return run_gui(sys.argv[:1] + list(args.qt_args))


def _cmd_doctor(args: argparse.Namespace) -> int:
    from app.doctor import report

    failures = report(sys.stdout)
    if failures:
        print(f"\n{failures} section(s) could not be read; see FAILED above.", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m app",
        description=f"{APP_NAME} {__version__}: run Clover-35B-A3B locally. Without a command, opens the window.",
    )
    parser.add_argument("--version", action="version", version=f"{APP_NAME} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gui = sub.add_parser("gui", help="open the window (the default)")
    gui.add_argument("qt_args", nargs=argparse.REMAINDER, help="arguments passed on to Qt")
    gui.set_defaults(func=_cmd_gui)

    doctor = sub.add_parser("doctor", help="print Python, Qt, llama.cpp build, GPU (NVML) and folder facts")
    doctor.set_defaults(func=_cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is None:
        args = parser.parse_args(["gui"])
    return args.func(args)
