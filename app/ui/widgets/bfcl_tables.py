"""The BFCL bench's three tables (app/ui/views/bfcl_view.py): the kept runs (a box to tick each for the
comparison, a row to pick for its cases), the comparison of the ticked runs side by side, and the cases
of one run. Each is filled from the core's objects as they are and says what the user did (`ticked`,
`picked`); none keeps a state of its own that the view reads back."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from app.bench.bfcl_run import CaseRecord
from app.bench.bfcl_store import Run, comparison, percent
from app.ui.base import theme

RUN_COLUMNS = ("", "Run", "Date", "Device", "Cases", "State", "Non-live", "Live", "Irrel.", "Rel.")
RUN_TIPS = {0: "Tick runs to compare them side by side", 1: "The model, thinking on or off, the mode where it is not "
            "tools through the chat template (FC)", 2: "When the run started",
            4: "Cases judged / cases planned", 5: "complete; stopped (by Stop); cut short (the app closed)",
            6: "BFCL's Non-live AST (%): the mean of simple, multiple, parallel and parallel multiple",
            7: "BFCL's Live AST (%): the live categories, weighted by their cases",
            8: "BFCL's Irrelevance (%): a call is wrong, no function fits the question",
            9: "BFCL's Relevance (%): any call is right, a function fits"}
TITLE_MIN = 200  # px: the Run column's least width (the table scrolls sideways before it gets narrower)
HEAD_CHARS = 34  # a comparison column's head: the model's name cut to this many characters
CASE_COLUMNS = ("Case", "Category", "", "Checker's reason")
ROWS_SHOWN = 7  # a table's height: this many rows before it scrolls


def _cell(text: str, tip: str = "") -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    item.setToolTip(tip or text)
    return item


def _setup(table: QTableWidget, columns: tuple[str, ...], name: str) -> None:
    table.setObjectName(name)
    table.setColumnCount(len(columns))
    table.setHorizontalHeaderLabels(columns)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setWordWrap(False)
    table.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)


def _rows_high(table: QTableWidget, rows: int, bar: bool = True) -> int:
    """The height that shows `rows` rows under the header (and the sideways scroll bar, where `bar`)."""
    header = table.horizontalHeader().sizeHint().height()
    below = table.horizontalScrollBar().sizeHint().height() if bar else 0
    return header + rows * table.verticalHeader().defaultSectionSize() + 2 * table.frameWidth() + below


class RunsTable(QTableWidget):
    """The kept runs, newest first."""

    ticked = Signal(str, bool)  # a run's path, ticked for the comparison or not
    picked = Signal(str)  # a run's path: show its cases

    def __init__(self) -> None:
        super().__init__()
        _setup(self, RUN_COLUMNS, "bfclTable")
        for col, tip in RUN_TIPS.items():
            head = self.horizontalHeaderItem(col)
            if head is not None:
                head.setToolTip(tip)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Fixed)  # the title takes what is left (_fit_title)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Fixed)  # a long CPU name elides
        header.setMinimumSectionSize(40)
        self.setColumnWidth(3, 150)
        self.keys: list[str] = []  # the runs' paths, by row (what a signal names)
        self.itemChanged.connect(self._on_item)
        self.itemSelectionChanged.connect(self._on_pick)

    def show_runs(self, runs: list[Run], states: dict[str, str], ticked: list[str], current: str | None) -> None:
        """`states`: a run's state in words where it is not the file's (one running now)."""
        self.blockSignals(True)
        self.keys = [str(r.path) for r in runs]
        self.setRowCount(len(runs))
        for row, run in enumerate(runs):
            key, info, cols = str(run.path), run.info, run.summary.columns()
            box = QTableWidgetItem()
            box.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsSelectable)
            box.setCheckState(Qt.CheckState.Checked if key in ticked else Qt.CheckState.Unchecked)
            box.setToolTip("Tick to compare this run with others (up to four)")
            self.setItem(row, 0, box)
            cells = (info.title(), info.date[:16], info.device, f"{len(run.records)}/{info.planned_cases}",
                     states.get(key, run.state), *(percent(cols[c]) for c in cols))
            tips = {1: f"{info.title()}\n{info.source}\n{info.dataset}; {info.mode}; max {info.max_tokens} tokens"
                       + (f"\n{info.plan}" if info.plan else "")}
            for col, text in enumerate(cells, start=1):
                self.setItem(row, col, _cell(text, tips.get(col, "")))
        self._fit_title()
        self.clearSelection()
        if current in self.keys:
            self.selectRow(self.keys.index(current))
        self.blockSignals(False)

    def _fit_title(self) -> None:
        """The Run column takes the width the others leave, and never less than TITLE_MIN (the table
        scrolls sideways then, and is as much taller as its scroll bar)."""
        others = sum(self.columnWidth(c) for c in range(self.columnCount()) if c != 1)
        room = self.width() - 2 * self.frameWidth() - (self.verticalScrollBar().sizeHint().width()
                                                       if self.rowCount() > ROWS_SHOWN else 0)
        self.setColumnWidth(1, max(TITLE_MIN, room - others))
        self.setFixedHeight(_rows_high(self, min(max(self.rowCount(), 2), ROWS_SHOWN), bar=room < others + TITLE_MIN))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit_title()

    def _on_item(self, item: QTableWidgetItem) -> None:
        if item.column() == 0 and item.row() < len(self.keys):
            self.ticked.emit(self.keys[item.row()], item.checkState() == Qt.CheckState.Checked)

    def _on_pick(self) -> None:
        rows = {i.row() for i in self.selectedIndexes()}
        if len(rows) == 1:
            self.picked.emit(self.keys[next(iter(rows))])


def column_head(run: Run) -> str:
    """A run in a column's head, on three short lines: the model (cut), the settings, the date."""
    label, _sep, rest = run.info.title().partition(", ")
    if len(label) > HEAD_CHARS:
        label = label[:HEAD_CHARS - 1] + "…"
    return f"{label}\n{rest}\n{run.info.date[:16]}"


