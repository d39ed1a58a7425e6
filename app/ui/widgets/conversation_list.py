"""The saved conversations as a list under date-group headers (Pinned, Today, …), with a "⋯" on the
row under the mouse (and on the selected one) that opens the row's menu, rename in place
(double-click or F2) and the Delete key. The headers are items that cannot be selected; `rows()` gives the
conversations' items alone. What the menu holds and what a rename does are the sidebar's and the
conversations controller's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QModelIndex, QPersistentModelIndex, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QFont, QKeyEvent, QMouseEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemDelegate,
    QAbstractItemView,
    QListWidget,
    QListWidgetItem,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from app.ui.base import theme

if TYPE_CHECKING:
    from PySide6.QtCore import QAbstractItemModel

    from app.chat.store import Conversation

ID = Qt.ItemDataRole.UserRole  # a conversation's id; none on a header
PINNED = Qt.ItemDataRole.UserRole + 1
Index = QModelIndex | QPersistentModelIndex


def _more_rect(row: QRect) -> QRect:
    """Where a row's "⋯" sits: a square at its right end."""
    side = theme.metric("icon_sm") + theme.metric("space_1")
    return QRect(row.right() - side - theme.metric("space_1"), row.center().y() - side // 2, side, side)


class _RowDelegate(QStyledItemDelegate):
    """Draws the group headers as small muted captions, and the "⋯" on the hovered or selected row;
    a click on the "⋯" asks for the row's menu."""

    def __init__(self, view: ConversationList) -> None:
        super().__init__(view)
        self.view = view

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        if index.data(ID) is None:
            self._paint_header(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        state = opt.state
        marked = bool(state & (QStyle.StateFlag.State_MouseOver | QStyle.StateFlag.State_Selected))
        rect: QRect = opt.rect
        if marked:  # the title gives way to the "⋯"
            width = rect.width() - _more_rect(rect).width() - 3 * theme.metric("space_1")
            opt.text = opt.fontMetrics.elidedText(opt.text, Qt.TextElideMode.ElideRight, width)
        widget = opt.widget
        style = widget.style() if widget is not None else self.view.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        if marked:
            self.view.more_icon.paint(painter, _more_rect(rect))

    @staticmethod
    def _paint_header(painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        painter.save()
        font = QFont(option.font)
        font.setPixelSize(theme.px("xs"))
        font.setBold(True)
        painter.setFont(font)
        painter.setPen(option.palette.color(QPalette.ColorRole.PlaceholderText))
        rect = option.rect.adjusted(theme.metric("space_1"), 0, 0, -theme.metric("space_1"))
        painter.drawText(rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom, str(index.data()))
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:  # noqa: N802 (Qt's name)
        size = super().sizeHint(option, index)
        if index.data(ID) is None:  # a header: its caption with room above it, between groups
            return QSize(size.width(), theme.px("xs") + 2 * theme.metric("space_3"))
        return size

    def editorEvent(self, event: QEvent, model: QAbstractItemModel, option: QStyleOptionViewItem,  # noqa: N802
                    index: Index) -> bool:
        if (event.type() == QEvent.Type.MouseButtonRelease and index.data(ID) is not None
                and isinstance(event, QMouseEvent) and event.button() == Qt.MouseButton.LeftButton
                and _more_rect(option.rect).contains(event.position().toPoint())):
            self.view.menu_requested.emit(int(index.data(ID)), event.position().toPoint())
            return True
        return super().editorEvent(event, model, option, index)


class ConversationList(QListWidget):
    menu_requested = Signal(int, QPoint)  # conversation id, where (in the viewport)
    renamed = Signal(int, str)  # conversation id, the new title (not empty, changed)
    delete_pressed = Signal(int)  # the Delete key on a conversation's row

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("conversations")
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setMouseTracking(True)  # the hovered row shows its "⋯"
        self.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked | QAbstractItemView.EditTrigger.EditKeyPressed)
        self.setItemDelegate(_RowDelegate(self))
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._on_context_menu)
        self.itemChanged.connect(self._on_item_changed)
        self.more_icon = theme.icon("ellipsis", "icon", theme.metric("icon_sm"))
        self._deferred: tuple[list[tuple[str, list[Conversation]]], int | None] | None = None
        theme.notifier().changed.connect(self._restyle)

    def _restyle(self) -> None:
        self.more_icon = theme.icon("ellipsis", "icon", theme.metric("icon_sm"))
        self.viewport().update()

    def fill(self, groups: list[tuple[str, list[Conversation]]], current: int | None) -> None:
        """Show these groups (from app.chat.conversation_groups), `current` selected; no signal.
        During a rename in place it waits for the editor to close (a refresh would close it)."""
        if self.state() == QAbstractItemView.State.EditingState:
            self._deferred = (groups, current)
            return
        self.blockSignals(True)
        self.clear()
        for name, conversations in groups:
            header = QListWidgetItem(name)
            header.setFlags(Qt.ItemFlag.NoItemFlags)
            self.addItem(header)
            for c in conversations:
                item = QListWidgetItem(c.title)
                item.setToolTip(c.title)
                item.setData(ID, c.id)
                item.setData(PINNED, c.pinned)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
                self.addItem(item)
                if c.id == current:
                    item.setSelected(True)
        self.blockSignals(False)

    def closeEditor(self, editor: QWidget, hint: QAbstractItemDelegate.EndEditHint) -> None:  # noqa: N802
        super().closeEditor(editor, hint)
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            self.fill(*deferred)

    def rows(self) -> list[QListWidgetItem]:
        """The conversations' items, top to bottom (the headers left out)."""
        return [it for i in range(self.count()) if (it := self.item(i)).data(ID) is not None]

    def headers(self) -> list[str]:
        return [it.text() for i in range(self.count()) if (it := self.item(i)).data(ID) is None]

    def item_of(self, cid: int) -> QListWidgetItem | None:
        return next((it for it in self.rows() if it.data(ID) == cid), None)

    def group_of(self, cid: int) -> str | None:
        """The header a conversation is listed under."""
        group = None
        for i in range(self.count()):
            it = self.item(i)
            if it.data(ID) is None:
                group = it.text()
            elif it.data(ID) == cid:
                return group
        return None

    def start_rename(self, cid: int) -> None:
        item = self.item_of(cid)
        if item is not None:
            self.scrollToItem(item)
            self.editItem(item)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        item = self.currentItem()
        if (event.key() == Qt.Key.Key_Delete and self.state() != QAbstractItemView.State.EditingState
                and item is not None and item.data(ID) is not None):
            self.delete_pressed.emit(int(item.data(ID)))
            return
        super().keyPressEvent(event)

    def _on_context_menu(self, pos: QPoint) -> None:
        item = self.itemAt(pos)
        if item is not None and item.data(ID) is not None:
            self.menu_requested.emit(int(item.data(ID)), pos)

    def _on_item_changed(self, item: QListWidgetItem) -> None:
        """An edit in place ended: a changed, non-empty title is a rename; an empty one is undone."""
        cid, title = item.data(ID), item.text().strip()
        if cid is None:
            return
        if not title or title == item.toolTip():
            self.blockSignals(True)
            item.setText(item.toolTip())
            self.blockSignals(False)
            return
        item.setToolTip(title)
        self.renamed.emit(int(cid), title)
