"""The status bar's parts: GPU memory (or the machine's summary), the local server's line and its
button, and the reply's live speed."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QStatusBar

from app.ui.base.props import props
from app.ui.widgets.model_bar import ElidedLabel


class StatusBar(QStatusBar):
    def __init__(self, summary: str) -> None:
        super().__init__()
        self.status_label = ElidedLabel(summary, "fact", Qt.TextElideMode.ElideRight)
        self.addWidget(self.status_label, 1)
        self.server_label = ElidedLabel("", "fact", Qt.TextElideMode.ElideMiddle)
        self.server_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.server_label.setMinimumWidth(60)
        self.server_button = QPushButton("Start local server")
        self.server_button.setToolTip("An OpenAI-compatible endpoint on 127.0.0.1 for other programs, "
                                      "serving the model loaded here")
        self.readout = props(QLabel(""), objectName="fact")
        self.readout.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.addPermanentWidget(self.server_label, 1)
        self.addPermanentWidget(self.server_button)
        self.addPermanentWidget(self.readout)

    def server_running(self, on: bool) -> None:
        self.server_button.setText("Stop server" if on else "Start local server")
