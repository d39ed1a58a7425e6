"""What a crash of an earlier run changes, and the words for it. No Qt.

app/base/crash_trail.py finds the runs that died; this module acts on them once, at the next start
of the window or any command: a SIGILL while a CPU variant of llama.cpp was in use rules that
variant out for this CPU and build (the next load proves the next best, app/machine/cpu_probe.py),
and the report says so. Other crashes change no setting; the report says where they happened.
"""

from __future__ import annotations

import contextlib
import logging

from app.base import crash_trail
from app.machine.llama_backend import _cpu_modules, variant_of

log = logging.getLogger(__name__)


def apply(crash: crash_trail.Crash) -> bool:
    """Change what the crash points to, and write it into `crash.effects`; whether a setting changed
    (then a second try runs otherwise: app/engine/hosted.py loads once more)."""
    variant = crash.notes.get("cpu_variant", "")
    if crash.signal == "SIGILL" and variant:
        modules = []
        with contextlib.suppress(ImportError, OSError):
            modules = _cpu_modules()
        if any(variant_of(m) == variant for m in modules):
            from app.machine.cpu_probe import rule_out

            rule_out(variant, modules, "SIGILL")
            crash.effects.append(f"The {variant} CPU variant is skipped from now on: the next load proves "
                                 "the next best one.")
            return True
    crash.effects.append("No setting was changed because of it; the log folder's runs/last-crash.json "
                         "holds its stack.")
    return False


_REPORTED: list[str] = []


def previous_crashes() -> list[str]:
    """The crashes of earlier runs, each acted on and put in one paragraph (empty: none); once per
    process (`reported()` gives them again, to the window)."""
    lines = _REPORTED
    for crash in crash_trail.collect():
        apply(crash)
        crash_trail.keep_last(crash)
        log.warning("earlier run crashed: %s | stack: %s", crash.sentence(), " <- ".join(crash.stack))
        lines.append(crash.sentence())
    return lines


def reported() -> list[str]:
    """What `previous_crashes` found in this process."""
    return list(_REPORTED)
