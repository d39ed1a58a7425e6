"""The model browser: search the Hugging Face Hub, see every GGUF file of a repo planned for this
machine from its header before any download, and set up the recommended one in one click.

All Hub calls and header reads run as Ops (app/ui/base/ops.py); rows fill in as each header arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.fetch.no_connection import sentence
from app.model.plan import GiB, PlanRequest, confirmation_needed
from app.ui.base import theme
from app.ui.base.ops import Op
from app.ui.base.props import props
from app.ui.widgets.controls import ConfirmBox, what_if_row
from app.ui.widgets.details_label import DetailsLabel
from app.ui.widgets.plan_picture import PlanPicture
from app.ui.widgets.welcome import CLOVER, featured, step_card

if TYPE_CHECKING:
    from app.fetch.hub import HubFile, HubModel, ModelFile
    from app.machine.snapshot import Machine
    from app.ui.base.ops import OpContext

if TYPE_CHECKING:
    from app.fetch.hub import RepoListing
    from app.fetch.setup_pipeline import SetupSource



def size_text(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


class HubView(QWidget):
    setup_requested = Signal(object)  # a SetupSource to set up now: the entry with this page's plan
    catalog_requested = Signal(str)  # a featured catalog entry's id: set it up (or load it, when it is ready)
    load_requested = Signal(str)  # a file already set up (on disk): load it, nothing to download
    planned = Signal()  # every file of the selected repo has its plan (tests wait on it)

    def __init__(self, machine: Machine) -> None:
        super().__init__()
        self.setObjectName("page")
        self.machine = machine  # the window's snapshot: every file is planned against it
        gpus = machine.gpus
        self.listing: RepoListing | None = None
        self.plans: list = []
        self.op: Op | None = None
        self._pending: SetupSource | None = None
        self._generation = 0
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        # the model this app is for first, with its plan here, and one button; its base; the test model
        self.featured_buttons: dict[str, QPushButton] = {}
        for entry_id, name, line in featured(gpus):
            button = props(QPushButton("Set up"), objectName="primary" if entry_id == CLOVER else "")
            button.clicked.connect(lambda _checked=False, e=entry_id: self.catalog_requested.emit(e))
            self.featured_buttons[entry_id] = button
            layout.addWidget(step_card(name, line, button))
        title = props(QLabel("Find a model on the Hugging Face Hub"), objectName="title")
        title.setWordWrap(True)
        layout.addWidget(title)

        row = QHBoxLayout()
        self.query = props(QLineEdit(), placeholderText="Search GGUF models, e.g. Qwen3.6-35B-A3B")
        self.query.returnPressed.connect(self.search)
        row.addWidget(self.query, 1)
        self.search_button = props(QPushButton("Search"), objectName="primary")
        self.search_button.clicked.connect(self.search)
        row.addWidget(self.search_button)
        layout.addLayout(row)

        row2, self.what_if = what_if_row(gpus, self.replan)
        self.token_button = QPushButton("Hub token…")
        self.token_button.setToolTip("For gated and private models: a Hugging Face access token, kept in the OS "
                                     "keyring (or a file only you can read)")
        self.token_button.clicked.connect(self._token_dialog)
        row2.addWidget(self.token_button)
        layout.addLayout(row2)

        self.status = DetailsLabel("fact")  # offline: one sentence, the error behind "Details"
        layout.addWidget(self.status)

        # One column, no splitter: the results are as tall as their rows (up to four), and "Download
        # and set up" sits on the repo's line above its files, in view without scrolling.
        self.results = props(QListWidget(), objectName="conversations")
        self.results.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.results.currentRowChanged.connect(self._on_result_row)
        self.results.setVisible(False)
        layout.addWidget(self.results)

        head = QHBoxLayout()
        self.repo_label = props(QLabel(), objectName="cardTitle")
        self.repo_label.setWordWrap(True)
        head.addWidget(self.repo_label, 1)
        self.setup_button = props(QPushButton("Download and set up"), objectName="primary")
        self.setup_button.setEnabled(False)
        self.setup_button.setVisible(False)
        self.setup_button.clicked.connect(self.setup_selected)
        head.addWidget(self.setup_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(head)
        self.confirm_box = ConfirmBox("Download anyway", self._confirmed)
        self.confirm_text, self.confirm_button = self.confirm_box.text, self.confirm_box.confirm_button
        layout.addWidget(self.confirm_box)
        self.files = QTableWidget(0, 2)
        self.files.setHorizontalHeaderLabels(["File", "On this machine"])
        self.files.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.files.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.files.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.files.verticalHeader().setVisible(False)
        self.files.setWordWrap(True)
        header = self.files.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.files.setColumnWidth(0, 260)
        self.files.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.files.itemSelectionChanged.connect(self._on_file)
        self.files.setVisible(False)
        layout.addWidget(self.files)
        self.detail = props(QLabel(), objectName="fact")
        self.detail.setWordWrap(True)
        layout.addWidget(self.detail)
        self.picture = PlanPicture()
        layout.addWidget(self.picture)
        self.others = props(QLabel(), objectName="subtitle")
        self.others.setWordWrap(True)
        layout.addWidget(self.others)
        layout.addStretch(1)

    # -------------------------------------------------------------- search

    def request(self) -> PlanRequest:
        gb = self.what_if.currentData()
        return PlanRequest(vram_bytes=int(gb * GiB) if gb else None)

    def search(self, query: str | None = None) -> None:
        from app.fetch.hub import Hub

        text = (query if isinstance(query, str) else self.query.text()).strip()
        if query is not None and isinstance(query, str):
            self.query.setText(text)
        self._cancel()
        self.results.blockSignals(True)  # clearing moves the current row through the old results: no repo opens
        self.results.clear()
        self.results.blockSignals(False)
        self._close_repo()
        self.status.setText(f"Searching the Hub for “{text}”…" if text else "Most downloaded GGUF models…")
        self._fit_results()
        self.op = (Op(self, lambda ctx: Hub().search(text), name="Hub search")
                   .success(self._show_results).failure(self._show_error).busy(self.search_button).run())

    def _close_repo(self) -> None:
        """A new search: the repository opened before goes (its late results are dropped), no empty
        file table under the search's outcome."""
        self._generation += 1
        self.listing, self.plans = None, []
        self.files.setRowCount(0)
        self.files.setVisible(False)
        self.setup_button.setVisible(False)
        self.confirm_box.setVisible(False)
        self.repo_label.setText("")
        self.detail.setText("")
        self.others.setText("")
        self.picture.set_plan(None)

    def _show_results(self, found: list[HubModel]) -> None:
        self.results.blockSignals(True)
        self.results.clear()
        self.results.blockSignals(False)
        for m in found:
            updated = m.last_modified.strftime("%Y-%m-%d") if m.last_modified else "?"
            gated = " · gated" if m.gated else ""
            item = QListWidgetItem(f"{m.repo_id}\n⬇ {m.downloads:,}  ♥ {m.likes:,}  · {m.license or 'licence ?'} · "
                                   f"updated {updated}{gated}")
            item.setData(Qt.ItemDataRole.UserRole, m.repo_id)
            item.setToolTip(m.repo_id)
            self.results.addItem(item)
        self._fit_results()
        self.status.setText(f"{len(found)} repositories with GGUF files, most downloaded first." if found
                            else "No GGUF model matches that search.")

    def _show_error(self, exc: BaseException) -> None:
        kind = getattr(exc, "kind", "")
        prefix = {"gated": "Gated: ", "rate-limited": "Rate limited: "}.get(kind, "")
        from app.fetch.hub import endpoint

        text, details = sentence(exc, hub=endpoint())
        self.status.show_message(text if details else f"{prefix}{text}", details)

    def _on_result_row(self, row: int) -> None:
        item = self.results.item(row)
        if item is not None:
            self.open_repo(item.data(Qt.ItemDataRole.UserRole))

    # -------------------------------------------------------------- one repo

    def _cancel(self) -> None:
        if self.op is not None and self.op.running:
            self.op.cancel()

    def open_repo(self, repo_id: str) -> None:
        """List the repo's files, then plan each from its header (rows fill in as headers arrive)."""
        from app.fetch.hub import Hub, plan_files

        self._cancel()
        self._generation += 1
        generation = self._generation
        self.listing, self.plans = None, []
        self.files.setRowCount(0)
        self.picture.set_plan(None)
        self.detail.setText("")
        self.others.setText("")
        self.confirm_box.setVisible(False)
        self.setup_button.setEnabled(False)
        self.setup_button.setVisible(True)
        self.files.setVisible(True)
        self.repo_label.setText(f"{repo_id}: reading the file list…")
        machine, request = self.machine, self.request()

        def work(ctx: OpContext) -> tuple[RepoListing, list[HubFile]]:
            listing = Hub().listing(repo_id)
            ctx.emit(("listing", listing))
            return listing, plan_files(repo_id, listing.models, machine, request,
                                       on_result=lambda fp: ctx.emit(("plan", fp)))

        # results of a repo the user has since left are dropped
        def current(fn: Callable[[Any], None]) -> Callable[[Any], None]:
            return lambda value: fn(value) if generation == self._generation else None

        self.op = Op(self, work, name=f"Reading {repo_id}").items(current(self._on_item)) \
            .success(current(self._on_planned)).failure(current(self._on_repo_error)).run()

    def _on_repo_error(self, exc: BaseException) -> None:
        self.repo_label.setText(self.listing.repo_id if self.listing is not None else "")
        self._show_error(exc)

    def _bring_repo_into_view(self) -> None:
        """The opened repository's line and its "Download and set up" in view (the featured models and
        the search above it push it down a short window)."""
        area = self.parentWidget()
        while area is not None and not isinstance(area, QScrollArea):
            area = area.parentWidget()
        if area is not None and self.setup_button.isVisible():
            area.ensureWidgetVisible(self.repo_label, 0, theme.metric("space_2"))
            area.ensureWidgetVisible(self.setup_button, 0, theme.metric("space_2"))

    def _on_item(self, item: Any) -> None:
        kind, value = item
        if kind == "listing":
            self._show_listing(value)
        else:
            self._show_plan(value)

    def _show_listing(self, listing: RepoListing) -> None:
        self.listing = listing
        gated = " · gated: accept the licence on its page, then set a Hub token" if listing.gated else ""
        self.repo_label.setText(f"{listing.repo_id} · licence {listing.license or '?'} · "
                                f"{len(listing.models)} GGUF model file(s){gated}")
        self.files.setRowCount(len(listing.models))
        QTimer.singleShot(0, self._bring_repo_into_view)
        for row, m in enumerate(listing.models):
            self.files.setItem(row, 0, self._name_item(m, False, self.on_disk(m)))
            self.files.setItem(row, 1, QTableWidgetItem("reading its header…"))
        self.files.resizeRowsToContents()
        self._fit_files()
        extra = []
        if listing.mmproj:
            extra.append("Vision projectors (not models): " + ", ".join(f.path for f in listing.mmproj))
        if listing.other:
            extra.append("Other files: " + ", ".join(f.path for f in listing.other[:8])
                         + (" …" if len(listing.other) > 8 else ""))
        self.others.setText("\n".join(extra))

    def on_disk(self, m: ModelFile) -> str | None:
        """Where this repo's file was set up before, when it is still there (else None)."""
        from app.fetch.catalog import entry_for_hub
        from app.fetch.setup_pipeline import load_state

        if self.listing is None:
            return None
        state = load_state(entry_for_hub(self.listing.repo_id, m).id)
        return state.final_path if state.ready else None

    @staticmethod
    def _name_item(m: ModelFile, recommended: bool, on_disk: str | None = None) -> QTableWidgetItem:
        parts = f" · {len(m.parts)} parts" if len(m.parts) > 1 else ""
        there = " · ✓ on disk" if on_disk else ""
        item = QTableWidgetItem(f"{'★ ' if recommended else ''}{m.name}\n{m.quant or 'quant ?'} · {size_text(m.size)}"
                                f"{parts}{there}")
        item.setToolTip(m.name + (f"\nAlready downloaded and set up: {on_disk}" if on_disk else ""))
        return item

    def _fit_results(self) -> None:
        """The result list as tall as its rows, up to four (then it scrolls)."""
        count = self.results.count()
        self.results.setVisible(count > 0)
        if count:
            rows = sum(self.results.sizeHintForRow(r) for r in range(min(count, 4)))
            self.results.setFixedHeight(rows + 2 * self.results.frameWidth() + 4)

    def _fit_files(self) -> None:
        """The file table as tall as its rows (up to ten), so the plan below it stays in view."""
        rows = sum(self.files.rowHeight(r) for r in range(min(self.files.rowCount(), 10)))
        height = self.files.horizontalHeader().height() + rows + 2 * self.files.frameWidth() + 2
        self.files.setFixedHeight(max(height, 90))

    def _reveal(self, widget: QWidget) -> None:
        """Scroll the page (the window wraps it in a scroll area) so that `widget` is in view."""
        parent = self.parentWidget()
        while parent is not None and not isinstance(parent, QScrollArea):
            parent = parent.parentWidget()
        if parent is not None:
            area = parent
            QTimer.singleShot(0, lambda: area.ensureWidgetVisible(widget))

    def _row_of(self, fp: HubFile) -> int:
        models = self.listing.models if self.listing is not None else []
        return next(i for i, m in enumerate(models) if m is fp.file)

    def _show_plan(self, fp: HubFile) -> None:
        if self.listing is None:
            return
        row = self._row_of(fp)
        item = QTableWidgetItem(fp.summary())
        item.setToolTip(fp.summary() + (f"\n\n{fp.plan.reason}" if fp.plan is not None else ""))
        if not fp.fits:
            item.setForeground(QColor(theme.color("error")))  # the theme's, not a literal
        self.files.setItem(row, 1, item)
        self.files.resizeRowToContents(row)
        self._fit_files()

    def _on_planned(self, result: Any) -> None:
        listing, plans = result
        self.listing, self.plans = listing, plans
        for fp in plans:
            self._show_plan(fp)
        best = next((p for p in plans if p.recommended), None)
        for row, fp in enumerate(plans):
            self.files.setItem(row, 0, self._name_item(fp.file, fp.recommended, self.on_disk(fp.file)))
        if best is not None:
            self.files.selectRow(self._row_of(best))
        elif plans:
            self.files.selectRow(0)
        if not plans:
            self.detail.setText("This repo has no GGUF model file.")
        self.planned.emit()

    def replan(self) -> None:
        """Plan again for another GPU size (headers come from the cache: no download)."""
        if self.listing is not None:
            self.open_repo(self.listing.repo_id)

    # -------------------------------------------------------------- the chosen file

    def selected(self) -> HubFile | None:
        rows = self.files.selectionModel().selectedRows() if self.files.selectionModel() else []
        if not rows or not self.plans:
            return None
        return self.plans[rows[0].row()]

    def _on_file(self) -> None:
        fp = self.selected()
        self.confirm_box.setVisible(False)
        if fp is None:
            self.setup_button.setEnabled(False)
            return
        there = self.on_disk(fp.file)
        self.setup_button.setText("Load (already on disk)" if there else "Download and set up")
        self.picture.set_plan(fp.plan)
        text = fp.summary()
        if fp.recommended:
            text = f"Recommended for {self.what_if.currentText()}: {fp.why}.\n{text}"
        if fp.plan is not None:
            text += f"\n{fp.plan.reason}"
        if there:
            text = f"Already downloaded and set up: {there}\n{text}"
        self.detail.setText(text)
        self.setup_button.setEnabled(fp.error is None and fp.file.missing_parts <= 0)

    def setup_selected(self) -> None:
        """Set up the selected file; confirm first when the plan does not fit, runs on the CPU only or
        uses most of the RAM (a 20 GB download is not started by mistake)."""
        from app.fetch.catalog import entry_for_hub
        from app.fetch.setup_pipeline import SetupSource

        fp = self.selected()
        if fp is None or self.listing is None:
            return
        there = self.on_disk(fp.file)
        if there:  # nothing to download: say so, and load it
            self.status.setText(f"{fp.file.name} is already on disk ({there}): loading it.")
            self.load_requested.emit(there)
            return
        planned = fp.planned
        if planned is not None and self.what_if.currentData() is not None:  # for another card: plan for this one
            from app.model.plan import make_plan

            planned = planned.replanned(make_plan(planned.facts, self.machine.gpus, self.machine.ram))
        entry = entry_for_hub(self.listing.repo_id, fp.file, architecture=fp.facts.arch if fp.facts else None,
                              patch_profile=fp.profile)
        source = SetupSource(entry, planned)  # this page's plan, for this machine
        why = confirmation_needed(planned.plan if planned is not None else None, fp.file.size)
        if not fp.disk_ok:
            why = f"Not enough free disk: {fp.summary()}"
        if why:
            self._pending = source
            self.confirm_box.ask(why, can_proceed=fp.disk_ok)
            self._reveal(self.confirm_box)
            return
        self.setup_requested.emit(source)

    def _confirmed(self) -> None:
        self.confirm_box.setVisible(False)
        if self._pending is not None:
            source, self._pending = self._pending, None
            self.setup_requested.emit(source)

    def _token_dialog(self) -> None:
        from app.base.keystore import key_storage
        from app.fetch.hub import save_token, saved_token

        text, ok = QInputDialog.getText(self, "Hugging Face token",
                                        f"Access token for gated or private models (stored in {key_storage()}).\n"
                                        "Leave empty to remove it.", QLineEdit.EchoMode.Password,
                                        "" if not saved_token() else "••••••••")
        if ok and text != "••••••••":
            save_token(text or None)
            self.status.setText("Hub token saved." if text else "Hub token removed.")