class ComparisonTable(QTableWidget):
    """The ticked runs side by side: the leaderboard's columns, each category, the cases (a column a run)."""

    def __init__(self) -> None:
        super().__init__()
        _setup(self, (), "bfclTable")
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.verticalHeader().setVisible(True)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.horizontalHeader().setMinimumSectionSize(120)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def show_runs(self, runs: list[Run]) -> None:
        rows = comparison(runs) if runs else []
        self.clear()
        self.setColumnCount(len(runs))
        self.setRowCount(len(rows))
        for col, run in enumerate(runs):
            head = QTableWidgetItem(column_head(run))
            head.setToolTip(f"{run.info.title()}\n{run.info.date}\n{run.info.device}")
            self.setHorizontalHeaderItem(col, head)
        self.setVerticalHeaderLabels([name for name, _cells in rows])
        for row, (name, cells) in enumerate(rows):
            for col, text in enumerate(cells):
                item = _cell(text, f"{name}: {text}")
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                if row < 4:  # the leaderboard's own columns
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.setItem(row, col, item)
        self.setFixedHeight(_rows_high(self, len(rows)))


class CasesTable(QTableWidget):
    """One run's cases: the id, the category, ✓ or ✗, and the checker's reason."""

    picked = Signal(str)  # a case's id

    def __init__(self) -> None:
        super().__init__()
        _setup(self, CASE_COLUMNS, "bfclTable")
        header = self.horizontalHeader()
        for col in (0, 1, 2):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.setMinimumHeight(_rows_high(self, 4))
        self.setMaximumHeight(_rows_high(self, 9))
        self.ids: list[str] = []
        self.itemSelectionChanged.connect(self._on_pick)

    def show_records(self, records: list[CaseRecord], current: str | None) -> None:
        self.blockSignals(True)
        self.ids = [r.id for r in records]
        self.setRowCount(len(records))
        good, bad = QColor(theme.color("done")), QColor(theme.color("failed"))
        for row, r in enumerate(records):
            self.setItem(row, 0, _cell(r.id))
            self.setItem(row, 1, _cell(r.category))
            mark = _cell("✓" if r.valid else "✗", "correct" if r.valid else "wrong")
            mark.setForeground(good if r.valid else bad)
            mark.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
            self.setItem(row, 2, mark)
            self.setItem(row, 3, _cell(r.reason or "Correct.", r.reason))
        self.clearSelection()
        if current in self.ids:
            self.selectRow(self.ids.index(current))
        self.blockSignals(False)

    def _on_pick(self) -> None:
        rows = {i.row() for i in self.selectedIndexes()}
        if len(rows) == 1:
            self.picked.emit(self.ids[next(iter(rows))])
