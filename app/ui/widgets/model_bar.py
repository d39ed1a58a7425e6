"""The bar above the chat: the model picker (the loaded model in one elided line and its state; the
list of this machine's models under it, app/ui/widgets/model_picker.py) with the load progress in
place under it, an eject button, the model's warnings, its Details pop-up (the plan as a picture and
in words) and Tune; it never widens the window."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)

from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.elided_label import ElidedLabel
from app.ui.widgets.model_picker import ModelPicker
from app.ui.widgets.plan_picture import PlanPicture

if TYPE_CHECKING:
    from app.model.plan import Plan

__all__ = ["ElidedLabel", "ModelBar"]  # ElidedLabel's old home: the status bar and the window import it here


class ModelBar(QWidget):
    def __init__(self) -> None:
        super().__init__()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(theme.metric("space_1"))
        column = QVBoxLayout()
        column.setSpacing(0)
        self.picker = ModelPicker()
        self.label = self.picker.label
        self.popup = self.picker.popup
        self.open_button = self.popup.open_button  # "Open a file…", at the foot of the list
        self.find_button = self.popup.find_button  # "Find more models"
        column.addWidget(self.picker)
        self.load_bar = props(QProgressBar(), objectName="loadBar", textVisible=False, visible=False)
        self.load_bar.setRange(0, 1000)
        self.load_bar.valueChanged.connect(self._on_progress)
        column.addWidget(self.load_bar)
        row.addLayout(column, 1)
        self.eject_button = self._icon_button("Eject: unload the model and free its memory")
        self.eject_button.setEnabled(False)
        row.addWidget(self.eject_button)
        self.chips = ElidedLabel("", "chip", Qt.TextElideMode.ElideRight)
        self.chips.setMaximumWidth(220)
        self.chips.setVisible(False)
        row.addWidget(self.chips)
        self.details = self._icon_button("Details: the plan for this machine, and the file")
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
        self.tune_button = self._icon_button("Tune: measure the fastest settings for this model on this machine")
        self.tune_button.setEnabled(False)
        row.addWidget(self.tune_button)
        self._restyle()
        theme.notifier().changed.connect(self._restyle)

    @staticmethod
    def _icon_button(tip: str) -> QToolButton:
        button = props(QToolButton(), objectName="iconButton", toolTip=tip)
        button.setAccessibleName(tip.split(":")[0])
        return button

    def _restyle(self) -> None:
        size = theme.metric("icon_md")
        for button, name in ((self.eject_button, "eject"), (self.details, "info"), (self.tune_button, "gauge")):
            button.setIcon(theme.icon(name, "icon", size))

    def set_model(self, title: str, details: str = "", plan: Plan | None = None) -> None:
        """The picker's line: a loaded model comes with its details; a status line ("Loading x…",
        "No model loaded") without."""
        self.label.setText(title)
        self.details_text.setText(details)
        self.picture.set_plan(plan)
        self.picture.setVisible(plan is not None)
        self.details.setEnabled(bool(details))
        self.eject_button.setEnabled(bool(details))
        self.picker.set_state("loaded" if details else "")

    def _on_progress(self, value: int) -> None:
        if not self.load_bar.isHidden():
            self.picker.set_state(f"loading {value // 10} %")

    def set_chips(self, chips: list[str]) -> None:
        self.chips.setText("  ".join(chips))
        self.chips.setToolTip("\n".join(chips))
        self.chips.setVisible(bool(chips))
