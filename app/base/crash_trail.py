"""A native crash never vanishes without a word: each run leaves a trail until it ends cleanly. No Qt.

llama.cpp runs in-process, so a SIGILL, SIGSEGV or abort inside it ends Python at once: no
exception, no log line, a window that is simply gone. `begin()` (called by the window and every
command at start) writes `runs/run-PID.json` in the logs folder (the command, when, and what the run
noted since: the CPU variant in use, say) and points `faulthandler` at `runs/run-PID.fault`, which
receives the signal and every thread's Python stack if the process dies that way. A clean exit
(even through an exception) removes both. So a trail left behind by a process that is gone is a
crash, and `collect()` at the next start turns it into a `Crash`: which command, the signal, where
(the innermost Python frame, e.g. `llama_decode` in llama_cpp/llama_cpp.py called from
app/engine/slots.py), and what was noted. The caller acts on it (a SIGILL in a CPU variant rules
that variant out: app/machine/crash_effects.py) and says it once; the report is kept as
`runs/last-crash.json` for doctor.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from app.base.paths import app_dirs

_state: dict[str, Any] = {}
_SIGNALS = {"Segmentation fault": "SIGSEGV", "Illegal instruction": "SIGILL", "Aborted": "SIGABRT",
            "Floating point exception": "SIGFPE", "Bus error": "SIGBUS"}


@dataclass
class Crash:
    command: str
    pid: int
    started: float
    signal: str  # "SIGILL", ... or "" when the process vanished without faulthandler's word (SIGKILL)
    where: str  # the innermost Python frame, "" when unknown
    stack: list[str] = field(default_factory=list)  # the crashing thread's frames, innermost first
    notes: dict[str, str] = field(default_factory=dict)
    effects: list[str] = field(default_factory=list)  # what was changed because of it, in words

    def sentence(self) -> str:
        """The report in words: "The last `serve` (pid 123, 14:02) stopped with SIGILL in llama_decode
        (llama_cpp/llama_cpp.py), called from app/engine/slots.py:201; CPU variant sapphirerapids.
        sapphirerapids is skipped from now on."""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started))
        how = f"stopped with {self.signal}" if self.signal else "stopped without a word (killed?)"
        text = f"The last `{self.command}` (pid {self.pid}, started {when}) {how}"
        if self.where:
            text += f" in {self.where}"
        noted = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in self.notes.items())
        text += f"; {noted}." if noted else "."
        for effect in self.effects:
            text += f" {effect}"
        return text


def runs_dir() -> Path:
    return app_dirs().logs / "runs"


def begin(command: str) -> None:
    """Start this process's trail (once; later calls only rename the command)."""
    if _state.get("pid") == os.getpid():
        _state["command"] = command
        _write()
        return
    folder = runs_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fault: IO[str] = open(folder / f"run-{os.getpid()}.fault", "w")  # noqa: SIM115 (open for the process's life)
    except OSError:
        return
    _state.update(pid=os.getpid(), command=command, started=time.time(), notes={}, fault=fault)
    faulthandler.enable(file=fault, all_threads=True)
    _write()
    atexit.register(end)


def note(key: str, value: object) -> None:
    """Remember a fact about this run for its crash report (the CPU variant, the model, ...)."""
    if _state.get("pid") != os.getpid():
        return
    _state["notes"][key] = str(value)
    _write()


def _write() -> None:
    path = runs_dir() / f"run-{_state['pid']}.json"
    data = {"command": _state["command"], "pid": _state["pid"], "started": _state["started"],
            "notes": _state["notes"], "argv": sys.argv[1:]}
    with contextlib.suppress(OSError):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)


def end() -> None:
    """A clean end: the trail goes (atexit calls it; so may a caller that stops early)."""
    if _state.get("pid") != os.getpid():
        return
    with contextlib.suppress(Exception):
        faulthandler.disable()
        _state["fault"].close()
    for suffix in (".json", ".fault"):
        with contextlib.suppress(OSError):
            (runs_dir() / f"run-{_state['pid']}{suffix}").unlink()
    _state.clear()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def parse_fault(text: str) -> tuple[str, str, list[str]]:
    """faulthandler's report: (signal, innermost frame in words, the crashing thread's frames)."""
    signal = next((name for words, name in _SIGNALS.items() if f"Fatal Python error: {words}" in text), "")
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
    block = next((b for b in blocks if b.startswith("Current thread")), blocks[1] if len(blocks) > 1 else "")
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', block)
    stack = [f"{_short(f)}:{line} in {fn}" for f, line, fn in frames]
    where = ""
    if frames:
        f, line, fn = frames[0]
        where = f"{fn} ({_short(f)}:{line})"
        caller = next((fr for fr in frames[1:] if "/app/" in fr[0].replace("\\", "/")), None)
        if caller and caller != frames[0]:
            where += f", called from {_short(caller[0])}:{caller[1]}"
    return signal, where, stack


def _short(path: str) -> str:
    """A frame's file as a reader knows it: `llama_cpp/llama_cpp.py`, `app/engine/slots.py`, `ctypes/__init__.py`."""
    p = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/", "/app/"):
        if marker in p:
            return ("app/" if marker == "/app/" else "") + p.split(marker, 1)[1]
    return re.split(r"/lib/python3\.\d+/", p, maxsplit=1)[-1]


def collect(pid: int | None = None) -> list[Crash]:
    """The trails of runs that are gone without a clean end, as crashes (oldest first); their files
    are removed. `pid`: only that run's (the window's engine host, app/engine/hosted.py)."""
    folder = runs_dir()
    crashes = []
    for meta in sorted(folder.glob("run-*.json" if pid is None else f"run-{pid}.json")):
        try:
            data = json.loads(meta.read_text())
            pid = int(data["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                meta.unlink()
            continue
        if _alive(pid):
            continue
        fault = meta.with_suffix(".fault")
        text = ""
        with contextlib.suppress(OSError):
            text = fault.read_text(errors="replace")
        signal, where, stack = parse_fault(text)
        crashes.append(Crash(str(data.get("command", "?")), pid, float(data.get("started", 0)), signal, where,
                             stack, {str(k): str(v) for k, v in dict(data.get("notes", {})).items()}))
        for f in (meta, fault):
            with contextlib.suppress(OSError):
                f.unlink()
    return sorted(crashes, key=lambda c: c.started)


def keep_last(crash: Crash) -> None:
    with contextlib.suppress(OSError):
        runs_dir().mkdir(parents=True, exist_ok=True)
        (runs_dir() / "last-crash.json").write_text(json.dumps(asdict(crash), indent=1))


def last_crash() -> Crash | None:
    """The newest crash reported so far (doctor shows it until a newer one replaces it)."""
    try:
        data = json.loads((runs_dir() / "last-crash.json").read_text())
        return Crash(**data)
    except (OSError, ValueError, TypeError):
        return None
