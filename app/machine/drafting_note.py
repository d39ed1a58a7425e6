"""What the last model load chose for speculative decoding, kept for `python -m app doctor`. No Qt.

Under "auto" every load measures this machine's batch costs and drafts only where a draft pays
(app/engine/drafting.py, `auto_drafting`); the load line says what it chose. The engine writes that
sentence here after each load, and doctor, which loads no model, reports it: on a machine where
drafting costs more than it gains, "off on this machine: ..." is one command away for a bug report.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from app.base.paths import app_dirs


@dataclass(frozen=True)
class DraftingNote:
    model: str  # the file's name
    setting: str  # the load's speculative setting: auto, mtp, ngram or off
    chosen: str  # what the load drafts with, in words (ModelInfo.drafting)
    when: float  # seconds since the epoch

    def sentence(self) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.when))
        return f"last load ({self.model}, {stamp}, speculative {self.setting}): {self.chosen}"


def note_path() -> Path:
    return app_dirs().cache / "drafting.json"


def write_note(model: str, setting: str, chosen: str) -> None:
    """Keep what a load chose (a failure to write is not the load's: ignored)."""
    path = note_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"model": model, "setting": setting, "chosen": chosen, "when": time.time()}))
        os.replace(tmp, path)
    except OSError:
        pass


def read_note() -> DraftingNote | None:
    try:
        data = json.loads(note_path().read_text())
        return DraftingNote(str(data["model"]), str(data["setting"]), str(data["chosen"]), float(data["when"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None
