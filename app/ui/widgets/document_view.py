"""Rich text drawn from a QTextDocument the widget owns: laid out once for each text and width, the
words selectable with the mouse (Ctrl+C, a right click's menu), links opened in the browser.

A QLabel lays rich text out again at each height-for-width question (at the width asked, then back
at its own), again in the paint after each change, and at widths of its own for its size hints; a
streaming answer asked all of it at each paint. Here the document keeps the layout of the width it
is shown at, and a paint only draws."""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QPoint, QPointF, QRect, QRectF, QSize, Qt, QUrl
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QContextMenuEvent,
    QDesktopServices,
    QFocusEvent,
    QGuiApplication,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPixmap,
    QPixmapCache,
    QResizeEvent,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QFrame, QMenu, QSizePolicy, QWidget


class DocumentView(QFrame):
    """A document drawn at `origin()` inside `text_area()`, with a mouse selection and links."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.doc = QTextDocument(self)
        self.doc.setUndoRedoEnabled(False)
        self.doc.setDocumentMargin(0)
        self.selection = QTextCursor(self.doc)
        self._selecting = False
        self._pressed_link = ""  # a link pressed and not yet released: a click opens it
        self._picture: QPixmapCache.Key | None = None  # the document drawn, while Qt's cache keeps it
        self.doc.contentsChanged.connect(self.forget_picture)
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # Ctrl+C copies the selection
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)  # as wide as its column, as tall as its text at that width
        self.setSizePolicy(policy)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt's name)
        return True

    def origin(self) -> QPoint:
        """Where the document's top left is drawn."""
        return QPoint(0, 0)

    def text_area(self) -> QRect:
        """The part of the widget the document shows in."""
        return self.rect()

    def draw_document(self, painter: QPainter, exposed: QRect) -> None:
        """Draw the document's part in `exposed`. Without a selection it is drawn once into a picture
        kept in Qt's pixmap cache, until the text, the width, the scroll or the style changes: a
        streaming answer moves up at each paint, and redrawing every word on screen (tables most)
        was the largest part of a paint."""
        area = self.text_area()
        clip = area.intersected(exposed)
        if clip.isEmpty():
            return
        ratio = self.devicePixelRatioF()
        pixels = area.width() * area.height() * ratio * ratio
        if self.selection.hasSelection() or pixels * 4 > QPixmapCache.cacheLimit() * 1024 // 4:
            painter.save()  # a selection, or a text too large for a quarter of the cache: drawn as it is
            painter.setClipRect(clip)
            self._draw(painter, area.topLeft(), clip)
            painter.restore()
            return
        picture = QPixmap()
        if self._picture is None or not QPixmapCache.find(self._picture, picture):
            picture = QPixmap(math.ceil(area.width() * ratio), math.ceil(area.height() * ratio))
            picture.setDevicePixelRatio(ratio)
            picture.fill(Qt.GlobalColor.transparent)
            drawer = QPainter(picture)
            self._draw(drawer, QPoint(0, 0), QRect(QPoint(0, 0), area.size()))
            drawer.end()
            self._picture = QPixmapCache.insert(picture)
        painter.drawPixmap(area.topLeft(), picture)

    def _draw(self, painter: QPainter, at: QPoint, clip: QRect) -> None:
        """The document drawn with `at` as the text area's top left; `clip` in the same coordinates."""
        shift = self.origin() - self.text_area().topLeft() + at
        painter.translate(shift)
        context = QAbstractTextDocumentLayout.PaintContext()
        palette = QPalette(self.palette())
        palette.setColor(QPalette.ColorRole.Text, palette.color(self.foregroundRole()))
        context.palette = palette
        context.clip = QRectF(clip.translated(-shift))
        if self.selection.hasSelection():
            chosen = QAbstractTextDocumentLayout.Selection()
            chosen.cursor = self.selection
            fmt = QTextCharFormat()
            fmt.setBackground(palette.brush(QPalette.ColorRole.Highlight))
            fmt.setForeground(palette.brush(QPalette.ColorRole.HighlightedText))
            chosen.format = fmt
            context.selections = [chosen]
        self.doc.documentLayout().draw(painter, context)
        painter.translate(-shift)

    def forget_picture(self) -> None:
        """The text, its width, its scroll or its style changed: draw it again at the next paint."""
        if self._picture is not None:
            QPixmapCache.remove(self._picture)
            self._picture = None

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (colours and fonts: a new picture)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange, QEvent.Type.FontChange):
            self.forget_picture()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        if event.size() != event.oldSize():
            self.forget_picture()

    # -- the mouse and the keyboard --------------------------------------------------------------

    def _position(self, point: QPoint) -> int:
        at = QPointF(point - self.origin())
        return max(0, self.doc.documentLayout().hitTest(at, Qt.HitTestAccuracy.FuzzyHit))

    def _link(self, point: QPoint) -> str:
        return self.doc.documentLayout().anchorAt(QPointF(point - self.origin())) \
            if self.text_area().contains(point) else ""

    def selected_text(self) -> str:
        return self.selection.selection().toPlainText()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        point = event.position().toPoint()
        if event.button() == Qt.MouseButton.LeftButton and self.text_area().contains(point):
            self._pressed_link = self._link(point)
            self._selecting = True
            self.selection.setPosition(self._position(point))
            self.update()
        else:
            super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        point = event.position().toPoint()
        if self._selecting:
            self.selection.setPosition(self._position(point), QTextCursor.MoveMode.KeepAnchor)
            if self.selection.hasSelection():
                self._pressed_link = ""  # a drag selects; it does not open the link
            self.update()
        self.setCursor(Qt.CursorShape.PointingHandCursor if self._link(point)
                       else Qt.CursorShape.IBeamCursor if self.text_area().contains(point)
                       else Qt.CursorShape.ArrowCursor)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        link, self._pressed_link, self._selecting = self._pressed_link, "", False
        if link and link == self._link(event.position().toPoint()):
            QDesktopServices.openUrl(QUrl(link))

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (a word)
        point = event.position().toPoint()
        if self.text_area().contains(point):
            self.selection.setPosition(self._position(point))
            self.selection.select(QTextCursor.SelectionType.WordUnderCursor)
            self.update()

    def select_all(self) -> None:
        self.selection.select(QTextCursor.SelectionType.Document)
        self.update()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        if event.matches(QKeySequence.StandardKey.Copy) and self.selection.hasSelection():
            QGuiApplication.clipboard().setText(self.selected_text())
        elif event.matches(QKeySequence.StandardKey.SelectAll):
            self.select_all()
        else:
            super().keyPressEvent(event)

    def focusOutEvent(self, event: QFocusEvent) -> None:  # noqa: N802 (one selection on screen at a time)
        if self.selection.hasSelection() and event.reason() != Qt.FocusReason.PopupFocusReason:
            self.selection.clearSelection()
            self.update()
        super().focusOutEvent(event)

    def context_menu(self, point: QPoint) -> QMenu:
        menu = QMenu(self)
        copy = menu.addAction("Copy", lambda: QGuiApplication.clipboard().setText(self.selected_text()))
        copy.setEnabled(self.selection.hasSelection())
        link = self._link(point)
        if link:
            menu.addAction("Copy link address", lambda: QGuiApplication.clipboard().setText(link))
        menu.addAction("Select all", self.select_all)
        return menu

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802
        self.context_menu(event.pos()).exec(event.globalPos())


