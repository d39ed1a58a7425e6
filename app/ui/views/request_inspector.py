"""The request inspector on the Server page: a table of the requests the local server answered (its
log, app/serve/request_log.py), newest first, and the selected one's messages, tools and reply, with
"Copy as curl". The table is refreshed on the GUI thread from a snapshot of the log, never from the
server's thread; rows are inserted at the top and dropped at the bottom, so a selection stays put
while requests come in."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from PySide6.QtCore import QAbstractTableModel, QItemSelection, QModelIndex, QPersistentModelIndex, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.serve.request_log import Entry, RequestLog
from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.elided_label import ElidedLabel

COLUMNS = ("Time", "Client", "API", "Model", "Prompt / cached", "TTFT", "tok/s", "Stop", "Tools")
WIDTHS = (64, 104, 104, 0, 116, 60, 48, 76, 72)  # px; the model's column takes what is left
EMPTY = ("No requests yet. Start the server and point a client at it (the Connect a client tab says how): "
         "each request it answers is listed here, newest first.")
PICK = "Select a request to see what it sent and what it got."
KEPT = "kept while the app runs (the last 500), never written to disk"
Index = QModelIndex | QPersistentModelIndex


def calls_cell(entry: Entry) -> str:
    if not entry.calls:
        return ""
    broken = sum(not c.fits for c in entry.calls)
    return f"{broken} of {len(entry.calls)} ✗" if broken else f"{len(entry.calls)} ✓"  # ✗: breaks its schema


def cells(entry: Entry) -> tuple[str, ...]:
    prompt = "" if entry.prompt_tokens is None else f"{entry.prompt_tokens:,} / {entry.cached_tokens or 0:,}"
    stop = entry.stop if not entry.error else f"error {entry.status}" if entry.status else "no answer"
    return (datetime.fromtimestamp(entry.at).strftime("%H:%M:%S"), entry.client, entry.api,
            entry.model or entry.served, prompt, "" if entry.ttft is None else f"{entry.ttft:.2f} s",
            "" if entry.tps is None else f"{entry.tps:.1f}", stop, calls_cell(entry))


class RequestModel(QAbstractTableModel):
    """The log's entries as rows, newest first."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[Entry] = []

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008 (Qt's names)
        return 0 if parent.isValid() else len(self.entries)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> object:  # noqa: N802
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        entry, column = self.entries[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return cells(entry)[column]
        if role == Qt.ItemDataRole.ForegroundRole and ((column == 7 and entry.error) or
                                                       (column == 8 and entry.calls_fit is False)):
            return QColor(theme.color("error"))
        if role == Qt.ItemDataRole.ToolTipRole:
            tips = {1: entry.user_agent or "no User-Agent", 3: f"{entry.model}, served by {entry.served}",
                    4: "prompt tokens / of those, from the cache", 5: "time to the first token", 7: entry.error,
                    8: "\n".join(f"{c.name}: {'fits its schema' if c.fits else '; '.join(c.errors)}"
                                  for c in entry.calls)}
            return tips.get(column) or None
        if role == Qt.ItemDataRole.UserRole:
            return entry
        return None

    def refresh(self, latest: list[Entry]) -> None:
        """Take the log's snapshot (newest first): the oldest rows it no longer holds go, the new ones
        come in at the top (a cleared log's numbers go on, so every row it had goes)."""
        oldest = latest[-1].number if latest else None
        keep = 0 if oldest is None else sum(e.number >= oldest for e in self.entries)
        if keep < len(self.entries):
            self.beginRemoveRows(QModelIndex(), keep, len(self.entries) - 1)
            del self.entries[keep:]
            self.endRemoveRows()
        newest = self.entries[0].number if self.entries else 0
        fresh = [e for e in latest if e.number > newest]
        if fresh:
            self.beginInsertRows(QModelIndex(), 0, len(fresh) - 1)
            self.entries[:0] = fresh
            self.endInsertRows()


def _text_pane(name: str) -> QPlainTextEdit:
    pane = props(QPlainTextEdit(), objectName=name, readOnly=True, minimumHeight=60)
    pane.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
    return pane


DROPPED = ("(The request's body was let go to keep the log within its memory budget: its figures stay, its "
           "messages and tools do not.)")


def messages_text(entry: Entry) -> str:
    if entry.body_dropped:
        return DROPPED
    return "\n\n".join(f"── {role} ──\n{text}" for role, text in entry.messages()) or "(no messages)"


def tools_text(entry: Entry) -> str:
    if entry.body_dropped:
        return DROPPED
    return "\n\n".join(f"── {name} ──\n{json.dumps(tool, indent=2, ensure_ascii=False)}"
                       for name, tool in entry.tools()) or "(no tools offered)"


def reply_text(entry: Entry) -> str:
    if entry.error:
        return f"No reply: {entry.error}" + (f" (HTTP {entry.status})" if entry.status else "")
    parts = [f"── thinking ──\n{entry.reasoning}"] if entry.reasoning else []
    if entry.text:
        parts.append(f"── answer ──\n{entry.text}")
    for call in entry.calls:
        verdict = "fits the tool's schema" if call.fits else "breaks the tool's schema: " + "; ".join(call.errors)
        parts.append(f"── tool call {call.name} ({verdict}) ──\n"
                     f"{json.dumps(call.arguments, indent=2, ensure_ascii=False)}")
    return "\n\n".join(parts) or "(an empty reply)"


def facts_text(entry: Entry) -> str:
    when = datetime.fromtimestamp(entry.at).strftime("%Y-%m-%d %H:%M:%S")
    asked = f"asked for {entry.model!r}, " if entry.model else ""
    head = (f"{entry.client} · {entry.api}{' (stream)' if entry.stream else ''} · {when} · HTTP {entry.status or '-'}"
            f" · {entry.seconds:.2f} s\n{asked}served by {entry.served or 'no model'} · User-Agent: "
            f"{entry.user_agent or 'none'}")
    if entry.prompt_tokens is None:
        return head
    cached = f" ({entry.cached_tokens:,} from the cache)" if entry.cached_tokens else ""
    return (f"{head}\nprompt {entry.prompt_tokens:,} tokens{cached} · first token in {entry.ttft or 0:.2f} s · "
            f"{entry.generated_tokens or 0:,} tokens at {entry.tps or 0:.1f} tok/s · stopped: {entry.stop}")


class RequestDetail(QWidget):
    """The selected request: its facts, messages, tools and reply, and Copy as curl."""

    def __init__(self, curl: Callable[[Entry], str]) -> None:
        super().__init__()
        self.curl = curl
        self.entry: Entry | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        # one elided line each (the whole line in its tooltip): the pane's height never depends on its width
        self.fact_lines = [ElidedLabel("", "requestFacts", Qt.TextElideMode.ElideRight) for _ in range(3)]
        for line in self.fact_lines:
            layout.addWidget(line)
        self._set_facts(PICK)
        self.tabs = props(QTabWidget(), objectName="requestTabs")
        self.messages, self.tools, self.reply = (_text_pane("requestText") for _ in range(3))
        mono = QFont("monospace")
        self.tools.setFont(mono)
        for pane, title in ((self.messages, "Messages"), (self.tools, "Tools"), (self.reply, "Reply")):
            self.tabs.addTab(pane, title)
        layout.addWidget(self.tabs, 1)
        row = QHBoxLayout()
        self.copy_curl = props(QPushButton("Copy as curl"), objectName="copyCurl", enabled=False,
                               toolTip="The request as a curl command to this server, with its key")
        self.copy_curl.clicked.connect(self._copy_curl)
        row.addWidget(self.copy_curl)
        self.copied = props(QLabel(""), objectName="subtitle", wordWrap=True)
        self.copied.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.copied, 1)
        layout.addLayout(row)
        self._restyle()
        theme.notifier().changed.connect(self._restyle)

    def _restyle(self) -> None:
        self.copy_curl.setIcon(theme.icon("terminal", "text"))

    def _set_facts(self, text: str) -> None:
        lines = text.split("\n")
        for i, label in enumerate(self.fact_lines):
            label.setText(lines[i] if i < len(lines) else "")

    def facts(self) -> str:
        """The facts shown, whole (each line may be elided on screen)."""
        return "\n".join(line.text() for line in self.fact_lines if line.text())

    def show_entry(self, entry: Entry | None) -> None:
        self.entry = entry
        self.copied.setText("")
        self.copy_curl.setEnabled(entry is not None and not entry.body_dropped)
        if entry is None:
            self._set_facts(PICK)
            for pane in (self.messages, self.tools, self.reply):
                pane.setPlainText("")
            return
        self._set_facts(facts_text(entry))
        self.messages.setPlainText(messages_text(entry))
        self.tools.setPlainText(tools_text(entry))
        self.reply.setPlainText(reply_text(entry))
        self.tabs.setTabText(1, f"Tools ({len(entry.tools())})")

    def _copy_curl(self) -> None:
        if self.entry is not None:
            QGuiApplication.clipboard().setText(self.curl(self.entry))
            self.copied.setText("Copied: paste it in a terminal to send the request again.")


class RequestInspector(QWidget):
    """The table, the count with Clear, and the selected request's detail."""

    def __init__(self, log: RequestLog, curl: Callable[[Entry], str]) -> None:
        super().__init__()
        self.log = log
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        self.count = props(QLabel(""), objectName="subtitle", wordWrap=True)
        self.count.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        bar.addWidget(self.count, 1)
        self.clear_button = props(QPushButton("Clear"), objectName="clearRequests",
                                  toolTip="Forget every request listed here")
        self.clear_button.clicked.connect(self.clear)
        bar.addWidget(self.clear_button)
        layout.addLayout(bar)
        self.empty = props(QLabel(EMPTY), objectName="requestsEmpty", wordWrap=True)
        self.empty.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout.addWidget(self.empty)
        self.model = RequestModel()
        self.table = props(QTableView(), objectName="requestTable", alternatingRowColors=True, showGrid=False,
                           wordWrap=False)
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(COLUMNS.index("Model"), QHeaderView.ResizeMode.Stretch)
        self._restyle()
        theme.notifier().changed.connect(self._restyle)
        self.table.selectionModel().selectionChanged.connect(self._on_selected)
        self.detail = RequestDetail(curl)
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.setChildrenCollapsible(False)
        self.split.addWidget(self.table)
        self.split.addWidget(self.detail)
        self.split.setSizes([230, 250])
        layout.addWidget(self.split, 1)
        self._due = QTimer(self, singleShot=True, interval=100)  # a burst of requests: one refresh
        self._due.timeout.connect(self.refresh)
        self.refresh()

    def _restyle(self) -> None:
        """Icons in the theme's colours, columns as wide as the text size wants, three rows at least."""
        self.clear_button.setIcon(theme.icon("trash-2", "text"))
        header, scale = self.table.horizontalHeader(), theme.font_scale()
        for column, width in enumerate(WIDTHS):
            if width:
                header.resizeSection(column, round(width * scale))
        self.table.setMinimumHeight(round(96 * scale))

    def soon(self) -> None:
        """The log changed: refresh once the burst is over (at most 100 ms later)."""
        if not self._due.isActive():
            self._due.start()

    def refresh(self) -> None:
        self.model.refresh(self.log.entries())
        n = len(self.model.entries)
        plural = "" if n == 1 else "s"
        self.count.setText(f"{n} request{plural}, newest first; {KEPT}." if n else f"Requests are {KEPT}.")
        self.empty.setVisible(n == 0)
        self.clear_button.setEnabled(n > 0)
        if self.table.selectionModel().selectedRows() == [] and self.detail.entry is not None:
            self.detail.show_entry(None)

    def clear(self) -> None:
        self.log.clear()
        self.refresh()

    def select(self, row: int) -> None:
        self.table.selectRow(row)

    def _on_selected(self, _selected: QItemSelection, _deselected: QItemSelection) -> None:
        rows = self.table.selectionModel().selectedRows()
        self.detail.show_entry(self.model.entries[rows[0].row()] if rows else None)
