"""The set-up page: pick a model, see how it fits, one button, a progress bar per step."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (QFileDialog, QFrame, QGridLayout, QHBoxLayout, QInputDialog, QLabel, QLineEdit,
                               QListWidget, QListWidgetItem, QProgressBar, QPushButton, QScrollArea, QVBoxLayout,
                               QWidget)

from app.catalog import CatalogEntry, add_user_entry, entry_for_local_file, entry_for_url, load_catalog
from app.download import Downloader
from app.gpu import GpuProbe
from app.setup_pipeline import STEPS, SetupError, SetupPipeline, load_state
from app.ui.jobs import Job

STEP_TITLES = {"plan": "Plan for this machine", "download": "Download", "verify": "Verify",
               "patch": "Patch for llama.cpp", "preflight": "Preflight check", "ready": "Ready"}


class SetupView(QWidget):
    ready = Signal(str)  # the model file to load
    failed = Signal(str)

    def __init__(self, gpus: GpuProbe, allow_http: bool = False) -> None:
        super().__init__(objectName="page")
        self.gpus = gpus
        self.allow_http = allow_http
        self.job: Job | None = None
        # The page scrolls when the window is shorter than it: the error banner or a long plan must
        # not squeeze the model list or the step texts.
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.scroll = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        body = QWidget(objectName="page")
        self.scroll.setWidget(body)
        outer.addWidget(self.scroll)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(QLabel("Set up a model", objectName="title"))
        layout.addWidget(QLabel(gpus.summary(), objectName="subtitle"))

        self.models = QListWidget(objectName="conversations")
        self.entries: list[CatalogEntry] = []
        self._fill()
        self.models.setMaximumHeight(130)
        self.models.currentRowChanged.connect(self._on_model)
        layout.addWidget(self.models)
        self.description = QLabel(objectName="fact")
        self.description.setWordWrap(True)
        layout.addWidget(self.description)
        add_row = QHBoxLayout()
        self.add_url_button = QPushButton("Add a model by URL…")
        self.add_url_button.clicked.connect(self._add_url_dialog)
        self.add_file_button = QPushButton("Add a local GGUF…")
        self.add_file_button.clicked.connect(self._add_file_dialog)
        add_row.addWidget(self.add_url_button)
        add_row.addWidget(self.add_file_button)
        add_row.addStretch(1)
        layout.addLayout(add_row)
        url_row = QHBoxLayout()
        url_row.addWidget(QLabel("Download from"))
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://huggingface.co/…/resolve/main/model.gguf")
        url_row.addWidget(self.url, 1)
        layout.addLayout(url_row)

        buttons = QHBoxLayout()
        self.start_button = QPushButton("Set up", objectName="primary")
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)

        steps = QFrame(objectName="card")
        grid = QGridLayout(steps)
        self.bars: dict[str, QProgressBar] = {}
        self.status: dict[str, QLabel] = {}
        for row, step in enumerate(STEPS):
            grid.addWidget(QLabel(STEP_TITLES[step], objectName="cardTitle"), row, 0)
            bar = QProgressBar()
            bar.setRange(0, 1000)
            bar.setTextVisible(False)
            bar.setMaximumWidth(220)
            grid.addWidget(bar, row, 1)
            status = QLabel(objectName="fact")
            status.setWordWrap(True)
            status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(status, row, 2)
            self.bars[step], self.status[step] = bar, status
        grid.setColumnStretch(2, 1)
        layout.addWidget(steps)
        self.error = QLabel(objectName="errorBanner")
        self.error.setWordWrap(True)
        self.error.setVisible(False)
        layout.addWidget(self.error)
        layout.addStretch(1)
        if self.entries:
            self.models.setCurrentRow(len(self.entries) - 1)

    def _fill(self, select: str | None = None) -> None:
        self.models.clear()
        self.entries = load_catalog()
        for e in self.entries:
            size = f" · {e.size / 1e9:.1f} GB" if e.size else ""
            item = QListWidgetItem(f"{e.name}{size}")
            item.setToolTip(e.description or (e.local_path or e.url or ""))
            self.models.addItem(item)
        if select:
            self.select(select)

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
            except Exception as exc:
                self._show_error(f"Cannot add {path}: {exc}")

    def _add_url_dialog(self) -> None:
        url, ok = QInputDialog.getText(self, "Add a model by URL", "GGUF download URL:")
        if not ok or not url.strip():
            return
        name, ok = QInputDialog.getText(self, "Add a model by URL", "A name for it:")
        if ok:
            try:
                self.add_url(name.strip() or url.rsplit("/", 1)[-1], url.strip())
            except Exception as exc:
                self._show_error(f"Cannot add {url}: {exc}")

    def _show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(True)
        QTimer.singleShot(0, lambda: self.scroll.ensureWidgetVisible(self.error))  # once it is laid out

    def entry(self) -> CatalogEntry:
        return self.entries[self.models.currentRow()]

    def select(self, entry_id: str) -> None:
        for i, e in enumerate(self.entries):
            if e.id == entry_id:
                self.models.setCurrentRow(i)
                return
        raise KeyError(entry_id)

    def _on_model(self, row: int) -> None:
        if row < 0:
            return
        e = self.entries[row]
        self.description.setText(e.description + (f"\n{e.url_note}" if not e.url and e.url_note else ""))
        state = load_state(e.id)
        self.url.setText(e.url or state.url or "")
        for step in STEPS:
            done = state.done.get(step)
            self.bars[step].setValue(1000 if done else 0)
            self.status[step].setText(done or "")

    def start(self) -> None:
        if self.job is not None:
            return
        entry = self.entry()
        url = self.url.text().strip() or None
        self.error.setVisible(False)
        for step in STEPS:
            self.bars[step].setValue(0)
            self.status[step].setText("")

        def work(report, is_cancelled):
            pipeline = SetupPipeline(entry, self.gpus, url=url, downloader=Downloader(allow_http=self.allow_http),
                                     cancel=is_cancelled)
            try:
                return pipeline.run(report)
            except SetupError as exc:
                raise RuntimeError(f"{STEP_TITLES[exc.step]} ({exc.step}): {exc}") from None

        self.job = Job(work)
        self.job.progress.connect(self._on_progress)
        self.job.finished.connect(self._on_finished)
        self.job.failed.connect(self._on_failed)
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.job.start()

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

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
        if self.job is not None:
            self.job.wait()
        self.job = None
        self.start_button.setEnabled(True)
        self.start_button.setText("Set up")
        self.cancel_button.setEnabled(False)

    def _on_finished(self, state) -> None:
        self._done()
        self.ready.emit(state.final_path)

    def _on_failed(self, message: str) -> None:
        self._done()
        for bar in self.bars.values():
            if bar.maximum() == 0:
                bar.setRange(0, 1000)
        self.start_button.setText("Retry")
        self._show_error(f"Set-up stopped: {message}")
        self.failed.emit(message)
