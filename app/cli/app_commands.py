"""`gui`, `doctor` and `gpu-runtime`: the window, and what this machine can run. No Qt at import."""

from __future__ import annotations

import argparse
import sys

from app.cli.common import Commands, ExitCode, ProgressPrinter


def register_gui(sub: Commands) -> None:
    gui = sub.add_parser("gui", help="open the window (the default)")
    gui.add_argument("qt_args", nargs=argparse.REMAINDER, help="arguments passed on to Qt")
    gui.set_defaults(func=run_gui)


def run_gui(args: argparse.Namespace) -> int:
    from app.ui.application import run_gui  # Qt is imported only when a window is wanted

    return run_gui(sys.argv[:1] + list(args.qt_args), crash_dialog=not args.no_crash_dialog)


def register_doctor(sub: Commands) -> None:
    doctor = sub.add_parser("doctor", help="print Python, Qt, llama.cpp build, GPU (NVML) and folder facts")
    doctor.set_defaults(func=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    from app.machine.doctor import report

    failures = report(sys.stdout)
    if failures:
        print(f"\n{failures} section(s) could not be read; see FAILED above.", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK



def register_gpu_runtime(sub: Commands) -> None:
    runtime = sub.add_parser("gpu-runtime", help="whether CUDA can run here; install the GPU runtime (cuBLAS) the "
                                                 "CUDA build needs, from the package registry",
                             description="status: CUDA in use, or why not. install: download NVIDIA's cuBLAS wheel "
                                         "(pinned with its SHA-256), resumable, and unpack it into the data folder. "
                                         "CLOVER_PYPI_INDEX sets the package index. Exit codes: 0 ok, 1 not usable "
                                         "or failed, 130 cancelled.")
    runtime.add_argument("action", choices=("status", "install"))
    runtime.set_defaults(func=run_gpu_runtime)


def run_gpu_runtime(args: argparse.Namespace) -> int:
    """Whether CUDA can run here, and (install) fetch the GPU runtime the CUDA build needs."""
    from app.machine import gpu_runtime
    from app.machine.snapshot import Machine

    if args.action == "status":
        machine = Machine.read()
        try:
            build = machine.require_build()
        except Exception as exc:  # reported as what it is: llama.cpp itself did not load
            print(f"llama.cpp could not be loaded: {exc}", file=sys.stderr)
            return ExitCode.FAILED
        ready = gpu_runtime.readiness(machine.gpus, build)
        found = gpu_runtime.find_libs()
        print(ready.text)
        for name, path in found.items():
            print(f"  {name}: {path}")
        return ExitCode.OK if ready.level in ("ok", "info") else ExitCode.FAILED
    try:
        path = gpu_runtime.install(ProgressPrinter())
    except KeyboardInterrupt:
        print("cancelled; the download resumes next time", file=sys.stderr)
        return ExitCode.CANCELLED
    except Exception as exc:  # a message a user can act on (index unreachable, hash mismatch, disk)
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    print(f"GPU runtime in {path}; restart the app to use the GPU")
    return ExitCode.OK