class RichText(DocumentView):
    """Prose: rich text wrapped at the widget's width, as tall as its text at that width. Its font and
    colour come from the style sheet (its object name's rule), as a label's do."""

    def __init__(self, object_name: str, parent: QWidget | None = None, width: int = 0) -> None:
        super().__init__(parent)
        self.setObjectName(object_name)
        self._html = ""
        self._heights: dict[int, int] = {}  # height at each width asked, until the text or font changes
        if width > 0:
            self.doc.setTextWidth(width)  # laid out first at the width it will have

    def text(self) -> str:
        return self._html

    def setText(self, html: str) -> None:  # noqa: N802 (a label's name)
        if html == self._html:
            return
        self._html = html
        self._heights.clear()
        self._use_font()
        self.doc.setHtml(html)
        self.setAccessibleName(self.doc.toPlainText().strip())  # what a screen reader says (a label's text was)
        self.updateGeometry()
        self.update()

    def _use_font(self) -> None:
        """The style sheet's font for the text (polished first: one layout, not one before and one after)."""
        self.ensurePolished()
        if self.doc.defaultFont() != self.font():
            self.doc.setDefaultFont(self.font())
            self._heights.clear()
            self.updateGeometry()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (a style's font: lay the text out again)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._use_font()

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt's name)
        height = self._heights.get(width)
        if height is None:
            self._use_font()
            self._set_width(width)  # kept: the width asked is, nearly always, the width it gets
            height = self._heights[width] = math.ceil(self.doc.size().height())
        return height

    def _set_width(self, width: int) -> None:
        if self.doc.textWidth() != width:
            self.doc.setTextWidth(width)
            self.forget_picture()

    def sizeHint(self) -> QSize:  # noqa: N802
        width = self.width()
        return QSize(self.minimumWidth(), self.heightForWidth(width) if width > 0 else 0)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (a long word is cut at the column's edge)
        return QSize(self.minimumWidth(), 0)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._set_width(self.width())

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        super().paintEvent(event)
        self._set_width(self.width())
        painter = QPainter(self)
        self.draw_document(painter, event.rect())
