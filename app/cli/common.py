"""What every command shares: exit codes, errors in words, the plan request made from the flags. No Qt."""

from __future__ import annotations

import argparse
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.model.plan import PlanRequest

Commands = argparse._SubParsersAction  # what build_parser hands each command's register_*()


class ExitCode(IntEnum):
    """The exit codes most commands share (each command's description lists its own; README)."""

    OK = 0
    FAILED = 1  # the command ran and failed: a step, a load, every trial; or the model does not fit
    BAD_INPUT = 2  # usage error, a file or name that is not what it should be
    CANCELLED = 130  # Ctrl-C


class PatchExit(IntEnum):
    """Exit codes of `patch` (README)."""

    OK = 0  # patched, or nothing needed (the file already matches upstream)
    RULE_FAILED = 1  # a rule cannot apply: nothing written
    BAD_INPUT = 2  # usage error, unreadable or malformed GGUF, unknown profile, target exists
    VERIFY_FAILED = 3  # the written file did not verify: nothing kept
    CANCELLED = 130


class HubExit(IntEnum):
    """Exit codes of `hub` (README)."""

    OK = 0
    NOTHING_FITS = 1  # files --plan: nothing in the repo fits this machine
    BAD_INPUT = 2  # no such repo, gated, ...
    UNREACHABLE = 3  # offline, rate-limited, the Hub answered with an error


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
