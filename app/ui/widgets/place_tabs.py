"""A place with parts: a row of tabs at its top (the look of the Models place's, app.qss #placeTabs)
over the part shown. The Models place (app/ui/views/models_view.py) and the Scenarios place (the
article's scenarios and the BFCL bench) are built on it."""

from __future__ import annotations

from typing import cast

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QStackedWidget, QTabBar, QVBoxLayout, QWidget

from app.ui.base import theme
from app.ui.base.props import props


class PlaceTabs(QWidget):
    tab_changed = Signal(int)  # the part shown now

    def __init__(self, parts: list[tuple[str, QWidget]]) -> None:
        """`parts`: (the tab's title, its widget), in the tabs' order."""
        super().__init__()
        self.setObjectName("page")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(theme.metric("space_1"))
        self.tabs = props(QTabBar(), objectName="placeTabs", drawBase=False, expanding=False)
        self.stack = QStackedWidget()
        for title, widget in parts:
            self.tabs.addTab(title)
            self.stack.addWidget(widget)
        self.tabs.currentChanged.connect(self._on_tab)
        layout.addWidget(self.tabs)
        layout.addWidget(self.stack, 1)

    def show_tab(self, index: int) -> None:
        self.tabs.setCurrentIndex(index)
        self.stack.setCurrentIndex(index)

    def part(self, index: int) -> QWidget:
        return cast(QWidget, self.stack.widget(index))

    def _on_tab(self, index: int) -> None:
        self.stack.setCurrentIndex(index)
        self.tab_changed.emit(index)
