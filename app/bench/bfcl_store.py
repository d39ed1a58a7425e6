"""BFCL runs kept on disk, compared and exported. No Qt.

A run is a JSON Lines file in `<data>/bench/bfcl/`: its first line says what ran (the model, where it
came from, the plan and load settings, thinking, the mode, the device, the date, the dataset), then a
line per case as it is judged, and a last line when the run ended (or was stopped). A run that was
stopped, or whose process died, keeps every case it judged: a line is flushed as soon as its case is.
"""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.base.paths import app_dirs
from app.bench.bfcl_cases import CATEGORIES
from app.bench.bfcl_run import CaseRecord, Summary, summarize


def runs_folder() -> Path:
    return app_dirs().data / "bench" / "bfcl"


@dataclass
class RunInfo:
    label: str  # the model as the user knows it (a file's name, an endpoint's)
    model: str  # the loaded model's own name
    source: str  # the file's path or the endpoint's URL
    kind: str  # "local" or "remote"
    thinking: bool
    mode: str  # "fc" or "prompt"
    quick: bool
    categories: list[str]
    planned_cases: int
    dataset: str  # e.g. "BFCL v4 (bfcl-eval 2026.3.23)"
    device: str  # the GPU, or the CPU
    plan: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # the load settings that shape replies
    max_tokens: int = 0
    temperature: float = 0.0
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    app_version: str = ""

    def title(self) -> str:
        """The run in a column's head: the model, thinking, the mode where it is not FC."""
        words = [self.label, "thinking" if self.thinking else "no thinking"]
        if self.mode != "fc":
            words.append(f"{self.mode} mode")
        if self.quick:
            words.append("quick")
        return ", ".join(words)


@dataclass
class Run:
    info: RunInfo
    records: list[CaseRecord]
    path: Path
    ended: dict[str, Any] | None = None  # {"seconds": ..., "stopped": bool}; None: the run did not end

    @property
    def summary(self) -> Summary:
        return summarize(self.records)

    @property
    def state(self) -> str:
        if self.ended is None:
            return "cut short"
        if self.ended.get("stopped"):
            return "stopped"
        return "complete" if len(self.records) >= self.info.planned_cases else "partial"


class RunWriter:
    """Appends a run's lines as they come, each flushed to disk."""

    def __init__(self, info: RunInfo, folder: Path | None = None) -> None:
        folder = folder or runs_folder()
        folder.mkdir(parents=True, exist_ok=True)
        stem = time.strftime("%Y%m%d-%H%M%S")
        path = folder / f"{stem}.jsonl"
        n = 1
        while path.exists():
            n += 1
            path = folder / f"{stem}-{n}.jsonl"
        self.path = path
        self.started = time.monotonic()
        self._file = open(path, "x", encoding="utf-8")  # noqa: SIM115 (open for the run's length)
        self._line({"run": asdict(info)})

    def _line(self, data: dict[str, Any]) -> None:
        self._file.write(json.dumps(data, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def add(self, record: CaseRecord) -> None:
        self._line({"case": record.as_json()})

    def close(self, stopped: bool = False) -> None:
        if self._file.closed:
            return
        self._line({"end": {"seconds": round(time.monotonic() - self.started, 1), "stopped": stopped}})
        self._file.close()


def load_run(path: str | Path) -> Run:
    """A kept run; a last line cut short by a crash is left out, any other bad line is a ValueError."""
    path = Path(path)
    info: RunInfo | None = None
    records: list[CaseRecord] = []
    ended = None
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            if n == len(lines):
                break  # the line being written when the process died
            raise ValueError(f"{path.name}, line {n}: not JSON") from None
        if "run" in data:
            known = set(RunInfo.__dataclass_fields__)
            info = RunInfo(**{k: v for k, v in data["run"].items() if k in known})
        elif "case" in data:
            records.append(CaseRecord.from_json(data["case"]))
        elif "end" in data:
            ended = data["end"]
    if info is None:
        raise ValueError(f"{path.name}: not a BFCL run (no header line)")
    return Run(info, records, path, ended)


def list_runs(folder: Path | None = None) -> list[Run]:
    """Every kept run, newest first; files that cannot be read are passed over."""
    folder = folder or runs_folder()
    runs = []
    for path in sorted(folder.glob("*.jsonl"), key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True):
        try:
            runs.append(load_run(path))
        except (OSError, ValueError, TypeError):
            continue
    return runs


# ----------------------------------------------------------------------------- comparing and exporting


def percent(value: float | None) -> str:
    return "N/A" if value is None else f"{100 * value:.1f}"


def comparison(runs: list[Run]) -> list[tuple[str, list[str]]]:
    """Rows of a side-by-side table: the leaderboard's columns, then each category (correct/total and %),
    a column a run."""
    sums = [r.summary for r in runs]
    rows = [(name, [percent(s.columns()[name]) for s in sums]) for name in sums[0].columns()] if sums else []
    for category in CATEGORIES:
        cells = []
        for s in sums:
            score = s.categories.get(category)
            cells.append("—" if score is None else f"{100 * score.accuracy:.1f} ({score.correct}/{score.total})")
        if any(c != "—" for c in cells):
            rows.append((category, cells))
    rows.append(("Cases", [f"{s.correct}/{s.total}" for s in sums]))
    return rows


def table_text(runs: list[Run]) -> str:
    """The comparison as plain text, for the terminal."""
    heads = [r.info.title() for r in runs]
    rows = comparison(runs)
    width = max([len(n) for n, _ in rows] + [8])
    cols = [max(len(h), *(len(cells[i]) for _, cells in rows)) for i, h in enumerate(heads)]
    out = [" " * width + "  " + "  ".join(h.rjust(w) for h, w in zip(heads, cols, strict=True))]
    for name, cells in rows:
        out.append(name.ljust(width) + "  " + "  ".join(c.rjust(w) for c, w in zip(cells, cols, strict=True)))
    return "\n".join(out)


CSV_COLUMNS = ("run", "model", "thinking", "mode", "device", "date", "id", "category", "valid", "reason",
               "error_type", "calls", "raw", "seconds", "prompt_tokens", "generated_tokens")


def write_csv(runs: list[Run], path: str | Path) -> Path:
    """Every case of every run, a row each (spreadsheets open it as it is)."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for run in runs:
            i = run.info
            for r in run.records:
                w.writerow([run.path.stem, i.label, "on" if i.thinking else "off", i.mode, i.device, i.date,
                            r.id, r.category, "yes" if r.valid else "no", r.reason, r.error_type,
                            json.dumps(r.calls, ensure_ascii=False), r.raw, f"{r.seconds:.2f}", r.prompt_tokens,
                            r.generated_tokens])
    return path


def write_case_json(records: list[CaseRecord], path: str | Path) -> Path:
    """`--json FILE`: one record per case, `id`, `category`, `raw`, `calls`, `valid`, `reason`."""
    path = Path(path)
    data = [{"id": r.id, "category": r.category, "raw": r.raw, "calls": r.calls, "valid": r.valid,
             "reason": r.reason} for r in records]
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
