"""The left column: where to go (chat, find a model, set-up, scenarios, engines), new chat, the
conversations with search, rename and delete, and export."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.base.props import props

if TYPE_CHECKING:
    from app.chat.store import Conversation

PAGES = (("chat", "Chat"), ("hub", "Find a model"), ("setup", "Set up"), ("scenarios", "Scenarios"),
         ("engines", "Engines"))


class Sidebar(QWidget):
    navigate = Signal(str)  # page name
    new_chat = Signal()
    conversation_selected = Signal(int)
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    export_requested = Signal(str)  # "md" or "json"

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("sidebar")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 10, 10, 10)
        layout.setSpacing(4)
        self.nav: dict[str, QPushButton] = {}
        for name, title in PAGES:
            button = props(QPushButton(title), objectName="nav")
            button.setCheckable(True)
            button.setAutoExclusive(True)
            button.clicked.connect(lambda _c=False, n=name: self.navigate.emit(n))
            layout.addWidget(button)
            self.nav[name] = button
        layout.addSpacing(8)
        self.new_chat_button = props(QPushButton("New chat"), objectName="primary")
        self.new_chat_button.setToolTip("Ctrl+N")
        self.new_chat_button.clicked.connect(self.new_chat.emit)
        layout.addWidget(self.new_chat_button)
        self.search = props(QLineEdit(), placeholderText="Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._filter)
        layout.addWidget(self.search)
        self.conversations = props(QListWidget(), objectName="conversations")
        self.conversations.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversations.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.conversations.itemSelectionChanged.connect(self._on_selected)
        self.conversations.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.conversations.customContextMenuRequested.connect(self._menu)
        layout.addWidget(self.conversations, 1)
        row = QHBoxLayout()
        self.export_md_button = QPushButton("Export .md")
        self.export_md_button.clicked.connect(lambda: self.export_requested.emit("md"))
        self.export_json_button = QPushButton("Export .json")
        self.export_json_button.clicked.connect(lambda: self.export_requested.emit("json"))
        row.addWidget(self.export_md_button)
        row.addWidget(self.export_json_button)
        layout.addLayout(row)
        self.setMinimumWidth(150)
        self.setMaximumWidth(360)

    def set_page(self, name: str) -> None:
        """Light the page's entry; for a page reached from elsewhere (tune, from the model bar), none."""
        button = self.nav.get(name)
        if button is not None:
            button.setChecked(True)
            return
        for other in self.nav.values():  # exclusive buttons: one can be unchecked only with that off
            if other.isChecked():
                other.setAutoExclusive(False)
                other.setChecked(False)
                other.setAutoExclusive(True)

    def fill(self, conversations: list[Conversation], current: int | None) -> None:
        self.conversations.blockSignals(True)
        self.conversations.clear()
        for c in conversations:
            item = QListWidgetItem(c.title)
            item.setToolTip(c.title)
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            self.conversations.addItem(item)
            if c.id == current:
                item.setSelected(True)
        self.conversations.blockSignals(False)
        self._filter(self.search.text())

    def _filter(self, text: str) -> None:
        words = text.lower().split()
        for i in range(self.conversations.count()):
            item = self.conversations.item(i)
            item.setHidden(bool(words) and not all(w in item.text().lower() for w in words))

    def _on_selected(self) -> None:
        items = self.conversations.selectedItems()
        if items:
            self.conversation_selected.emit(items[0].data(Qt.ItemDataRole.UserRole))

    def _menu(self, pos: QPoint) -> None:
        item = self.conversations.itemAt(pos)
        if item is None:
            return
        cid = item.data(Qt.ItemDataRole.UserRole)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.ask_rename(cid, item.text()))
        menu.addAction("Delete…", lambda: self.ask_delete(cid, item.text()))
        menu.exec(self.conversations.mapToGlobal(pos))

    def ask_rename(self, cid: int, title: str) -> None:
        text, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=title)
        if ok and text.strip():
            self.rename_requested.emit(cid, text.strip())

    def ask_delete(self, cid: int, title: str) -> None:
        answer = QMessageBox.question(self, "Delete conversation", f"Delete “{title}” and all its messages?")
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_requested.emit(cid)
