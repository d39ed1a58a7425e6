"""The Models place: one page with tabs for Discover (the Hugging Face Hub browser), Set up (the
catalog and the steps of a set-up, which Discover hands its files to), My models (the files on this
machine) and Engines (remote OpenAI-compatible servers). Each tab keeps the page name it had when it
was a page of its own ("hub", "setup", "my_models", "engines"), so the window navigates to a tab as
it did to a page.
"""

from __future__ import annotations

from typing import cast

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QStackedWidget, QTabBar, QVBoxLayout, QWidget

from app.ui.base import theme
from app.ui.base.props import props

TABS = (("hub", "Discover"), ("setup", "Set up"), ("my_models", "My models"), ("engines", "Engines"))


class ModelsView(QWidget):
    tab_changed = Signal(str)  # the tab's page name

    def __init__(self, pages: dict[str, QWidget]) -> None:
        """`pages`: the widget of each tab, by its page name (every name of TABS)."""
        super().__init__()
        self.setObjectName("page")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(theme.metric("space_1"))
        self.tabs = props(QTabBar(), objectName="placeTabs", drawBase=False, expanding=False)
        self.stack = QStackedWidget()
        self.names = [name for name, _title in TABS]
        for name, title in TABS:
            self.tabs.addTab(title)
            self.stack.addWidget(pages[name])
        self.tabs.currentChanged.connect(self._on_tab)
        layout.addWidget(self.tabs)
        layout.addWidget(self.stack, 1)

    def show_tab(self, name: str) -> None:
        self.tabs.setCurrentIndex(self.names.index(name))
        self.stack.setCurrentIndex(self.names.index(name))

    def page(self, name: str) -> QWidget:
        """The widget of a tab, by its page name."""
        return cast(QWidget, self.stack.widget(self.names.index(name)))

    def current(self) -> str:
        return self.names[self.stack.currentIndex()]

    def _on_tab(self, index: int) -> None:
        self.stack.setCurrentIndex(index)
        self.tab_changed.emit(self.names[index])
