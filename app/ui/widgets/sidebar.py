"""The Chat place's column, beside the icon rail (app/ui/widgets/nav_rail.py): a search box and a
new-chat button, the conversations grouped by date (app/ui/widgets/conversation_list.py) with each
row's menu (rename, pin, export, delete), and the bar that offers Undo after a delete. It says what
the user asked for in signals; the conversations controller acts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.conversation_list import ID, PINNED, ConversationList
from app.ui.widgets.elided_label import ElidedLabel

if TYPE_CHECKING:
    from app.chat.store import Conversation


class Sidebar(QWidget):
    new_chat = Signal()
    conversation_selected = Signal(int)
    rename_requested = Signal(int, str)
    pin_requested = Signal(int, bool)
    delete_requested = Signal(int)
    export_requested = Signal(int, str)  # conversation id, "md" or "json"
    search_changed = Signal(str)
    undo_requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("sidebar")
        layout = QVBoxLayout(self)
        space = theme.metric("space_2")
        layout.setContentsMargins(space, space, space, space)
        layout.setSpacing(theme.metric("space_1"))
        row = QHBoxLayout()
        row.setSpacing(theme.metric("space_1"))
        self.search = props(QLineEdit(), objectName="conversationSearch", placeholderText="Search  (Ctrl+K)")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Find a conversation by a word in its title or its messages")
        self.search.textChanged.connect(self.search_changed.emit)
        self.search_icon = self.search.addAction(theme.icon("search", "muted"),
                                                 QLineEdit.ActionPosition.LeadingPosition)
        row.addWidget(self.search, 1)
        self.new_chat_button = props(QToolButton(), objectName="newChat", toolTip="New chat (Ctrl+N)")
        self.new_chat_button.setAccessibleName("New chat")
        self.new_chat_button.clicked.connect(self.new_chat.emit)
        row.addWidget(self.new_chat_button)
        layout.addLayout(row)
        self.conversations = ConversationList()
        self.conversations.itemSelectionChanged.connect(self._on_selected)
        self.conversations.menu_requested.connect(lambda cid, pos: self._show_menu(cid, pos))  # tests replace it
        self.conversations.renamed.connect(self.rename_requested.emit)
        self.conversations.delete_pressed.connect(self.delete_requested.emit)
        layout.addWidget(self.conversations, 1)
        self.empty = props(QLabel("No conversation holds those words."), objectName="sidebarNote",
                           wordWrap=True, visible=False)
        layout.addWidget(self.empty)
        self.undo_bar = props(QFrame(), objectName="undoBar", visible=False)
        bar = QHBoxLayout(self.undo_bar)
        bar.setContentsMargins(space, theme.metric("space_1"), theme.metric("space_1"), theme.metric("space_1"))
        self.undo_label = ElidedLabel("", "undoText", Qt.TextElideMode.ElideRight)  # a long title is cut
        bar.addWidget(self.undo_label, 1)
        self.undo_button = props(QPushButton("Undo"), objectName="undoButton")
        self.undo_button.clicked.connect(self.undo_requested.emit)
        bar.addWidget(self.undo_button)
        layout.addWidget(self.undo_bar)
        self.setMinimumWidth(150)
        self.setMaximumWidth(360)
        self._restyle()
        theme.notifier().changed.connect(self._restyle)

    def _restyle(self) -> None:
        self.new_chat_button.setIcon(theme.icon("plus", "on_accent", theme.metric("icon_md")))
        self.search_icon.setIcon(theme.icon("search", "muted", theme.metric("icon_sm")))

    def fill(self, groups: list[tuple[str, list[Conversation]]], current: int | None) -> None:
        self.conversations.fill(groups, current)
        self.empty.setVisible(not groups and bool(self.search.text().strip()))

    def focus_search(self) -> None:
        """Ctrl+K: the search box, its text selected to be typed over."""
        self.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.search.selectAll()

    def show_undo(self, title: str) -> None:
        self.undo_label.setText(f"Deleted “{title}”")
        self.undo_bar.setVisible(True)

    def hide_undo(self) -> None:
        self.undo_bar.setVisible(False)

    def _on_selected(self) -> None:
        items = self.conversations.selectedItems()
        if items and items[0].data(ID) is not None:
            self.conversation_selected.emit(items[0].data(ID))

    def row_menu(self, cid: int) -> QMenu:
        """A conversation's menu: rename, pin or unpin, export, delete."""
        item = self.conversations.item_of(cid)
        pinned = bool(item.data(PINNED)) if item is not None else False
        menu = QMenu(self)
        menu.addAction(theme.icon("pencil", "icon"), "Rename", lambda: self.conversations.start_rename(cid))
        menu.addAction(theme.icon("pin-off" if pinned else "pin", "icon"), "Unpin" if pinned else "Pin",
                       lambda: self.pin_requested.emit(cid, not pinned))
        menu.addSeparator()
        for icon, text, fmt in (("file-down", "Export as Markdown…", "md"), ("file-text", "Export as JSON…", "json")):
            menu.addAction(theme.icon(icon, "icon"), text, lambda f=fmt: self.export_requested.emit(cid, f))
        menu.addSeparator()
        menu.addAction(theme.icon("trash-2", "failed"), "Delete", lambda: self.delete_requested.emit(cid))
        return menu

    def _show_menu(self, cid: int, pos: QPoint) -> None:
        menu = self.row_menu(cid)
        menu.exec(self.conversations.viewport().mapToGlobal(pos))
        menu.deleteLater()
