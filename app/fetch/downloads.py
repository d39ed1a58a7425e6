"""Every download and set-up of the app in one list, whichever page started it. No Qt.

A job is a set-up (plan, download, verify, patch, preflight) or a plain file download: its stage,
bytes, speed, time left, state, and a failure said as one sentence with what to do. Pause stops it
and keeps the `.part` (app/net/part_file.py), so Resume asks only for the rest; Cancel stops it and
deletes the part. The unfinished ones are kept in a small record in the data folder, so the next
start can offer to resume them: a job's work is rebuilt there from its kind and key by the maker
its owner registered. Running a job on a thread is the caller's (the window runs it as an Op);
`run` does the job on the thread that calls it.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.base.fileio import write_text_atomic
from app.fetch.no_connection import error_chain, sentence, unreachable
from app.net.download import DiskFull, Downloader, DownloadError, HashMismatch, Progress

STAGES = ("plan", "download", "verify", "patch", "preflight", "ready")
ACTIVE = ("running", "paused", "failed")  # a job in these states is not finished with
RECORD_EVERY = 5.0  # seconds between records of a running job's bytes (state changes are recorded at once)
Work = Callable[["Control"], Any]


@dataclass
class Job:
    """One download or set-up as the list shows it. `key` is what its kind's maker needs to rebuild
    the work after a restart (a catalog entry's id and address; a URL and a target)."""

    id: str
    name: str
    kind: str
    key: dict[str, str]
    state: str = "paused"  # running, paused, failed, done or cancelled
    stage: str = "plan"
    steps: dict[str, tuple[float | None, str]] = field(default_factory=dict)  # stage -> (fraction, its line)
    done: int = 0
    total: int | None = None
    speed: float = 0.0  # bytes/s while bytes arrive
    eta: float | None = None  # seconds
    error: str = ""  # the failure as a sentence with what to do
    details: str = ""  # the technical words behind it
    note: str = ""  # a line about a stop that was not a failure (paused, cancelled, stopped at the last exit)
    result: Any = None
    exception: BaseException | None = field(default=None, repr=False)  # the failure as raised, for its page
    runs: int = 0  # how many times it was started (a view knows a run's end from the one before)
    work: Work | None = field(default=None, repr=False)
    pause_flag: threading.Event = field(default_factory=threading.Event, repr=False)
    cancel_flag: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "kind": self.kind, "key": self.key, "stage": self.stage,
                "done": self.done, "total": self.total, "state": self.state, "error": self.error}


class Control:
    """What a job's work is handed: where it says how far it is, and whether it should stop."""

    def __init__(self, downloads: Downloads, job: Job, interrupted: Callable[[], bool] | None) -> None:
        self._downloads, self._job, self._interrupted = downloads, job, interrupted

    def report(self, stage: str, fraction: float | None, text: str = "") -> None:
        job = self._job
        old = job.steps.get(stage, (None, ""))
        job.steps[stage] = (fraction, text or old[1])
        if stage != job.stage:
            job.stage, job.speed, job.eta = stage, 0.0, None
            self._downloads._save()
        self._downloads._changed(job)

    def transfer(self, done: int, total: int | None, speed: float, eta: float | None) -> None:
        job = self._job
        job.done, job.total, job.speed, job.eta = done, total, speed, eta
        self._downloads._changed(job, progress=True)

    def progress(self, p: Progress) -> None:
        self.transfer(p.done, p.total, p.speed, p.eta)

    def cancelled(self) -> bool:
        return self._job.cancel_flag.is_set()

    def paused(self) -> bool:
        return self._job.pause_flag.is_set() or (self._interrupted is not None and self._interrupted())


