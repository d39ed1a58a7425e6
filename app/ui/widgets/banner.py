"""The window's message banner (app/ui/base/messages.py shows its errors and warnings here): the
message's sentence, and where it has technical details (a signal, a frame, a log path) a "Details"
link that shows them under it and hides them again (app/ui/widgets/details_label.py); a click
anywhere else dismisses the banner."""

from __future__ import annotations

from PySide6.QtGui import QMouseEvent

from app.ui.widgets.details_label import DetailsLabel


class Banner(DetailsLabel):
    suffix = "   (click to dismiss)"

    def __init__(self) -> None:
        super().__init__("errorBanner")
        self.setVisible(False)

    def show_message(self, sentence: str, details: str = "") -> None:
        super().show_message(sentence, details)
        self.setVisible(True)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        self._link_clicked = False
        super().mouseReleaseEvent(event)  # a click on the link toggles the details (linkActivated)
        if not self._link_clicked and not self.hasSelectedText():
            self.setVisible(False)
