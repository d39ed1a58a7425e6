"""The Models place: one page with tabs for Discover (the Hugging Face Hub browser), Set up (the
catalog and the steps of a set-up, which Discover hands its files to), My models (the files on this
machine) and Engines (remote OpenAI-compatible servers). Each tab keeps the page name it had when it
was a page of its own ("hub", "setup", "my_models", "engines"), so the window navigates to a tab as
it did to a page.
"""

from __future__ import annotations

from typing import cast

from PySide6.QtWidgets import QWidget

from app.ui.widgets.place_tabs import PlaceTabs

TABS = (("hub", "Discover"), ("setup", "Set up"), ("my_models", "My models"), ("engines", "Engines"))


class ModelsView(PlaceTabs):
    """The tabs of the Models place, each known by its page name."""

    def __init__(self, pages: dict[str, QWidget]) -> None:
        """`pages`: the widget of each tab, by its page name (every name of TABS)."""
        self.names = [name for name, _title in TABS]
        super().__init__([(title, pages[name]) for name, title in TABS])

    def show_page(self, name: str) -> None:
        self.show_tab(self.names.index(name))

    def page(self, name: str) -> QWidget:
        """The widget of a tab, by its page name."""
        return cast(QWidget, self.stack.widget(self.names.index(name)))

    def current(self) -> str:
        return self.names[self.stack.currentIndex()]
