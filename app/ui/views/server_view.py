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

NO_KEY = "none: any program on this computer may use the server (set one in Settings)"


class ServerView(QWidget):
    def __init__(self, server: ServerController) -> None:
        super().__init__()
        self.setObjectName("serverPage")
        self.server = server
        layout = QVBoxLayout(self)
        theme.pad(layout, "space_4", "space_3", "space_2")
        layout.addWidget(props(QLabel("Server"), objectName="title"))
        intro = props(QLabel(INTRO), objectName="subtitle", wordWrap=True)
        intro.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout.addWidget(intro)
        row = QHBoxLayout()
        self.toggle = props(QPushButton(START), objectName="primary")
        self.toggle.clicked.connect(server.toggle)
        row.addWidget(self.toggle)
        self.state = props(QLabel(""), objectName="serverState", wordWrap=True)
        self.state.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        row.addWidget(self.state, 1)
        layout.addLayout(row)
        layout.addWidget(self._address_box())
        self.tabs = props(QTabWidget(), objectName="serverTabs")
        self.inspector = RequestInspector(server.requests, self.curl)
        self.tabs.addTab(self.inspector, "Requests")
        self.setups = ClientSetups()
        scroll = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(self.setups)
        self.tabs.addTab(scroll, "Connect a client")
        layout.addWidget(self.tabs, 1)
        server.requests_changed.connect(self.inspector.soon)
        server.running_changed.connect(lambda _on: self.refresh())
        server.status_changed.connect(lambda _line: self.refresh())
        self.refresh()

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
        for r, (name, value, buttons) in enumerate(lines):
            grid.addWidget(props(QLabel(name), objectName="role"), r, 0)
            value.setFont(mono)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(value, r, 1)
            for c, button in enumerate(buttons):
                grid.addWidget(button, r, 4 - len(buttons) + c)
        grid.setColumnStretch(1, 1)
        return box

    def refresh(self) -> None:
        """On or off, what it serves, the address and the key as they are now."""
        running = self.server.server is not None
        base, key = self.server.address(), self.server.key()
        self.toggle.setText(STOP if running else START)
        self.state.setText(f"Running: {self.server.line}." if running and self.server.line else
                           "Running." if running else f"Stopped. Once started, it listens at {base}.")
        self.address.setText(f"{base}   (OpenAI clients: {base}/v1)")
        self.key.setText(NO_KEY if not key else key if self.show_key.isChecked() else "•" * min(len(key), 24))
        self.show_key.setVisible(bool(key))
        self.copy_key.setEnabled(bool(key))
        self.setups.set_address(base, key)

    def curl(self, entry: Entry) -> str:
        """The request as a curl command to this server, with its key now."""
        return entry.as_curl(self.server.address(), self.server.key() or None)
