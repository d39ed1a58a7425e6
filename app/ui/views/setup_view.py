"""The set-up page: pick a model, see how it fits (a picture of GPU and RAM, for this machine or
another card), one button, a progress bar per step.

A set-up runs as a job of the downloads registry (app/fetch/downloads.py), so it shows in the
Downloads place too, can be paused there, and is offered again after a restart; this page shows
the job of the model it has selected, whichever place started it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.fetch.catalog import CatalogEntry, add_user_entry, entry_for_local_file, entry_for_url, load_catalog
from app.fetch.downloads import Control, Downloads, Job, Work
from app.fetch.no_connection import sentence
from app.fetch.setup_pipeline import (
    STEPS,
    SetupError,
    SetupPipeline,
    SetupSource,
    discard_partial,
    load_state,
    source_facts,
)
from app.machine.snapshot import Machine
from app.model.plan import GiB, PlanRequest, confirmation_needed, make_plan
from app.net.download import Downloader
from app.ui.base.ops import Op
from app.ui.base.props import props
from app.ui.views.downloads_view import DownloadsBridge
from app.ui.widgets.controls import ConfirmBox, what_if_row
from app.ui.widgets.details_label import DetailsLabel
from app.ui.widgets.plan_picture import PlanPicture

if TYPE_CHECKING:
    from app.fetch.setup_pipeline import SetupState
    from app.gguf.gguf_file import GGUFHeader
    from app.gguf.model_facts import ModelFacts
    from app.model.plan import Plan

STEP_TITLES = {"plan": "Plan for this machine", "download": "Download", "verify": "Verify",
               "patch": "Patch for llama.cpp", "preflight": "Preflight check", "ready": "Ready"}


class SetupView(QWidget):
    ready = Signal(str)  # the model file to load
    failed = Signal(str)
    browse_requested = Signal(str)  # search the Hub for this (an entry without a file yet)
    previewed = Signal()  # the plan preview of the selected model is shown (tests wait on it)

    def __init__(self, machine: Machine, allow_http: bool = False, downloads: DownloadsBridge | None = None) -> None:
        super().__init__()
        self.setObjectName("page")
        self.machine = machine  # the window's snapshot: previews and the set-up plan against it
        self.gpus = gpus = machine.gpus
        self.allow_http = allow_http
        self.downloads = downloads or DownloadsBridge(Downloads(), self)
        self.downloads.downloads.register("setup", self._work_for_job, self._discard)
        self.downloads.changed.connect(self._on_job)
        self.job: Job | None = None  # the set-up this page follows (started here, or of the model selected)
        self._seen_end: tuple[str, int] | None = None  # the job run whose end the page has shown
        self._cancel_asked = False
        self.preview_op: Op | None = None
        self.facts: ModelFacts | None = None
        self.source: SetupSource | None = None  # handed over by the model browser, with its plan
        self._generation = 0
        # The page scrolls when the window is shorter than it: the error banner or a long plan must
        # not squeeze the model list or the step texts.
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.scroll_area = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        body = props(QWidget(), objectName="page")
        self.scroll_area.setWidget(body)
        outer.addWidget(self.scroll_area)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(props(QLabel("Set up a model"), objectName="title"))
        summary = props(QLabel(gpus.summary()), objectName="subtitle")
        summary.setWordWrap(True)
        layout.addWidget(summary)

        self.models = props(QListWidget(), objectName="conversations")
        self.entries: list[CatalogEntry] = []
        self._fill()
        self.models.setMaximumHeight(130)
        self.models.currentRowChanged.connect(self._on_model)
        layout.addWidget(self.models)
        self.description = props(QLabel(), objectName="fact")
        self.description.setWordWrap(True)
        layout.addWidget(self.description)

        # the button under the model list, the plan below it: in view without scrolling on a small screen
        url_row = QHBoxLayout()
        self.url_label = QLabel("Download from")
        url_row.addWidget(self.url_label)
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://huggingface.co/…/resolve/main/model.gguf")
        url_row.addWidget(self.url, 1)
        layout.addLayout(url_row)

        self.confirm_box = ConfirmBox("Set up anyway", lambda: self.start(confirmed=True))
        self.confirm_text, self.confirm_button = self.confirm_box.text, self.confirm_box.confirm_button
        layout.addWidget(self.confirm_box)

        buttons = QHBoxLayout()
        self.start_button = props(QPushButton("Set up"), objectName="primary")
        self.start_button.clicked.connect(self._start_clicked)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)

        what, self.what_if = what_if_row(gpus, self._show_plan)
        layout.addLayout(what)
        self.picture = PlanPicture()
        layout.addWidget(self.picture)
        self.plan_text = DetailsLabel("fact")  # offline: one sentence, the error behind "Details"
        layout.addWidget(self.plan_text)

        steps = props(QFrame(), objectName="card")
        grid = QGridLayout(steps)
        self.bars: dict[str, QProgressBar] = {}
        self.status: dict[str, QLabel] = {}
        for row, step in enumerate(STEPS):
            grid.addWidget(props(QLabel(STEP_TITLES[step]), objectName="cardTitle"), row, 0)
            bar = QProgressBar()
            bar.setRange(0, 1000)
            bar.setTextVisible(False)
            bar.setMaximumWidth(220)
            grid.addWidget(bar, row, 1)
            status = props(QLabel(), objectName="fact")
            status.setWordWrap(True)
            status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(status, row, 2)
            self.bars[step], self.status[step] = bar, status
        grid.setColumnStretch(2, 1)
        layout.addWidget(steps)
        self.error = DetailsLabel("errorBanner")
        self.error.setVisible(False)
        layout.addWidget(self.error)
        add_row = QHBoxLayout()
        self.add_url_button = QPushButton("Add a model by URL…")
        self.add_url_button.clicked.connect(self._add_url_dialog)
        self.add_file_button = QPushButton("Add a local GGUF…")
        self.add_file_button.clicked.connect(self._add_file_dialog)
        add_row.addWidget(self.add_url_button)
        add_row.addWidget(self.add_file_button)
        add_row.addStretch(1)
        layout.addLayout(add_row)
        layout.addStretch(1)
        if self.entries:
            self.models.setCurrentRow(len(self.entries) - 1)

    # -------------------------------------------------------------- the catalog list

    def _fill(self, select: str | None = None) -> None:
        self.models.blockSignals(True)
        self.models.clear()
        self.entries = load_catalog()
        for e in self.entries:
            size = f" · {(e.size + sum(p.get('size') or 0 for p in e.parts)) / 1e9:.1f} GB" if e.size else ""
            item = QListWidgetItem(f"{e.name}{size}")
            item.setToolTip(f"{e.description}\nSource: {e.source}".strip())
            self.models.addItem(item)
        self.models.blockSignals(False)
        if select:
            self.select(select)

    def refresh(self, select: str | None = None) -> None:
        self._fill(select=select)

    def add_local_file(self, path: str) -> CatalogEntry:
        entry = entry_for_local_file(path)
        add_user_entry(entry)
        self._fill(select=entry.id)
        return entry

    def add_url(self, name: str, url: str) -> CatalogEntry:
        entry = entry_for_url(name, url)
        add_user_entry(entry)
        self._fill(select=entry.id)
        return entry

    def _add_file_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Add a local GGUF", "", "GGUF models (*.gguf)")
        if path:
            try:
                self.add_local_file(path)
            except Exception as exc:  # shown on the page: a file that is not a model, unreadable, ...
                self._show_error(f"Cannot add {path}: {exc}")

    def _add_url_dialog(self) -> None:
        url, ok = QInputDialog.getText(self, "Add a model by URL", "GGUF download URL:")
        if not ok or not url.strip():
            return
        name, ok = QInputDialog.getText(self, "Add a model by URL", "A name for it:")
        if ok:
            try:
                self.add_url(name.strip() or url.rsplit("/", 1)[-1], url.strip())
            except Exception as exc:  # shown on the page: a URL without a .gguf name, ...
                self._show_error(f"Cannot add {url}: {exc}")

    def _show_error(self, message: str, details: str = "") -> None:
        self.error.show_message(message, details)
        self.error.setVisible(True)
        QTimer.singleShot(0, lambda: self.scroll_area.ensureWidgetVisible(self.error))  # once it is laid out

    def entry(self) -> CatalogEntry:
        return self.entries[self.models.currentRow()]

    def _known(self) -> SetupSource | None:
        """The model browser's source for the selected entry, if that is what is selected."""
        s = self.source
        return s if s is not None and self.entries and s.entry.id == self.entry().id else None

    def start_from(self, source: SetupSource) -> None:
        """Set up a file the model browser planned: its entry (with the Hub's SHA-256) and plan go to
        the pipeline as they are. The entry joins the user's catalog so that the list keeps it, and a
        stopped set-up can continue after a restart (a shipped entry of the same file stays as it is)."""
        if not any(e.id == source.entry.id and not e.user for e in load_catalog()):
            add_user_entry(source.entry)
        self.source = source
        self._fill(select=source.entry.id)
        self.start(confirmed=True)  # the browser asked already, where it had to

    def select(self, entry_id: str) -> None:
        for i, e in enumerate(self.entries):
            if e.id == entry_id:
                if self.models.currentRow() == i:
                    self._on_model(i)
                self.models.setCurrentRow(i)
                return
        raise KeyError(entry_id)

    def set_up(self, entry_id: str) -> None:
        """Select an entry and press its button: Set up, Load (ready already) or Find it on the Hub."""
        self.select(entry_id)
        self._start_clicked()

    def _needs_search(self, e: CatalogEntry) -> bool:
        return not (e.local_path or e.url or e.hub_file or load_state(e.id).url) and bool(e.hub_search or e.hub_repo)

    def _on_model(self, row: int) -> None:
        if row < 0:
            return
        e = self.entries[row]
        note = f"\n{e.url_note}" if e.url_note else ""
        self.description.setText(f"{e.description}\nSource: {e.source}{note}".strip())
        state = load_state(e.id)
        self.url.setText(e.url or state.url or "")
        direct = not (e.hub_repo or e.local_path)
        self.url.setVisible(direct)
        self.url_label.setVisible(direct)
        self._label_start(e)
        self.confirm_box.setVisible(False)
        for step in STEPS:
            done = state.done.get(step)
            self.bars[step].setValue(1000 if done else 0)
            self.status[step].setText(done or "")
        self.preview()

    # -------------------------------------------------------------- the plan before anything is downloaded

    def preview(self) -> None:
        """Read the selected model's header (local, or over HTTP Range) and show its plan."""
        self._generation += 1
        generation = self._generation
        self.facts = None
        self.picture.set_plan(None)
        e = self.entries[self.models.currentRow()] if self.entries else None
        if e is None or self._needs_search(e) or not (e.local_path or e.hub_file or e.url or self.url.text().strip()):
            self.plan_text.setText("The plan appears once the model has a source.")
            return
        known = self._known()
        if known is not None and known.planned is not None:  # planned by the model browser: nothing to read again
            self.facts = known.planned.facts
            self._show_plan()
            return
        self.plan_text.setText("Reading the model's header to plan it…")
        url = self.url.text().strip() or None

        def done(result: tuple[ModelFacts, GGUFHeader]) -> None:
            if generation == self._generation:
                self.facts = result[0]
                self._show_plan()

        def failed(exc: BaseException) -> None:
            if generation == self._generation:
                text, details = self._said(exc, url or e.url)
                self.plan_text.show_message(text if details else f"No plan yet: {text}", details)
                self.previewed.emit()

        self.preview_op = Op(self, lambda ctx: source_facts(e, url, None), name="Plan preview") \
            .success(done).failure(failed).run()

    def request(self) -> PlanRequest:
        gb = self.what_if.currentData()
        return PlanRequest(vram_bytes=int(gb * GiB) if gb else None)

    def plan_here(self) -> Plan | None:
        """The plan for this machine (what a confirmation is about), or None before the header is read."""
        return make_plan(self.facts, self.gpus, self.machine.ram) if self.facts is not None else None

    def _show_plan(self) -> None:
        if self.facts is None:
            return
        known = self._known()
        here = self.what_if.currentData() is None
        plan = known.planned.plan if known is not None and known.planned is not None and here else \
            make_plan(self.facts, self.gpus, self.machine.ram, self.request())
        self.picture.set_plan(plan)
        where = self.what_if.currentText()
        suggestions = f" {' '.join(plan.suggestions)}" if plan.suggestions else ""
        self.plan_text.setText(f"{where}: {plan.reason}{suggestions}")
        self.previewed.emit()

    # -------------------------------------------------------------- running the set-up

    def _ready_path(self, e: CatalogEntry) -> str | None:
        """The set-up file of an entry that is ready (set up before, still on disk), else None."""
        state = load_state(e.id)
        return state.final_path if state.ready else None

    def _label_start(self, e: CatalogEntry) -> None:
        """"Load" for a model that is ready (nothing to set up), "Find it on the Hub" for one without a
        source yet, else "Set up"."""
        ready = self._ready_path(e)
        self.start_button.setText("Load" if ready else "Find it on the Hub" if self._needs_search(e) else "Set up")
        self.start_button.setToolTip(f"Already set up: {ready}. Load it and chat" if ready else "")

    def _start_clicked(self) -> None:
        e = self.entry()
        ready = self._ready_path(e)
        if ready and self.url.text().strip() in ("", e.url or load_state(e.id).url or ""):
            self.ready.emit(ready)  # nothing to set up: load it
            return
        if self._needs_search(e):
            self.browse_requested.emit(e.hub_search or e.hub_repo or e.name)
            return
        self.start()

    def start(self, confirmed: bool = False) -> None:
        """Run the set-up of the selected model. Unless `confirmed`, a plan that does not fit, runs on
        the CPU only (a large file) or fills the RAM is confirmed first, inline."""
        if self.op is not None:
            return
        entry: CatalogEntry | SetupSource = self._known() or self.entry()
        url = self.url.text().strip() or None
        why = None if confirmed else confirmation_needed(self.plan_here(), self.facts.file_size if self.facts else None)
        if why:
            self.confirm_box.ask(why)
            return
        self.confirm_box.setVisible(False)
        self.error.setVisible(False)
        for step in STEPS:
            self.bars[step].setValue(0)
            self.status[step].setText("")
        e = entry.entry if isinstance(entry, SetupSource) else entry
        registry = self.downloads.downloads
        job = registry.submit(e.name, "setup", {"id": e.id, "url": url or ""}, self._work(entry, url))
        if job.state == "running":
            return
        self.job = job
        self._cancel_asked = False
        self._show_running()
        registry.start(job)

    def _work(self, entry: CatalogEntry | SetupSource, url: str | None) -> Work:
        """The set-up as a job's work: the pipeline, stopped by the job's Pause and Cancel, its bytes,
        speed and time left in the job."""
        allow_http = self.allow_http

        def work(control: Control) -> SetupState:
            pipeline = SetupPipeline(entry, self.machine, url=url, downloader=Downloader(allow_http=allow_http),
                                     cancel=control.cancelled, pause=control.paused, transfer=control.progress)
            return pipeline.run(control.report)

        return work

    def _catalog_entry(self, job: Job) -> CatalogEntry:
        entry = next((e for e in load_catalog() if e.id == job.key.get("id")), None)
        if entry is None:
            raise KeyError(f"{job.name} is no longer in the model list")
        return entry

    def _work_for_job(self, job: Job) -> Work:
        """A set-up listed in the record of the last run, to resume: its catalog entry and address."""
        return self._work(self._catalog_entry(job), job.key.get("url") or None)

    def _discard(self, job: Job) -> None:
        discard_partial(self._catalog_entry(job))

    @property
    def op(self) -> Job | None:
        """The set-up running on this page, if one is."""
        return self.job if self.job is not None and self.job.state == "running" else None

    @property
    def running(self) -> bool:
        return self.op is not None

    def cancel(self) -> None:
        if self.op is not None:
            self._cancel_asked = True
            self.downloads.downloads.cancel(self.op.id)

    def _show_running(self) -> None:
        self.start_button.setText("Setting up…")
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)

    def _on_job(self, job_id: str) -> None:
        """A job changed: shown when it is this page's, or a set-up of the selected model that another
        place (the Downloads list, the resume banner) started."""
        job = self.downloads.downloads.get(job_id)
        if job is None or job.kind != "setup":
            return
        if job is not self.job:
            if job.state != "running" or not self.entries or job.key.get("id") != self.entry().id:
                return
            self.job, self._cancel_asked = job, False
            self.error.setVisible(False)
        if self.entries and job.key.get("id") == self.entry().id:  # the bars are the selected model's
            for step, (fraction, text) in list(job.steps.items()):
                self._on_progress(step, -1.0 if fraction is None else fraction, text)
        if job.state == "running":
            if not self.cancel_button.isEnabled():
                self._show_running()
            return
        if self._seen_end == (job.id, job.runs):
            return
        self._seen_end = (job.id, job.runs)
        if job.state == "done":
            self._on_finished(job.result)
        elif job.state == "paused":
            self._done()
            self.start_button.setText("Continue")
            self.status[job.stage].setText(job.note)
        else:
            self._cancel_asked = self._cancel_asked or job.state == "cancelled"
            self._on_failed(job.exception or SetupError(job.stage, job.error or "cancelled"))

    def _on_progress(self, step: str, fraction: float, text: str) -> None:
        bar = self.bars[step]
        if fraction < 0:
            bar.setRange(0, 0)  # busy
        else:
            bar.setRange(0, 1000)
            bar.setValue(int(fraction * 1000))
        if text:
            self.status[step].setText(text)

    def _done(self) -> None:
        self.cancel_button.setEnabled(False)
        self.start_button.setEnabled(True)
        for bar in self.bars.values():
            if bar.maximum() == 0:
                bar.setRange(0, 1000)
        if self.entries and self.models.currentRow() >= 0:
            self._label_start(self.entry())
        else:
            self.start_button.setText("Set up")

    def _on_finished(self, state: SetupState) -> None:
        self._done()
        self.ready.emit(state.final_path)

    def _on_failed(self, exc: BaseException) -> None:
        self._done()
        if self._cancel_asked:
            step = STEP_TITLES[exc.step] if isinstance(exc, SetupError) else "set-up"
            message = f"cancelled during “{step}”; Continue picks up where it stopped"
            self.start_button.setText("Continue")
        else:
            where = STEP_TITLES[exc.step] if isinstance(exc, SetupError) else "Set-up"
            text, details = self._said(exc, self._source_url())
            message = f"{where}: {text}"
            self.start_button.setText("Retry")
            if details:  # no connection: the sentence alone, the error behind "Details"
                self._show_error(text, details)
                self.failed.emit(message)
                return
        self._show_error(f"Set-up stopped: {message}")
        self.failed.emit(message)

    @staticmethod
    def _said(exc: BaseException, url: str | None) -> tuple[str, str]:
        """(the words to show, the technical detail: "" unless no connection could be made)."""
        from app.fetch.hub import endpoint

        return sentence(exc, url, endpoint())

    def _source_url(self) -> str | None:
        """The address the selected model downloads from when it is not the Hub's."""
        e = self.entries[self.models.currentRow()] if self.entries else None
        return self.url.text().strip() or (e.url if e is not None else None) or None