def explain(exc: BaseException, url: str | None = None, hub: str | None = None) -> tuple[str, str]:
    """(a sentence saying what went wrong and what to do, the technical detail) for a job's failure."""
    if unreachable(exc):
        said, detail = sentence(exc, url, hub)
        return f"{said} Resume once this machine is online: the download continues where it stopped.", detail
    text = str(exc) or type(exc).__name__
    http = next((e for e in error_chain(exc) if isinstance(e, urllib.error.HTTPError)), None)
    code = http.code if http is not None else _http_code(text)
    if isinstance(exc, DiskFull) or "not enough free disk" in text:
        return f"There is not enough free disk space for this model ({text}): free some space, then Resume.", ""
    if isinstance(exc, HashMismatch) or "SHA-256 mismatch" in text:
        return ("The downloaded file did not match its published SHA-256 and was deleted: Retry downloads it "
                "again.", text)
    if code in (401, 403):
        return (f"The server refused the download (HTTP {code}): the model is gated or private. Accept its "
                "licence on its Hub page and set a Hub token (Models → Discover → Hub token…), then Retry.", text)
    if code == 404:
        return ("The file is no longer at its address (HTTP 404): search for the model again in Models → "
                "Discover.", text)
    if code is not None and code >= 500:
        return f"The server failed (HTTP {code}): Retry later; the download continues where it stopped.", text
    step = getattr(exc, "step", "")
    if step == "preflight" or step == "patch":
        return text, ""  # the set-up's own words already say what to do
    if isinstance(exc, DownloadError) or step == "download":
        return f"The download stopped: {text}. Retry continues from where it stopped.", ""
    return f"The set-up stopped at “{step or 'its start'}”: {text}. Retry runs the step again.", ""


STAGE_TITLES = {"plan": "Planning", "download": "Downloading", "verify": "Verifying", "patch": "Patching",
                "preflight": "Preflight check", "ready": "Finishing"}
STATE_WORDS = {"paused": "Paused", "failed": "Failed", "done": "Done", "cancelled": "Cancelled"}


