"""What every command shares: the exit codes (`ExitCode` from app/base/exit_codes.py, and `patch`'s and
`hub`'s own), the one progress printer, errors in words, the plan request made from the flags. No Qt."""

from __future__ import annotations

import argparse
import sys
import time
from enum import IntEnum
from typing import TYPE_CHECKING, TextIO

from app.base.exit_codes import ExitCode

__all__ = ["Commands", "ExitCode", "HubExit", "PatchExit", "ProgressPrinter", "in_words", "plan_request"]

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.model.plan import PlanRequest

Commands = argparse._SubParsersAction  # what build_parser hands each command's register_*()


class PatchExit(IntEnum):
    """Exit codes of `patch` (docs/command-line.md)."""

    OK = 0  # patched, or nothing needed (the file already matches upstream)
    RULE_FAILED = 1  # a rule cannot apply: nothing written
    BAD_INPUT = 2  # usage error, unreadable or malformed GGUF, unknown profile, target exists
    VERIFY_FAILED = 3  # the written file did not verify: nothing kept
    CANCELLED = 130


class HubExit(IntEnum):
    """Exit codes of `hub` (docs/command-line.md)."""

    OK = 0
    NOTHING_FITS = 1  # files --plan: nothing in the repo fits this machine
    BAD_INPUT = 2  # no such repo, gated, ...
    UNREACHABLE = 3  # offline, rate-limited, the Hub answered with an error


class ProgressPrinter:
    """The one way a command shows progress: `(step, fraction 0..1 or None, text)`, the callback the
    set-up pipeline, tune and the GPU-runtime install report through, printed as
    `[step     ]  42.0% text` (`done` at 1.0, `...` without a fraction). A step's percentages come at
    most every `every` seconds (a 20 GB download would print thousands of lines); its first update,
    its last, a new step and an update without a fraction always print. `overwrite` (a terminal)
    rewrites one line in place instead; `end()` finishes it."""

    def __init__(self, out: TextIO | None = None, *, every: float = 2.0, overwrite: bool = False) -> None:
        self.out, self.every, self.overwrite = out, every, overwrite
        self._last_t, self._last_step, self._open = 0.0, "", False

    def __call__(self, step: str, fraction: float | None, text: str) -> None:
        now = time.monotonic()
        final = fraction == 1.0
        if (fraction is not None and not final and step == self._last_step
                and now - self._last_t < self.every):
            return
        self._last_t, self._last_step = now, step
        pct = f"{fraction:6.1%}" if fraction is not None and fraction >= 0 else "   ...  "
        line = f"[{step:<9}] {'done  ' if final else pct} {text}"
        out = self.out or sys.stdout
        if self.overwrite:
            print(f"\r{line}", end="", file=out, flush=True)
            self._open = True
        else:
            print(line, file=out, flush=True)

    def bytes(self, step: str) -> Callable[[int, int], None]:
        """A `(done, total)` byte-count callback (a copy) reported as `step`."""
        return lambda done, total: self(step, done / total if total else None,
                                        f"{done / 1e9:.2f} / {total / 1e9:.2f} GB")

    def end(self) -> None:
        """Finish an overwritten line (nothing otherwise)."""
        if self._open:
            print(file=self.out or sys.stdout, flush=True)
            self._open = False


def in_words(exc: BaseException) -> str:
    """An error as a sentence: an OSError without its "[Errno N]" prefix, a KeyError without quotes."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)


def plan_request(args: argparse.Namespace) -> PlanRequest:
    from app.model.plan import GiB, PlanRequest

    return PlanRequest(n_ctx=getattr(args, "ctx", None),
                       vram_bytes=int(args.vram_gb * GiB) if getattr(args, "vram_gb", None) else None,
                       gpu_index=getattr(args, "gpu", None))
