"""The Server page: the local server on or off, its address and key (each with Copy), then two tabs:
the request inspector (app/ui/views/request_inspector.py: every request the server answered, what it
sent and got, Copy as curl) and the copy-paste blocks for each client (Claude Code, Codex, the OpenAI
and Anthropic SDKs; app/ui/widgets/server_panel.py). It follows the server controller's signals; the
requests' log is the controller's, so the list survives a stop and a start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.base import theme
from app.ui.base.props import props
from app.ui.views.request_inspector import RequestInspector
from app.ui.widgets.server_panel import INTRO, START, STOP, ClientSetups

if TYPE_CHECKING:
    from app.serve.request_log import Entry
    from app.ui.controllers.server_controller import ServerController

NO_KEY = "none (set one in Settings)"


class ServerView(QWidget):
    def __init__(self, server: ServerController) -> None:
        super().__init__()
        self.setObjectName("serverPage")
        self.server = server
        layout = QVBoxLayout(self)
        theme.pad(layout, "space_4", "space_3", "space_2")
        row = QHBoxLayout()  # the title, the state in words, on/off: one line, so the requests get the room
        row.setSpacing(theme.metric("space_3"))
        row.addWidget(props(QLabel("Server"), objectName="title"))
        self.state = props(QLabel(""), objectName="serverState", wordWrap=True)
        self.state.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.state, 1)
        self.toggle = props(QPushButton(START), objectName="primary")
        self.toggle.clicked.connect(server.toggle)
        row.addWidget(self.toggle)
        layout.addLayout(row)
        layout.addWidget(self._address_box())
        self.tabs = props(QTabWidget(), objectName="serverTabs")
        self.inspector = RequestInspector(server.requests, self.curl)
        self.tabs.addTab(self.inspector, "Requests")
        connect = QWidget()  # what the server is, then each client's block
        cl = QVBoxLayout(connect)
        theme.pad(cl, "space_2", "space_2", "space_2")
        intro = props(QLabel(INTRO), objectName="subtitle", wordWrap=True)
        intro.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        cl.addWidget(intro)
        self.setups = ClientSetups()
        cl.addWidget(self.setups)
        cl.addStretch(1)
        scroll = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(connect)
        self.tabs.addTab(scroll, "Connect a client")
        layout.addWidget(self.tabs, 1)
        server.requests_changed.connect(self.inspector.soon)
        server.running_changed.connect(lambda _on: self.refresh())
        server.status_changed.connect(lambda _line: self.refresh())
        self.refresh()

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt's name)
        """As short as the page can be: its scroll area then gives it the whole view, and the table and the
        detail share what is there (the labels' preferred heights would make it scroll instead)."""
        return self.minimumSizeHint().height()

    def _address_box(self) -> QFrame:
        box = props(QFrame(), objectName="serverAddress")
        grid = QGridLayout(box)
        grid.setContentsMargins(0, 0, 0, 0)
        mono = QFont("monospace")
        self.address = props(QLabel(""), objectName="serverValue", wordWrap=True)
        self.address.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.key = props(QLabel(""), objectName="serverValue", wordWrap=True)
        self.key.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.show_key = props(QToolButton(), text="Show", checkable=True, toolTip="Show the key")
        self.show_key.toggled.connect(lambda _on: self.refresh())
        self.copy_address = props(QToolButton(), text="Copy", toolTip="Copy the address")
        self.copy_key = props(QToolButton(), text="Copy", toolTip="Copy the key")
        self.copy_address.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.server.address()))
        self.copy_key.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.server.key()))
        lines: tuple[tuple[str, QLabel, list[QToolButton]], ...] = (
            ("Address", self.address, [self.copy_address]), ("API key", self.key, [self.show_key, self.copy_key]))
        column = 0  # both on one row: address, then key
        for name, value, buttons in lines:
            grid.addWidget(props(QLabel(name), objectName="role"), 0, column)
            value.setFont(mono)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(value, 0, column + 1)
            grid.setColumnStretch(column + 1, 1)
            for c, button in enumerate(buttons):
                grid.addWidget(button, 0, column + 2 + c)
            column += 2 + len(buttons)
            grid.setColumnMinimumWidth(column - 1, 0)
        return box

    def refresh(self) -> None:
        """On or off, what it serves, the address and the key as they are now."""
        running = self.server.server is not None
        base, key = self.server.address(), self.server.key()
        self.toggle.setText(STOP if running else START)
        self.state.setText(f"Running: {self.server.line}." if running and self.server.line else
                           "Running." if running else f"Stopped. Once started, it listens at {base}.")
        self.address.setText(base)
        self.address.setToolTip(f"Anthropic clients: {base}\nOpenAI clients: {base}/v1")
        self.key.setText(NO_KEY if not key else key if self.show_key.isChecked() else "•" * min(len(key), 24))
        self.show_key.setVisible(bool(key))
        self.copy_key.setEnabled(bool(key))
        self.setups.set_address(base, key)

    def curl(self, entry: Entry) -> str:
        """The request as a curl command to this server, with its key now."""
        return entry.as_curl(self.server.address(), self.server.key() or None)