def size_words(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def time_words(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s" if s < 600 else f"{round(s / 60)} min"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def describe(job: Job) -> str:
    """The job's line under its name: what it does now, the bytes, and while bytes arrive the speed and
    the time left ("Downloading · 1.20 of 4.50 GB · 12.3 MB/s · 4 min 28 s left")."""
    parts = [STAGE_TITLES.get(job.stage, job.stage) if job.state == "running" else STATE_WORDS.get(job.state, "")]
    if job.total:
        parts.append(f"{size_words(job.done)} of {size_words(job.total)}")
    elif job.done:
        parts.append(size_words(job.done))
    if job.state == "running" and job.stage == "download":
        parts.append(f"{size_words(job.speed)}/s" if job.speed > 0 else "starting…")
        if job.eta is not None and job.speed > 0:
            parts.append(f"{time_words(job.eta)} left")
    return " · ".join(p for p in parts if p)


def _http_code(text: str) -> int | None:
    """The status of an error the downloader said in words ("HTTP 404 Not Found for …")."""
    import re

    m = re.search(r"\bHTTP (\d{3})\b", text)
    return int(m.group(1)) if m else None


def _thread(job: Job, run: Callable[[Job], Any]) -> None:
    threading.Thread(target=run, args=(job,), name=f"job {job.id}", daemon=True).start()


class Downloads:
    """The registry. `spawn(job, run)` runs `run(job)` in the background (a thread here; the window's
    Op); listeners hear of every change, on the thread that made it."""

    def __init__(self, record: Path | None = None, spawn: Callable[[Job, Callable[[Job], Any]], None] = _thread,
                 hub: str | None = None) -> None:
        self.record_path = record
        self.spawn = spawn
        self.hub = hub
        self.jobs: dict[str, Job] = {}
        self.listeners: list[Callable[[Job], None]] = []
        self._makers: dict[str, tuple[Callable[[Job], Work], Callable[[Job], None] | None]] = {}
        self._lock = threading.Lock()
        self._recorded = 0.0

    # ------------------------------------------------------------------ kinds

    def register(self, kind: str, make: Callable[[Job], Work], discard: Callable[[Job], None] | None = None) -> None:
        """How to rebuild a `kind` job's work from its key (after a restart), and to delete its partial
        files when it is cancelled while not running."""
        self._makers[kind] = (make, discard)

    # ------------------------------------------------------------------ the list

    def submit(self, name: str, kind: str, key: dict[str, str], work: Work | None = None) -> Job:
        """The job for `kind` and `key`: the one listed already (a paused or failed one is taken up again,
        with this work), or a new one. Not started."""
        job_id = f"{kind}:{key.get('id') or json.dumps(key, sort_keys=True)}"
        job = self.jobs.get(job_id)
        if job is None or job.state in ("done", "cancelled"):
            job = self.jobs[job_id] = Job(job_id, name, kind, dict(key))
        elif job.state != "running":
            job.name, job.key = name, dict(key)
        if work is not None and job.state != "running":
            job.work = work
        return job

    def get(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def running(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state == "running"]

    def overall(self) -> tuple[int, int | None]:
        """(bytes done, bytes in all) of the running jobs; None for the total while one has no size yet."""
        jobs = self.running()
        if not jobs or any(not j.total for j in jobs):
            return sum(j.done for j in jobs), None
        return sum(j.done for j in jobs), sum(j.total or 0 for j in jobs)

    def remove(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.state != "running":
            del self.jobs[job_id]
            self._save()
            self._changed(job)

    # ------------------------------------------------------------------ control

    def start(self, job: Job) -> None:
        """Run the job in the background (its work rebuilt by its kind's maker when it has none)."""
        if job.state == "running":
            return
        if job.work is None:
            try:
                job.work = self._makers[job.kind][0](job)
            except Exception as exc:  # its model left the catalog, its kind is unknown: said, not raised
                job.error = (f"This download cannot be resumed ({exc or type(exc).__name__}): start it again "
                             "from Models → Discover.")
                self._end(job, "failed")
                return
        job.pause_flag.clear()
        job.cancel_flag.clear()
        job.state, job.error, job.details, job.note = "running", "", "", ""
        job.speed, job.eta, job.runs, job.steps, job.exception = 0.0, None, job.runs + 1, {}, None
        self._save()
        self._changed(job)
        self.spawn(job, self.run)

    def resume(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.state in ACTIVE:
            self.start(job)

    def pause(self, job_id: str) -> None:
        """Stop at the next check and keep what arrived (the `.part`): Resume continues from there."""
        job = self.jobs.get(job_id)
        if job is not None and job.state == "running":
            job.pause_flag.set()

    def cancel(self, job_id: str) -> None:
        """Stop and delete the partial download: running, at its next check; else at once."""
        job = self.jobs.get(job_id)
        if job is None:
            return
        if job.state == "running":
            job.cancel_flag.set()
            return
        if job.state in ACTIVE:
            discard = self._makers.get(job.kind, (None, None))[1]
            if discard is not None:
                discard(job)
            self._end(job, "cancelled", note="Cancelled; the partial download was deleted.")

    def pause_all(self, wait: float = 0.0) -> list[Job]:
        """Pause every running job (the window closing), waiting up to `wait` s for them to stop."""
        jobs = self.running()
        for job in jobs:
            job.pause_flag.set()
        deadline = time.monotonic() + wait
        while any(j.state == "running" for j in jobs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for job in jobs:  # one still blocked on the network is recorded as paused: the next start offers it
            if job.state == "running":
                job.note = "Stopped when the app closed; Resume continues where it stopped."
        self._save(force_paused=True)
        return jobs

    # ------------------------------------------------------------------ running

    def run(self, job: Job, interrupted: Callable[[], bool] | None = None) -> Job:
        """Do the job's work on this thread; its end (done, paused, cancelled, failed) goes into the job.
        `interrupted` (the window closing) stops it as a pause does."""
        control = Control(self, job, interrupted)
        try:
            assert job.work is not None
            result = job.work(control)
        except Exception as exc:  # every end of a job reaches the list: as a state, or as a sentence
            if job.cancel_flag.is_set():
                self._end(job, "cancelled", note="Cancelled; the partial download was deleted.")
            elif control.paused():
                self._end(job, "paused", note="Paused; Resume continues from where it stopped.")
            else:
                from app.fetch.hub import endpoint

                said, detail = explain(exc, job.key.get("url") or None, self.hub or endpoint())
                job.error, job.details, job.exception = said, detail, exc
                self._end(job, "failed")
            return job
        job.result = result
        if job.total:
            job.done = job.total
        self._end(job, "done", note="")
        return job

    def _end(self, job: Job, state: str, note: str = "") -> None:
        job.state, job.note, job.speed, job.eta = state, note, 0.0, None
        self._save()
        self._changed(job)

    def _changed(self, job: Job, progress: bool = False) -> None:
        if progress and time.monotonic() - self._recorded > RECORD_EVERY:
            self._save()
        for listener in list(self.listeners):
            listener(job)

    # ------------------------------------------------------------------ the record on disk

    def _save(self, force_paused: bool = False) -> None:
        """The unfinished jobs (running, paused, or failed before their download was done), for the
        next start. Written whole, atomically; a failure to write costs only the offer."""
        if self.record_path is None:
            return
        with self._lock:
            self._recorded = time.monotonic()
            kept = []
            for job in list(self.jobs.values()):
                if job.state in ("running", "paused") or (job.state == "failed" and job.stage in ("plan", "download")):
                    entry = job.record()
                    if force_paused and entry["state"] == "running":
                        entry["state"] = "paused"
                    kept.append(entry)
            try:
                write_text_atomic(self.record_path, json.dumps({"version": 1, "jobs": kept}, indent=1))
            except OSError:
                pass

    def unfinished(self) -> list[Job]:
        """The jobs the record lists (those that did not finish before the last exit), listed here as
        paused (or failed), not started. Called once at start."""
        if self.record_path is None:
            return []
        try:
            data = json.loads(self.record_path.read_text(encoding="utf-8"))
            entries = [e for e in data.get("jobs", []) if isinstance(e, dict)]
        except (OSError, ValueError, AttributeError):
            return []
        found = []
        for e in entries:
            try:
                job = Job(str(e["id"]), str(e["name"]), str(e["kind"]), {str(k): str(v) for k, v in e["key"].items()})
                job.stage, job.done, job.total = str(e.get("stage") or "plan"), int(e.get("done") or 0), e.get("total")
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            job.state = "failed" if e.get("state") == "failed" else "paused"
            job.error = str(e.get("error") or "") if job.state == "failed" else ""
            job.note = "" if job.error else "Not finished when the app last closed; Resume continues where it stopped."
            if job.id not in self.jobs:
                self.jobs[job.id] = job
                found.append(job)
        return found


def register_files(downloads: Downloads, downloader: Downloader | None = None) -> None:
    """Plain file downloads ("file" jobs: a URL to a target) in `downloads`, through `downloader`."""
    get = downloader or Downloader()

    def make(job: Job) -> Work:
        target, sha256 = Path(job.key["target"]), job.key.get("sha256") or None

        def work(control: Control) -> Path:
            control.report("download", 0.0)
            result = get.download(job.key["url"], target, sha256=sha256, progress=control.progress,
                                  cancel=control.cancelled, pause=control.paused)
            control.report("download", 1.0, f"{result.size:,} bytes, verified")
            return result.path

        return work

    def discard(job: Job) -> None:
        target = Path(job.key["target"])
        for suffix in (".part", ".part.json"):
            target.with_name(target.name + suffix).unlink(missing_ok=True)

    downloads.register("file", make, discard)


def file_job(downloads: Downloads, url: str, target: Path, sha256: str | None = None) -> Job:
    """A plain download of one file as a job, not started (`register_files` first)."""
    return downloads.submit(target.name, "file", {"id": str(target), "url": url, "target": str(target),
                                                  "sha256": sha256 or ""})
