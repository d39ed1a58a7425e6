"""One-click model set-up as one job: plan -> download -> verify -> patch -> preflight -> ready. No Qt.

Each step's outcome is saved (`data/setup/<model id>.json`) as soon as it is known, so a set-up
that is stopped, cancelled or crashes continues from where it stopped: a finished download is not
fetched again, a half-finished one resumes (app/net/download.py), a done patch is not redone.

The preflight has the bundled llama.cpp read the whole model description without allocating it
(its no-alloc load: architecture, hyperparameters, vocabulary, every tensor's shape): an
architecture it does not know, or a missing key, is reported now with what to do, not at chat time.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.base.paths import app_dirs
from app.fetch.catalog import CatalogEntry
from app.gguf.gguf_file import read_header
from app.gguf.model_facts import facts_from_header
from app.machine.snapshot import Machine
from app.model.patch import default_target, patch_file
from app.model.plan import make_plan
from app.net.download import Downloader, Progress
from app.net.remote_gguf import fetch_header

if TYPE_CHECKING:
    from app.gguf.gguf_file import GGUFHeader
    from app.gguf.model_facts import ModelFacts
    from app.model.patch import Requires
    from app.model.plan import PlannedFile

STEPS = ("plan", "download", "verify", "patch", "preflight", "ready")
# the files set-ups are downloading now: two set-ups of files with the same name (two repos, two
# entries) must not write one .part at once
_WRITING: set[Path] = set()
_WRITING_LOCK = threading.Lock()

# (step, fraction 0..1 or None, text): what the UI and the CLI show
Report = Callable[[str, float | None, str], None]


@dataclass(frozen=True)
class SetupSource:
    """A file to set up with what is already known of it: the model browser's entry (the Hub's size
    and SHA-256), and the `PlannedFile` the browser made from the header it read (facts, plan for this
    machine, dialect). The pipeline's plan step uses it instead of reading the header over the network
    and planning again."""

    entry: CatalogEntry
    planned: PlannedFile | None = None

    @property
    def known(self) -> bool:
        return self.planned is not None


class SetupError(Exception):
    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


def _exists(path: str | None) -> bool:
    return bool(path) and Path(path or "").exists()


@dataclass
class SetupState:
    model_id: str
    url: str | None = None
    done: dict[str, str] = field(default_factory=dict)  # step -> what it concluded
    downloaded: str | None = None
    final_path: str | None = None
    sha256: str | None = None
    hash_source: str | None = None
    plan_reason: str | None = None
    profile: str | None = None  # the patch profile: the catalog's, else the one the header's dialect matches
    in_stream: bool = False  # patched while downloading (the file written is already the patched one)
    overlay: str | None = None  # patched at load time (a file the user has), in words
    stream_note: str | None = None
    stream_fixes: list[str] = field(default_factory=list)
    error: str | None = None
    updated: float = 0.0

    @property
    def ready(self) -> bool:
        return "ready" in self.done and _exists(self.final_path)


def state_path(model_id: str) -> Path:
    return app_dirs().data / "setup" / f"{model_id}.json"


def load_state(model_id: str) -> SetupState:
    path = state_path(model_id)
    try:
        return SetupState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return SetupState(model_id)


def save_state(state: SetupState) -> None:
    path = state_path(state.model_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    state.updated = time.time()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    tmp.replace(path)


_UNKNOWN_ARCH = re.compile(r"unknown model architecture: '([^']+)'")
_MISSING_KEY = re.compile(r"key not found in model: (\S+)")


def preflight(path: str | Path, overrides: dict | None = None) -> str:
    """Have the bundled llama.cpp read the model as it would to run it, without allocating anything.

    llama.cpp's no-alloc load reads the architecture, every hyperparameter the architecture needs,
    the vocabulary and every tensor's name and shape, and sizes a small context (a `vocab_only`
    load would skip the hyperparameters and miss a missing key). A refusal is explained.
    """
    from app.machine.llama_backend import llama
    from app.machine.llama_load import LoadSettings, simulate

    llama_cpp = llama()

    try:
        buffers, lines = simulate(path, LoadSettings(n_ctx=512, n_gpu_layers=0,
                                                     kv_overrides=tuple((overrides or {}).items())))
    except RuntimeError as exc:
        log = str(exc)
        if m := _UNKNOWN_ARCH.search(log):
            raise SetupError("preflight", (
                f"The bundled llama.cpp (llama-cpp-python {llama_cpp.__version__}) does not know the model "
                f"architecture '{m.group(1)}'. Install a llama-cpp-python whose llama.cpp supports it, or use "
                "the patch profile made for this model.")) from None
        if m := _MISSING_KEY.search(log):
            raise SetupError("preflight", (
                f"llama.cpp needs the metadata key {m.group(1)}, which this file lacks: the file is in a dialect "
                "upstream llama.cpp does not read. Patch it with the model's profile (python -m app patch).")) from None
        reason = " ".join(line.strip() for line in log.splitlines() if "error" in line.lower())[-500:]
        raise SetupError("preflight", f"llama.cpp could not read the model: {reason or log[-300:]}") from None
    vocab = next((line.split("=")[-1].strip() for line in lines if "n_vocab" in line and "=" in line), "?")
    return f"llama.cpp reads it: architecture, hyperparameters, {vocab} tokens and every tensor"


def hub_url(entry: CatalogEntry, path: str | None) -> str | None:
    if not (entry.hub_repo and path):
        return None
    from app.fetch.hub import file_url

    return file_url(entry.hub_repo, path, entry.hub_revision)


def source_facts(entry: CatalogEntry, url: str | None, token: str | None) -> tuple[ModelFacts, GGUFHeader]:
    """(facts, the first file's header) of an entry: local, or over HTTP Range (every part of a
    split model), before anything is downloaded."""
    if entry.local_path:
        header = read_header(entry.local_path)
        return facts_from_header(header), header
    url = url or entry.url or hub_url(entry, entry.hub_file)
    if not url:
        raise SetupError("plan", f"no download address for {entry.name}. {entry.url_note}".strip())
    headers = [fetch_header(url, token=token)]
    headers += [fetch_header(hub_url(entry, p["file"]) or "", token=token) for p in entry.parts]
    from app.fetch.hub import merged_header_facts

    return merged_header_facts(headers), headers[0]


class SetupPipeline:
    def __init__(self, entry: CatalogEntry | SetupSource, machine: Machine, *, url: str | None = None,
                 downloader: Downloader | None = None, models_dir: Path | None = None,
                 keep_original: bool = False, cancel: Callable[[], bool] | None = None,
                 pause: Callable[[], bool] | None = None,
                 transfer: Callable[[Progress], None] | None = None) -> None:
        self.source = entry if isinstance(entry, SetupSource) else SetupSource(entry)
        self.entry = entry = self.source.entry
        self.machine = machine
        self.url = url or entry.url or hub_url(entry, entry.hub_file)
        self.downloader = downloader or Downloader()
        self.models_dir = models_dir or app_dirs().models
        self.keep_original = keep_original
        self.state = load_state(entry.id)
        self._cancelled = False
        self._external_cancel = cancel
        self._pause = pause  # stops at the next check and keeps the partial download (app/fetch/downloads.py)
        self._transfer = transfer  # the download's bytes, speed and time left, over all of its parts
        # the in-stream patch's source header and key rule, kept from download for verify
        self._vendor_header: GGUFHeader | None = None
        self._requires: Requires | None = None

    def cancel(self) -> None:
        self._cancelled = True

    def _check_cancel(self) -> bool:
        if self._external_cancel is not None and self._external_cancel():
            self._cancelled = True
        return self._cancelled

    def _check_pause(self) -> bool:
        return self._pause is not None and self._pause()

    def _stop_asked(self) -> bool:
        return self._check_cancel() or self._check_pause()

    def run(self, report: Report | None = None) -> SetupState:
        report = report or (lambda step, fraction, text: None)
        s = self.state
        if self.url and s.url and s.url != self.url:
            s = self.state = SetupState(self.entry.id)  # another source: start afresh
        s.url = self.url or s.url
        s.error = None
        try:
            for step in STEPS:
                if self._stop_asked():
                    raise SetupError(step, "cancelled" if self._cancelled else "paused")
                if step in s.done and self._still_valid(step):
                    report(step, 1.0, s.done[step])
                    continue
                report(step, 0.0, "")
                result = getattr(self, f"_{step}")(report)
                s.done[step] = result
                save_state(s)
                report(step, 1.0, result)
        except SetupError as exc:
            s.error = f"{exc.step}: {exc}"
            save_state(s)
            raise
        except Exception as exc:  # any other failure is a failure of the step that ran
            step = next((st for st in STEPS if st not in s.done), "ready")
            s.error = f"{step}: {exc}"
            save_state(s)
            raise SetupError(step, str(exc)) from exc
        return s

    def _still_valid(self, step: str) -> bool:
        s = self.state
        if step in ("download", "verify"):
            return _exists(s.downloaded) or _exists(s.final_path)
        if step in ("patch", "preflight", "ready"):
            return _exists(s.final_path)
        return True

    # ------------------------------------------------------------------ steps

    def _source_facts(self) -> tuple[ModelFacts, GGUFHeader]:
        return source_facts(self.entry, self.state.url, self.downloader.token or None)

    def _plan(self, report: Report) -> str:
        from app.model.patch import matching_profile

        known = self.source
        found: tuple[str, int] | None
        if known.planned is not None:  # planned by the model browser
            facts, plan = known.planned.facts, known.planned.plan
            found = (known.planned.profile, known.planned.fixes) if known.planned.profile else None
        else:
            facts, header = self._source_facts()
            plan = make_plan(facts, self.machine.gpus, self.machine.ram)
            found = matching_profile(header)
        self.state.plan_reason = plan.reason
        self.state.profile = self.entry.patch_profile or (found[0] if found else None)
        # a known dialect is patched on the way in: the download writes the patched header, then the data
        self.state.in_stream = bool(found) and not self.entry.local_path
        self._check_disk(facts.file_size)
        how = "while it downloads, with no copy" if self.state.in_stream else "at load time, with no copy"
        dialect = f" The file is in the {found[0]} dialect: patched {how} ({found[1]} fixes)." if found else ""
        text = plan.reason if plan.fits else f"{plan.reason} {' '.join(plan.suggestions)}"
        return text + dialect

    def _check_disk(self, size: int) -> None:
        """Said before the download starts: the files, plus a patched copy where a copy is needed."""
        if self.entry.local_path:
            return
        from app.net.download import DISK_MARGIN

        folder = self.models_dir
        folder.mkdir(parents=True, exist_ok=True)
        copy = bool(self.state.profile) and not self.state.in_stream
        needed = size * (2 if copy else 1)
        free = self.downloader.free_space(folder)
        if free < needed + DISK_MARGIN:
            raise SetupError("plan", f"not enough free disk in {folder}: the model needs {needed / 1e9:.1f} GB"
                                     f"{' (with its patched copy)' if copy else ''}, {free / 1e9:.1f} GB are free")

    def _stream_layout(self, url: str) -> Any:
        """The in-stream patch of the first file: (layout, vendor header, name, requires), or None
        (then the download is plain and the patch step copies)."""
        from app.model.patch import load_profile, patched_header, requires_for_header
        from app.net.download import Layout
        from app.net.remote_gguf import fetch_head

        header, head = fetch_head(url, token=self.downloader.token or None)
        requires = requires_for_header(head, header.file_size)
        new_head, results = patched_header(header, load_profile(self.state.profile or ""), requires)
        if new_head is None:
            return None
        self.state.stream_fixes = [r.title for r in results if r.status == "applied"]
        return Layout(new_head, header.data_offset, head), header, requires

    def _download(self, report: Report) -> str:
        e = self.entry
        if e.local_path:
            self.state.downloaded = e.local_path
            return f"using the local file {e.local_path}"
        first_name = e.file_name
        layout = None
        if self.state.in_stream and self.state.profile:
            try:
                prepared = self._stream_layout(self.state.url or "")
            except Exception as exc:  # the header could not be read again: the plain download, then a copy
                self.state.stream_note = f"in-stream patch not possible ({exc}): the patch step copies"
                prepared = None
            if prepared is not None:
                layout, self._vendor_header, self._requires = prepared
                if not e.is_split:  # a split model's first part keeps its name: llama.cpp finds the rest by it
                    first_name = default_target(Path(e.file_name)).name
            else:
                self.state.in_stream = False
        files = [(self.state.url, first_name, e.sha256, e.size, layout)]
        files += [(hub_url(e, p["file"]), Path(p["file"]).name, p.get("sha256"), p.get("size"), None) for p in e.parts]
        targets = {(self.models_dir / f[1]).resolve() for f in files}
        with _WRITING_LOCK:
            busy = targets & _WRITING
            if busy:
                raise SetupError("download", f"another set-up is downloading {next(iter(busy)).name} now: wait "
                                             "for it to finish (Downloads), then Retry")
            _WRITING.update(targets)
        try:
            return self._download_files(files, layout, report)
        finally:
            with _WRITING_LOCK:
                _WRITING.difference_update(targets)

    def _download_files(self, files: list[tuple[Any, ...]], layout: Any, report: Report) -> str:
        grand_total = sum(f[3] or 0 for f in files) or None
        before, results = 0, []
        for i, (url, name, sha256, size, lay) in enumerate(files):
            label = f"part {i + 1} of {len(files)}: " if len(files) > 1 else ""

            def on_progress(p: Progress, label: str = label, before: int = before) -> None:
                eta = f", {p.eta:.0f} s left" if p.eta is not None else ""
                total = f" of {p.total / 1e9:.2f}" if p.total else ""
                fraction = (before + p.done) / grand_total if grand_total else p.fraction
                report("download", fraction, f"{label}{p.done / 1e9:.2f}{total} GB at {p.speed / 1e6:.1f} MB/s{eta}")
                if self._transfer is not None:
                    done, whole = before + p.done, grand_total or p.total
                    left = (whole - done) / p.speed if whole and p.speed > 0 else p.eta
                    self._transfer(Progress(done, whole, p.speed, left))

            result = self.downloader.download(url or "", self.models_dir / name, sha256=sha256, size=size,
                                              progress=on_progress, cancel=self._check_cancel,
                                              pause=self._check_pause, layout=lay)
            results.append(result)
            before += result.size
        first = results[0]
        self.state.downloaded, self.state.sha256 = str(first.path), first.sha256
        self.state.hash_source = first.hash_source
        resumed = sum(r.resumed_from for r in results)
        resumed_text = f", resumed at {resumed / 1e9:.2f} GB" if resumed else ""
        parts = f" in {len(results)} parts, each verified" if len(results) > 1 else ""
        patched = ", patched on the way in" if layout is not None else ""
        notes = "".join(f"; {note}" for r in results for note in r.notes)  # a restart, and why
        return f"{before / 1e9:.2f} GB downloaded{parts}{patched}{resumed_text}{notes}"

    def _verify(self, report: Report) -> str:
        path = Path(self.state.downloaded or "")
        header = read_header(path)  # a GGUF whose header and tensor table are consistent with its size
        if self.entry.local_path:
            return f"a readable GGUF ({len(header.tensors)} tensors); local file, no hash to check"
        patched = ""
        if self.state.in_stream:
            from app.model.patch import load_profile, verify

            vendor = self._vendor_header
            if vendor is None:  # resumed after a restart: read the source's header again
                from app.net.remote_gguf import fetch_head

                vendor, _ = fetch_head(self.state.url or "", token=self.downloader.token or None)
            verify(path, vendor, load_profile(self.state.profile or ""), self._requires)
            patched = "; the patched header passes every rule and every tensor matches the source's"
        if self.state.hash_source in (None, "none"):
            return (f"a readable GGUF ({len(header.tensors)} tensors); NOT verified: neither the catalog nor the "
                    f"server gave a SHA-256{patched}")
        sha = (self.state.sha256 or "")[:16]
        return (f"SHA-256 {sha}… of the downloaded bytes matches ({self.state.hash_source}); "
                f"{len(header.tensors)} tensors{patched}")

    def _patch(self, report: Report) -> str:
        import time as _time

        from app.model.plan import load_time_patch

        src = Path(self.state.downloaded or "")
        profile = self.entry.patch_profile or self.state.profile
        if not profile:
            self.state.final_path = str(src)
            return "no patch needed for this model"
        started = _time.perf_counter()
        if self.state.in_stream:
            self.state.final_path = str(src)
            fixed = ", ".join(self.state.stream_fixes)
            return f"fixed while it downloaded: {fixed}; no copy ({_time.perf_counter() - started:.2f} s)"
        if self.entry.local_path:  # a file the user has: fixed at load time, never copied
            overrides, said = load_time_patch(src, read_header(src))
            if overrides is not None:
                self.state.final_path, self.state.overlay = str(src), said
                return f"{said}: no copy, no byte written ({_time.perf_counter() - started:.2f} s)"
        self.models_dir.mkdir(parents=True, exist_ok=True)
        target = self.models_dir / default_target(src).name if self.entry.local_path else default_target(src)
        if self.entry.is_split:  # llama.cpp finds the other parts by the first one's name: keep it
            target = src.with_name(f".{src.name}.patched")
        rep = patch_file(src, target, profile, overwrite=True, cancel=self._stop_asked,
                         progress=lambda done, total: report("patch", done / total if total else None,
                                                             f"{done / 1e9:.2f} of {total / 1e9:.2f} GB"))
        if rep.failed:
            raise SetupError("patch", "; ".join(r.line() for r in rep.results if r.status == "cannot-apply"))
        if not rep.written:
            self.state.final_path = str(src)
            return "the file already matches upstream llama.cpp"
        if self.entry.is_split:
            os.replace(target, src)  # our own verified download; the patched part takes its name
            target = src
        self.state.final_path = str(target)
        if not self.keep_original and not self.entry.local_path and target != src:
            src.unlink(missing_ok=True)  # our own download; the patched copy has every byte of its data
        applied = [r.title for r in rep.results if r.status == "applied"]
        return f"fixed: {', '.join(applied)} ({rep.seconds:.1f} s)"

    def _preflight(self, report: Report) -> str:
        overrides = None
        if self.state.overlay:
            from app.model.plan import load_time_patch

            path = self.state.final_path or ""
            overrides, _ = load_time_patch(path, read_header(path))
        return preflight(self.state.final_path or "", overrides)

    def _ready(self, report: Report) -> str:
        return f"ready: {self.state.final_path}"


def discard_partial(entry: CatalogEntry) -> None:
    """Delete what a stopped download of `entry` left (each file's `.part` and its record), for a
    cancelled set-up that is not running: the plain name, and the patched name an in-stream patch writes."""
    folder = app_dirs().models
    names = {entry.file_name, default_target(Path(entry.file_name)).name}
    names |= {Path(p["file"]).name for p in entry.parts}
    for name in names:
        for suffix in (".part", ".part.json"):
            (folder / (name + suffix)).unlink(missing_ok=True)
