"""The status bar's parts: GPU memory (or the machine's summary), the local server's line, the
reply's live speed and the server's button, last so that it stays put while the speed's text grows
and shrinks."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QStatusBar

from app.ui.base.props import props
from app.ui.widgets.model_bar import ElidedLabel

START, STOP = "Start local server", "Stop server"


class StatusBar(QStatusBar):
    def __init__(self, summary: str) -> None:
        super().__init__()
        self.status_label = ElidedLabel(summary, "fact", Qt.TextElideMode.ElideRight)
        self.addWidget(self.status_label, 1)
        # the server's line starts with its URL and elides at its end: the URL and port stay whole
        self.server_label = ElidedLabel("", "fact", Qt.TextElideMode.ElideRight)
        self.server_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.server_label.setMinimumWidth(60)
        self.server_button = QPushButton(START)
        self.server_button.setToolTip("Serves the model loaded here to other programs on this computer (OpenAI "
                                      "chat completions and Responses, Anthropic Messages); Settings → Local "
                                      "server shows the address for Claude Code, Codex and others")
        # as wide for Stop as for Start: the button does not move or resize when the server starts
        fm = self.server_button.fontMetrics()
        widest = max(fm.horizontalAdvance(START), fm.horizontalAdvance(STOP))
        self.server_button.setMinimumWidth(self.server_button.sizeHint().width() - fm.horizontalAdvance(START)
                                           + widest)
        self.readout = props(QLabel(""), objectName="fact")
        self.readout.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.addPermanentWidget(self.server_label, 1)
        self.addPermanentWidget(self.readout)
        self.addPermanentWidget(self.server_button)

    def server_running(self, on: bool) -> None:
        self.server_button.setText(STOP if on else START)

    def set_server_line(self, text: str) -> None:
        """What the server serves; its URL (the line's start) is never elided."""
        self.server_label.setText(text)
        url = text.split(" ", 1)[0] if text.startswith("http") else ""
        self.server_label.setMinimumWidth(max(60, self.server_label.fontMetrics().horizontalAdvance(url + " …") + 4))
