"""The window's message banner (app/ui/base/messages.py shows its errors and warnings here): the
message's sentence, and where it has technical details (a signal, a frame, a log path) a "Details"
link that shows them under it and hides them again; a click anywhere else dismisses the banner."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QLabel

DISMISS = "   (click to dismiss)"


class Banner(QLabel):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("errorBanner")
        self.setWordWrap(True)
        self.setVisible(False)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.linkActivated.connect(self.toggle_details)
        self.sentence = self.details = ""
        self.details_shown = False
        self._link_clicked = False

    def show_message(self, sentence: str, details: str = "") -> None:
        self.sentence, self.details, self.details_shown = sentence, details, False
        self._render()
        self.setVisible(True)

    def toggle_details(self, _link: str = "") -> None:
        self._link_clicked = True
        self.details_shown = not self.details_shown
        self._render()

    def _render(self) -> None:
        if not self.details:
            self.setTextFormat(Qt.TextFormat.PlainText)
            self.setText(self.sentence + DISMISS)
            return
        self.setTextFormat(Qt.TextFormat.RichText)
        link = "Hide details" if self.details_shown else "Details"
        text = f"{html.escape(self.sentence)} &nbsp;<a href='details'>{link}</a>{html.escape(DISMISS)}"
        if self.details_shown:
            text += "<br><br><tt>" + html.escape(self.details).replace("\n", "<br>") + "</tt>"
        self.setText(text)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        self._link_clicked = False
        super().mouseReleaseEvent(event)  # a click on the link toggles the details (linkActivated)
        if not self._link_clicked and not self.hasSelectedText():
            self.setVisible(False)
