"""The bar above the chat: the loaded model in one elided line (everything else in its tooltip and
the Details pop-up), the load progress, and Open model…; it never widens the window."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFontDatabase, QResizeEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)

from app.ui.base.props import props
from app.ui.widgets.plan_picture import PlanPicture

if TYPE_CHECKING:
    from app.model.plan import Plan


class ElidedLabel(QLabel):
    """A one-line label that elides its text to the width it is given (full text in the tooltip),
    so a long model name cannot raise the window's minimum width."""

    def __init__(self, text: str = "", object_name: str = "",
                 mode: Qt.TextElideMode = Qt.TextElideMode.ElideMiddle) -> None:
        super().__init__()
        self.setObjectName(object_name)
        self._full = ""
        self._mode = mode
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._full = text
        self.setToolTip(text)
        self._elide()

    def full_text(self) -> str:
        return self._full

    def text(self) -> str:  # noqa: D401 - the full text, as a QLabel user expects
        return self._full

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(40, super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, self._mode, max(self.width(), 40))
        super().setText(shown)


class ModelBar(QWidget):
    def __init__(self) -> None:
        super().__init__()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.label = ElidedLabel("No model loaded", "modelName")
        row.addWidget(self.label, 1)
        self.chips = ElidedLabel("", "chip", Qt.TextElideMode.ElideRight)
        self.chips.setMaximumWidth(220)
        self.chips.setVisible(False)
        row.addWidget(self.chips)
        self.details = QToolButton()
        self.details.setText("Details")
        self.details.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.details_text = props(QLabel(), objectName="fact")
        self.details_text.setWordWrap(True)
        self.details_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_text.setMinimumWidth(360)
        # the plan's lines are padded into columns: they line up only in a fixed-pitch font
        self.details_text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        menu = QMenu(self.details)
        holder = QWidget()
        box = QVBoxLayout(holder)
        self.picture = PlanPicture()  # the plan the model was loaded with, as a picture
        self.picture.setMinimumWidth(420)
        box.addWidget(self.picture)
        box.addWidget(self.details_text)
        action = QWidgetAction(menu)
        action.setDefaultWidget(holder)
        menu.addAction(action)
        self.details.setMenu(menu)
        self.details.setEnabled(False)
        row.addWidget(self.details)
        self.load_bar = QProgressBar()
        self.load_bar.setRange(0, 1000)
        self.load_bar.setVisible(False)
        self.load_bar.setMaximumWidth(160)
        row.addWidget(self.load_bar)
        self.tune_button = QPushButton("Tune…")
        self.tune_button.setToolTip("Measure the fastest settings for this model on this machine")
        self.tune_button.setEnabled(False)
        row.addWidget(self.tune_button)
        self.open_button = QPushButton("Open model…")
        row.addWidget(self.open_button)

    def set_model(self, title: str, details: str = "", plan: Plan | None = None) -> None:
        self.label.setText(title)
        self.details_text.setText(details)
        self.picture.set_plan(plan)
        self.picture.setVisible(plan is not None)
        self.details.setEnabled(bool(details))

    def set_chips(self, chips: list[str]) -> None:
        self.chips.setText("  ".join(chips))
        self.chips.setToolTip("\n".join(chips))
        self.chips.setVisible(bool(chips))
