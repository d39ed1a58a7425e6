"""A code block of an answer, drawn by one widget: its card, the language, a Copy button and the
highlighted lines, which keep their length and scroll sideways under a bar of their own (made when a
line first needs it). The text can be selected with the mouse and copied (Ctrl+C, right click).

One widget, not a card of five (a label, a button, a clipping view and the code's label in layouts):
each widget is styled when it is made and painted on its own at each paint of a streaming answer,
and the code's label laid its text out three more times than the one layout this block makes."""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QPoint, QPointF, QRect, QSize, Qt, QTimer
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QResizeEvent,
    QShowEvent,
    QStaticText,
    QTextOption,
    QWheelEvent,
)
from PySide6.QtWidgets import QMenu, QScrollBar, QWidget

from app.chat.markdown_html import Code
from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.document_view import DocumentView

COPIED_MS = 1500  # how long Copy says "Copied ✓"


@theme.per_theme
def bar_height() -> int:
    """The height of a code block's sideways bar in this theme, from one bar made for the purpose."""
    probe = props(QScrollBar(Qt.Orientation.Horizontal), objectName="codeBar")
    probe.ensurePolished()
    height = probe.sizeHint().height()
    probe.deleteLater()
    return height


class CodeBlock(DocumentView):
    """The card (its background and border from the style sheet), a header with the language and
    Copy, then the code."""

    def __init__(self, piece: Code, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self.piece = piece
        option = QTextOption()
        option.setWrapMode(QTextOption.WrapMode.NoWrap)
        self.doc.setDefaultTextOption(option)
        self.copied = False  # "Copied ✓" shows for a moment after a copy
        self._hover = False  # the mouse over Copy
        self._pressed = False  # Copy pressed, not yet released
        self._scroll = 0  # the code's sideways offset
        self._bar: QScrollBar | None = None
        self._text = QSize()  # the code's laid-out size
        self._fonts()
        self._show_code()

    # -- contents --------------------------------------------------------------------------------

    def show_piece(self, piece: Code) -> None:
        changed = piece.html != self.piece.html
        self.piece = piece
        if changed:
            self._show_code()

    def _show_code(self) -> None:
        self.doc.setHtml(self.piece.html)
        self._measure()
        self.setAccessibleName(f"{self.language()} code")
        self.setAccessibleDescription(self.piece.source)
        self.update()

    def language(self) -> str:
        return self.piece.language or "code"

    def toHtml(self) -> str:  # noqa: N802 (the name a text view has)
        return self.piece.html

    def _fonts(self) -> None:
        """The fonts and the paddings (the 4/8 px grid), again at each change of theme or text size."""
        self.small = QFont(self.font())
        self.small.setPixelSize(theme.px("xs"))
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        mono.setPixelSize(theme.px("sm"))
        self.doc.setDefaultFont(mono)
        self._pad = (theme.metric("space_3"), theme.metric("space_1"), theme.metric("space_2"),
                     theme.metric("space_2"))  # left, top, right, bottom
        self._statics: dict[str, QStaticText] = {}
        self._header = QFontMetrics(self.small).height() + 2 * theme.metric("space_half")
        self._gap = theme.metric("space_half")  # between the header and the code
        self._place_parts()

    def _measure(self) -> None:
        size = self.doc.size()
        text = QSize(math.ceil(size.width()), math.ceil(size.height()))
        if text != self._text:
            self._text = text
            self.updateGeometry()
        self._place()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (a theme or text size change: measure again)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._fonts()  # the document lays its text out again in the new font
            self._measure()
            self.updateGeometry()  # the header's height changed too

    # -- geometry --------------------------------------------------------------------------------

    def _place_parts(self) -> None:
        """Where the header's parts and the lines go (kept: a streaming answer paints blocks often)."""
        inner = self.contentsRect()
        left, top, right, _bottom = self._pad
        code_top = inner.top() + top + self._header + self._gap
        self.code_rect = QRect(inner.left() + left, code_top, max(0, inner.width() - left - right),
                               self._text.height())
        width = QFontMetrics(self.small).horizontalAdvance(self.copy_text()) + 2 * theme.metric("space_1")
        self.copy_rect = QRect(inner.right() - right - width + 1, inner.top() + top, width, self._header)

    def _static(self, text: str) -> QStaticText:
        """The header's words, laid out once (drawText lays them out at each paint)."""
        static = self._statics.get(text)
        if static is None:
            static = self._statics[text] = QStaticText(text)
            static.prepare(font=self.small)
        return static

    def copy_text(self) -> str:
        return "Copied ✓" if self.copied else "Copy"

    def _too_wide(self, width: int) -> bool:
        left, _top, right, _bottom = self._pad
        return self._text.width() > width - (self.width() - self.contentsRect().width()) - left - right

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt's name)
        _left, top, _right, bottom = self._pad
        height = (self.height() - self.contentsRect().height() + top + self._header + self._gap
                  + self._text.height() + bottom)
        return height + (bar_height() if self._too_wide(width) else 0)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(min(self._text.width(), 400), self.heightForWidth(self.width()))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(0, self.heightForWidth(self.width()))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._place()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (a block too wide gets its bar when shown)
        super().showEvent(event)
        self._place()

    # -- sideways scrolling ----------------------------------------------------------------------

    def horizontalScrollBar(self) -> QScrollBar:  # noqa: N802 (the name a scroll area has)
        if self._bar is None:
            self._bar = props(QScrollBar(Qt.Orientation.Horizontal, self), objectName="codeBar")
            self._bar.valueChanged.connect(self._scrolled)
            self._place()
        return self._bar

    def _scrolled(self, x: int) -> None:
        self._scroll = x
        self.forget_picture()
        self.update()

    def _place(self) -> None:
        self._place_parts()
        bar, code = self._bar, self.code_rect
        wide = self._too_wide(self.width())
        if bar is None:
            if wide and self.isVisible():
                self.horizontalScrollBar()  # made now, placed by the call
            return
        bar.setVisible(wide)
        if wide:
            bar.setGeometry(code.left(), code.bottom() + 1, code.width(), bar_height())
            bar.setRange(0, self._text.width() - code.width())
            bar.setPageStep(code.width())
        else:
            bar.setValue(0)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (sideways over the code; up and down scroll the answer)
        if self._bar is not None and self._bar.isVisible() and event.angleDelta().x():
            self._bar.setValue(self._bar.value() - event.angleDelta().x())
            event.accept()
        else:
            event.ignore()

    # -- painting --------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        super().paintEvent(event)  # the card: the style sheet's background, border and corners
        painter = QPainter(self)
        header = self.copy_rect
        painter.setFont(self.small)
        if header.intersects(event.rect()):
            painter.setPen(QColor(theme.color("muted")))
            language = self._static(self.language())
            middle = header.top() + (header.height() - language.size().height()) / 2
            painter.drawStaticText(QPointF(self.code_rect.left(), middle), language)
            if self._hover or self._pressed:
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(QColor(theme.color("hover")))
                radius = theme.metric("radius_sm")
                painter.setRenderHint(QPainter.RenderHint.Antialiasing)
                painter.drawRoundedRect(header, radius, radius)
                painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            painter.setPen(QColor(theme.color("accent_text")))
            words = self._static(self.copy_text())
            painter.drawStaticText(QPointF(header.left() + (header.width() - words.size().width()) / 2,
                                           header.top() + (header.height() - words.size().height()) / 2), words)
        self.draw_document(painter, event.rect())

    def origin(self) -> QPoint:
        return self.code_rect.topLeft() - QPoint(self._scroll, 0)

    def text_area(self) -> QRect:
        return self.code_rect

    # -- Copy and selection ----------------------------------------------------------------------

    def copy_code(self) -> None:
        """Copy the whole block's source, and say so for a moment."""
        QGuiApplication.clipboard().setText(self.piece.source)
        self.copied = True
        self._place_parts()
        self.update()
        QTimer.singleShot(COPIED_MS, self, self._copied_back)

    def _copied_back(self) -> None:
        self.copied = False
        self._place_parts()
        self.update()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton and self.copy_rect.contains(event.position().toPoint()):
            self._pressed = True
            self.update(self.copy_rect)
        else:
            super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        super().mouseMoveEvent(event)
        hover = self.copy_rect.contains(event.position().toPoint())
        if hover != self._hover:
            self._hover = hover
            self.setToolTip("Copy to the clipboard" if hover else "")
            self.update(self.copy_rect)
        if hover:
            self.setCursor(Qt.CursorShape.PointingHandCursor)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self._pressed:
            self._pressed = False
            if self.copy_rect.contains(event.position().toPoint()):
                self.copy_code()
            self.update(self.copy_rect)
        super().mouseReleaseEvent(event)

    def leaveEvent(self, event: QEvent) -> None:  # noqa: N802
        if self._hover:
            self._hover = False
            self.update(self.copy_rect)
        super().leaveEvent(event)

    def context_menu(self, point: QPoint) -> QMenu:
        menu = super().context_menu(point)
        menu.addAction("Copy code", self.copy_code)
        return menu
