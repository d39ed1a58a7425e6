"""The models on this machine, as the window's model picker lists them: the GGUF files under the
models folder and the files loaded from elsewhere by hand, each with its size, when it was last
used and its plan for this machine in a few words. No Qt.

What the folder cannot tell (files loaded from elsewhere, when each was last used) is kept in
`local_models.json` in the data folder, written whole and replaced in one step. A split model is
listed once, by its first part, with the size of all its parts; a multimodal projector is not a
model and is left out. A remembered file that is gone is not listed (and is kept in the file, for a
disk that comes back).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.base.fileio import write_text_atomic
from app.base.paths import app_dirs

if TYPE_CHECKING:
    from app.machine.snapshot import Machine
    from app.model.plan import Plan

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class LocalModel:
    path: Path
    name: str  # the file name without .gguf (and without a split part's -00001-of-0000N)
    size: int  # bytes, every part of a split model
    last_used: float | None  # Unix time of the last load, None: never loaded here
    by_hand: bool  # opened from outside the models folder


def title(path: str | Path) -> str:
    """How the window names a model file: its file name without .gguf (and a split part's number)."""
    name = _SPLIT.sub(".gguf", Path(path).name)
    return name[:-5] if name.lower().endswith(".gguf") else name


def _parts(path: Path) -> list[Path]:
    m = _SPLIT.search(path.name)
    if m is None:
        return [path]
    stem, total = path.name[:m.start()], int(m.group(2))
    return [path.with_name(f"{stem}-{i:05d}-of-{total:05d}.gguf") for i in range(1, total + 1)]


def _is_model_file(path: Path) -> bool:
    m = _SPLIT.search(path.name)
    return path.suffix.lower() == ".gguf" and not path.name.lower().startswith("mmproj") and (
        m is None or int(m.group(1)) == 1)


class LocalModels:
    """The list and its memory (last used, opened by hand). `folder` and `state` default to the
    models folder and `local_models.json` in the data folder."""

    def __init__(self, folder: Path | None = None, state: Path | None = None) -> None:
        self.folder = folder or app_dirs().models
        self.state = state or app_dirs().data / "local_models.json"

    def _read(self) -> dict[str, float]:
        """{path: last used}; an unreadable file counts as empty (it only remembers)."""
        try:
            data = json.loads(self.state.read_text(encoding="utf-8"))
            return {str(p): float(t) for p, t in data.get("last_used", {}).items()}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}

    def used(self, path: str | Path, when: float | None = None) -> None:
        """A file was loaded: it is listed from now on, most recently used first."""
        known = self._read()
        known[str(Path(path).resolve())] = time.time() if when is None else when
        write_text_atomic(self.state, json.dumps({"last_used": known}, indent=2, sort_keys=True))

    def models(self) -> list[LocalModel]:
        """Every model: the most recently used first, then the others by name."""
        known = self._read()
        paths: dict[Path, bool] = {}
        if self.folder.is_dir():
            for p in self.folder.rglob("*"):
                if p.is_file() and _is_model_file(p):
                    paths[p.resolve()] = False
        for p in map(Path, known):
            if p not in paths and p.is_file():
                paths[p] = True
        out = [LocalModel(p, title(p), sum(q.stat().st_size for q in _parts(p) if q.is_file()),
                          known.get(str(p)), by_hand) for p, by_hand in paths.items()]
        return sorted(out, key=lambda m: (m.last_used is None, -(m.last_used or 0.0), m.name.lower()))


def plan_words(plan: Plan) -> str:
    """A plan in a few words, for a list row: "all on GPU · 32k context"."""
    if not plan.fits:
        return "does not fit this machine"
    if plan.device != "gpu":
        where = "on the CPU"
    elif plan.n_cpu_moe:
        where = f"{plan.n_cpu_moe} of {plan.n_expert_blocks} expert blocks in RAM"
    else:
        where = "all on GPU"
    ctx = plan.n_ctx / 1024
    return f"{where} · {ctx:.0f}k context" if ctx >= 1 else f"{where} · {plan.n_ctx} context"


def plan_summary(path: str | Path, machine: Machine) -> str:
    """The file planned for this machine, in a few words, or why it cannot be read."""
    from app.gguf.gguf_read import read_header
    from app.gguf.model_facts import facts_from_header
    from app.model.plan import make_plan

    try:
        facts = facts_from_header(read_header(path))
    except (OSError, ValueError, KeyError) as exc:  # GGUFError is a ValueError
        return f"cannot be read: {exc}"
    return plan_words(make_plan(facts, machine.gpus, machine.ram))


def size_words(n: int) -> str:
    """A file size as people read it: "98 MB", "4.6 GB"."""
    if n >= 10**9:
        return f"{n / 10**9:.1f} GB"
    return f"{max(n, 1) / 10**6:.0f} MB"


def when_words(when: float | None, now: float | None = None) -> str:
    """When a file was last used, in words: "never used", "just now", "3 h ago", "2 days ago"."""
    if when is None:
        return "never used"
    ago = max((now or time.time()) - when, 0.0)
    if ago < 60:
        return "used just now"
    if ago < 3600:
        return f"used {ago // 60:.0f} min ago"
    if ago < 86400:
        return f"used {ago // 3600:.0f} h ago"
    days = ago // 86400
    return "used yesterday" if days == 1 else f"used {days:.0f} days ago"
