"""A label for a message that may carry technical details (an errno, a signal, a frame, a log path):
it shows the sentence, and a "Details" link that shows the details under it and hides them again.
Plain `setText` shows text with no details, so a label reused for other lines never keeps stale ones."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel


class DetailsLabel(QLabel):
    suffix = ""  # plain words after the sentence (the banner's "click to dismiss")

    def __init__(self, object_name: str = "fact") -> None:
        super().__init__()
        self.setObjectName(object_name)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.linkActivated.connect(self.toggle_details)
        self.sentence = self.details = ""
        self.details_shown = False
        self._link_clicked = False  # the last click was on the link (read by a subclass's click handling)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self.show_message(text)

    def show_message(self, sentence: str, details: str = "") -> None:
        self.sentence, self.details, self.details_shown = sentence, details, False
        self._render()

    def toggle_details(self, _link: str = "") -> None:
        self._link_clicked = True
        self.details_shown = not self.details_shown
        self._render()

    def _render(self) -> None:
        if not self.details:
            self.setTextFormat(Qt.TextFormat.PlainText)
            super().setText(self.sentence + self.suffix)
            return
        self.setTextFormat(Qt.TextFormat.RichText)
        link = "Hide details" if self.details_shown else "Details"
        text = f"{html.escape(self.sentence)} &nbsp;<a href='details'>{link}</a>{html.escape(self.suffix)}"
        if self.details_shown:
            text += "<br><br><tt>" + html.escape(self.details).replace("\n", "<br>") + "</tt>"
        super().setText(text)
