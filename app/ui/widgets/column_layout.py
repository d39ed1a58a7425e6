"""A vertical layout that never squeezes its items below the height they need at its width.

Qt lays out a widget's layout, and every layout above it, the moment a new child is shown, at the
sizes those widgets have then. In the transcript that is a height the growing reply has already
outgrown: each level squeezed every message and label under it, and a moment later, resized, gave
the height back. Every label moved and changed size twice and laid its text out again, for each
paragraph or code block a streaming reply added. A ColumnLayout given too little height lays its
items out at the height they need instead (below the fold, until its widget is made taller)."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize
from PySide6.QtWidgets import QVBoxLayout


class ColumnLayout(QVBoxLayout):
    def setGeometry(self, rect: QRect) -> None:  # noqa: N802 (Qt's name)
        if self.hasHeightForWidth():
            needed = self.heightForWidth(rect.width())
            if needed > rect.height():
                rect = QRect(rect.topLeft(), QSize(rect.width(), needed))
        super().setGeometry(rect)
