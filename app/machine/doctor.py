"""`python -m app doctor`: what this installation is and what it can use, for bug reports.

Each section is gathered separately, so one broken part (say, llama.cpp failing to load) is
reported as such and the rest still prints.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import sys
from collections.abc import Callable
from typing import TextIO

from app import __version__
from app.base.paths import app_dirs
from app.machine.snapshot import Machine

GiB = 1024**3


def _python() -> list[str]:
    return [f"Python {platform.python_version()} ({sys.executable})",
            f"platform {platform.platform()}, {os.cpu_count()} CPU threads"]


def _qt() -> list[str]:
    version = importlib.metadata.version("PySide6-Essentials")
    # The one Qt import outside app/ui: QtCore only, to report the Qt library actually loaded.
    from PySide6 import QtCore

    return [f"PySide6 {version}, Qt runtime {QtCore.qVersion()}"]


def _llama(machine: Machine) -> list[str]:
    from app.machine.llama_load import default_threads

    b = machine.require_build()
    lines = [f"llama-cpp-python {b.version}; backends: {', '.join(b.backends) or 'none'}; "
             f"CUDA compiled in: {'yes' if b.cuda else 'no'}; GPU offload: {'yes' if b.gpu_offload else 'no'}"]
    if b.load is not None and b.load.dynamic:
        how = ("forced by CLOVER_CPU_VARIANT" if b.load.cpu_forced else
               f"proved to run here in {b.load.cpu_probe_s:.1f} s just now" if b.load.cpu_probe_s else
               "proved to run here by an earlier start (once per CPU and llama.cpp build)")
        lines.append(f"CPU backend: the {b.load.cpu_variant or '?'} variant ({how}), the best of "
                     f"{len(b.load.cpu_variants)} shipped ({', '.join(b.load.cpu_variants)})")
        for variant, why in b.load.cpu_skipped:
            lines.append(f"CPU variant {variant} skipped: its kernels stopped with {why} here; running "
                         f"{b.load.cpu_variant}")
    if b.load is not None and b.load.cuda_module and not b.cuda_loaded:
        lines.append(f"CUDA compiled in: yes; no CUDA device: {b.load.cuda_error}")
    if b.load is not None and b.load.runtime:
        lines.append(f"GPU runtime loaded from: {', '.join(b.load.runtime)}")
    lines.append(f"inference runs on: {b.backend_choice()}")
    threads = default_threads()
    lines.append(f"threads: {threads.generation} for generation, {threads.batch} for prompts ({threads.why})")
    if b.setup:
        lines.append(f"set-up build: {b.setup.get('llama_flavor', '?')} "
                     f"(CMAKE_ARGS={b.setup.get('llama_cmake_args', '?')!r}; {b.setup.get('llama_reason', '')})")
    for d in b.devices:
        mem = f", {d.free_bytes / GiB:.1f} of {d.total_bytes / GiB:.1f} GiB free" if d.total_bytes else ""
        lines.append(f"device {d.name} [{d.kind}]: {d.description}{mem}")
    lines.append(f"system info: {b.system_info}")
    return lines


def _nvml(machine: Machine) -> list[str]:
    p = machine.gpus
    lines = [f"NVML: {p.status} - {p.message}"]
    if p.driver_version:
        lines.append(f"driver {p.driver_version}, CUDA driver API {p.cuda_driver_version}")
    for g in p.gpus:
        cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else "?"
        lines.append(f"GPU {g.index}: {g.name}, {g.total_gib:.1f} GiB total, {g.free_gib:.1f} GiB free, "
                     f"compute capability {cc}, MIG {'on' if g.mig_enabled else 'off'}")
        for pid, used, name in g.processes:
            lines.append(f"  held by pid {pid} {name}: {used / GiB:.2f} GiB" if used else f"  held by pid {pid} {name}")
    from app.machine.gpu_runtime import readiness

    lines.append(f"CUDA here: {readiness(p, machine.build).text}")  # a failing build: said in the llama.cpp section
    return lines


def _dirs() -> list[str]:
    from app.base.logs import log_file

    lines = [f"log     {log_file()}"]
    for label, path in app_dirs().all().items():
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        free = shutil.disk_usage(existing).free / GiB
        lines.append(f"{label:<7} {path}  ({free:.1f} GiB free on its disk)")
    return lines


SECTIONS: list[tuple[str, Callable[[Machine], list[str]]]] = [
    ("Python", lambda _: _python()),
    ("Qt", lambda _: _qt()),
    ("llama.cpp", _llama),
    ("NVIDIA GPU", _nvml),
    ("Folders", lambda _: _dirs()),
    ("Crashes", lambda _: _crashes()),
    ("Speculative decoding", lambda _: _drafting()),
    ("Reproducible replies", lambda _: _reproducible()),
]


def _drafting() -> list[str]:
    from app.machine.drafting_note import read_note

    lines = ["auto (the default) measures this machine's batch costs at each load and drafts only where a draft "
             "pays; `python -m app tune` measures it on and off"]
    note = read_note()
    lines.append(note.sentence() if note is not None else "no model loaded yet")
    return lines


def _reproducible() -> list[str]:
    """The setting, what it does, and whether the last load had it (its drafting note says so)."""
    from app.base.settings import Settings
    from app.machine.drafting_note import read_note

    on = Settings.load().get("engine.reproducible")
    note = read_note()
    last = "no model loaded yet" if note is None else (
        f"last load ({note.model}): {'on' if note.chosen.startswith('off: reproducible') else 'off'}")
    return [f"{'on' if on else 'off'} in the window's settings (engine.reproducible); serve: --reproducible",
            "a reply at temperature 0 is the same whatever runs beside it or ran before: each slot its own KV "
            "cells (n_ctx x slots, counted by the plan), a prompt read in steps of its own, no flash attention "
            "on the CPU, no speculative decoding", last]


def _crashes() -> list[str]:
    from app.base.crash_trail import last_crash, runs_dir

    crash = last_crash()
    if crash is None:
        return [f"none recorded (a run that dies in native code leaves its trail in {runs_dir()})"]
    return [crash.sentence(), *(f"  at {frame}" for frame in crash.stack[:8])]


def report(out: TextIO) -> int:
    """Print every section; return the number of sections that failed."""
    failures = 0
    print(f"Clover Launcher {__version__}", file=out)
    machine = Machine.read()  # the GPUs, the RAM and (on first use) the llama.cpp build, read once
    for title, gather in SECTIONS:
        print(f"\n[{title}]", file=out)
        try:
            lines = gather(machine)
        except Exception as exc:  # report and go on: doctor exists for broken installations
            failures += 1
            lines = [f"FAILED: {type(exc).__name__}: {exc}"]
        for line in lines:
            print(f"  {line}", file=out)
    return failures
