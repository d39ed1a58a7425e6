"""An answer on screen: prose in labels, each code block in a card with its language, syntax
colours and a Copy button. Built from app.chat.markdown_html's pieces; while an answer streams, only
the pieces that changed are touched (usually the last one). Consecutive prose pieces share a label
(up to GROUP): a new label costs a style-sheet polish (about a millisecond), one per paragraph made
a fast model's tokens dear."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QGuiApplication, QResizeEvent, QTextDocument, QWheelEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollBar,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.markdown_html import Code, Colors, Piece, Prose, render, render_more
from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.column_layout import ColumnLayout

GROUP = 8  # prose pieces (paragraphs, lists, tables) that share one label


class TextLabel(QLabel):
    """A QLabel that lays its text out once for each width it is shown at.

    QLabel lays out rich text again on every heightForWidth() call, and its size hints lay it out at
    four widths more (a golden-ratio search, one line, the widest word); the layouts ask for them each
    time the streaming message grows. A word-wrapped TextLabel takes its width from its column: its
    hints are its height at its own width (remembered until the text, font or style changes), and
    its width hint is the minimum width it was given (a user's bubble: its longest line).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hfw: dict[int, int] = {}

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._hfw.clear()
        super().setText(text)

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        height = self._hfw.get(width)
        if height is None:
            height = self._hfw[width] = super().heightForWidth(width)
        return height

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        if not self.wordWrap():
            return super().sizeHint()
        width = self.width()
        return QSize(self.minimumWidth(), self.heightForWidth(width) if width > 0 else 0)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """No minimum of its own: the height comes from heightForWidth, and a long word is cut at the
        column's edge rather than widening the column past the window (which has no sideways bar).
        QLabel's minimum height for wrapped text assumes a narrow width, which made the transcript
        taller than its messages (a scroll bar and a cut-off first message when everything fits)."""
        return QSize(self.minimumWidth(), 0) if self.wordWrap() else super().minimumSizeHint()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (fonts and styles change the height too)
        self._hfw.clear()
        super().changeEvent(event)


def text_label(object_name: str, fmt: Qt.TextFormat = Qt.TextFormat.PlainText,
               parent: QWidget | None = None) -> TextLabel:
    """A selectable, word-wrapped label; made in its `parent` where it has one already (moved into a
    styled parent later, a polished widget is styled again)."""
    label = TextLabel(parent, objectName=object_name)
    label.setWordWrap(True)
    label.setTextFormat(fmt)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                  | Qt.TextInteractionFlag.LinksAccessibleByMouse)
    label.setOpenExternalLinks(True)
    label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
    return label


def copy_button(source: Callable[[], str], object_name: str = "copyButton",
                parent: QWidget | None = None) -> QToolButton:
    """A "Copy" button that puts source() on the clipboard and says "Copied" for a moment."""
    button = props(QToolButton(parent), objectName=object_name, text="Copy", toolTip="Copy to the clipboard")
    button.setAutoRaise(True)

    def copy() -> None:
        QGuiApplication.clipboard().setText(source())
        button.setText("Copied ✓")
        QTimer.singleShot(1500, button, lambda: button.setText("Copy"))

    button.clicked.connect(copy)
    return button


_measuring: QTextDocument | None = None


def code_size(label: QLabel) -> QSize:
    """The size QLabel.sizeHint() gives an unwrapped rich-text label, from one layout of its text:
    QLabel's own lays it out seven times (at three widths, each undone), and a streaming code block
    is measured at each paint."""
    global _measuring
    if _measuring is None:
        _measuring = QTextDocument()
        _measuring.setDocumentMargin(0)  # as QLabel's own document
    label.ensurePolished()  # the style sheet's font
    _measuring.setDefaultFont(label.font())
    _measuring.setHtml(label.text())
    size, margins = _measuring.size(), label.contentsMargins()
    return QSize(math.ceil(size.width()) + margins.left() + margins.right(),
                 math.ceil(size.height()) + margins.top() + margins.bottom())


@theme.per_theme
def bar_height() -> int:
    """The height of a code block's sideways bar in this theme, from one bar made for the purpose (a
    block measured at a narrow width before it is laid out no longer makes a bar of its own)."""
    probe = props(QScrollBar(Qt.Orientation.Horizontal), objectName="codeBar")
    probe.ensurePolished()
    height = probe.sizeHint().height()
    probe.deleteLater()
    return height


class CodeView(QWidget):
    """Highlighted code that keeps its lines and is as tall as its text (the transcript does the
    vertical scrolling); a line wider than the block scrolls sideways under a bar of its own, made
    when one first needs it. A label in a clipping box: a text browser or a scroll area costs ten
    widgets a block, each styled when made, and a text browser lays its text out after the layout
    asked, moving the whole column again after each paint of a streaming answer."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("code")
        self.text = props(QLabel(self), objectName="codeText")
        self.text.setTextFormat(Qt.TextFormat.RichText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._bar: QScrollBar | None = None
        self._text_size = QSize()  # the label's size hint, asked of Qt once a text
        self._hfw: dict[int, int] = {}  # height for each width, until the text or the style changes
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def set_code_html(self, html: str) -> None:
        self.text.setText(html)
        self._measure()
        self.updateGeometry()

    def _measure(self) -> None:
        self._text_size = code_size(self.text)
        self._hfw.clear()
        self.text.resize(self._text_size)
        self._place()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (a font or style change: measure again)
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange) and self.text.text():
            self._measure()

    def toHtml(self) -> str:  # noqa: N802 (the name a text browser has)
        return self.text.text()

    def horizontalScrollBar(self) -> QScrollBar:  # noqa: N802 (the name a scroll area has)
        if self._bar is None:
            self._bar = props(QScrollBar(Qt.Orientation.Horizontal, self), objectName="codeBar")
            self._bar.valueChanged.connect(lambda x: self.text.move(-x, 0))
            self._place()
        return self._bar

    def _too_wide(self, width: int) -> bool:
        return self._text_size.width() > width

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt's name)
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        height = self._hfw.get(width)
        if height is None:
            height = self._text_size.height()
            if self._too_wide(width):  # room for the bar under the lines (made when it shows)
                height += bar_height()
            self._hfw[width] = height
        return height

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(min(self._text_size.width(), 400), self.heightForWidth(self.width()))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(0, self.heightForWidth(self.width()))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._place()

    def _place(self) -> None:
        bar, width = self._bar, self.width()
        wide = self._too_wide(width)
        if bar is None:
            if wide and self.isVisible():
                self.horizontalScrollBar()  # made now, placed by the call
            return
        bar.setVisible(wide)
        if wide:
            height = bar.sizeHint().height()
            bar.setGeometry(0, self.height() - height, width, height)
            bar.setRange(0, self.text.width() - width)
            bar.setPageStep(width)
        else:
            bar.setValue(0)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (sideways scrolling over the code)
        if self._bar is not None and self._bar.isVisible() and event.angleDelta().x():
            self._bar.setValue(self._bar.value() - event.angleDelta().x())
            event.accept()
        else:
            event.ignore()


class CodeBlock(QFrame):
    def __init__(self, piece: Code, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self.piece: Code = piece
        layout = QVBoxLayout(self)
        layout.setContentsMargins(theme.metric("space_3"), theme.metric("space_1"), theme.metric("space_2"),
                                  theme.metric("space_2"))
        layout.setSpacing(theme.metric("space_half"))
        head = QHBoxLayout()
        self.language = props(QLabel(self), objectName="codeLanguage")  # each made in its parent
        head.addWidget(self.language)
        head.addStretch(1)
        self.copy = copy_button(lambda: self.piece.source, "codeCopy", self)
        head.addWidget(self.copy)
        layout.addLayout(head)
        self.view = CodeView(self)
        layout.addWidget(self.view)
        self.piece = piece
        self.show_piece(piece)

    def show_piece(self, piece: Code) -> None:
        self.piece = piece
        self.language.setText(piece.language or "code")
        self.view.set_code_html(piece.html)


def _groups(pieces: list[Piece]) -> list[tuple[int, int]]:
    """Which pieces each widget shows: a code block alone; consecutive prose up to GROUP pieces in one
    label; the last piece alone (the one a stream grows, so a token re-lays out one short label)."""
    groups: list[tuple[int, int]] = []
    i, last = 0, len(pieces) - 1
    while i <= last:
        j = i + 1
        if isinstance(pieces[i], Prose) and i < last:
            while j < last and j - i < GROUP and isinstance(pieces[j], Prose):
                j += 1
        groups.append((i, j))
        i = j
    return groups


class MarkdownView(QWidget):
    """A Markdown answer as prose labels and code blocks."""

    def __init__(self, object_name: str = "messageText") -> None:
        super().__init__()
        self._label_name = object_name
        self.layout_ = ColumnLayout(self)
        self.layout_.setContentsMargins(0, 0, 0, 0)
        self.layout_.setSpacing(theme.metric("space_2"))
        self.pieces: list[Piece] = []
        self.groups: list[tuple[int, int]] = []  # the pieces (start, end) each widget shows
        self.widgets: list[QWidget] = []
        self.colors = Colors()
        self.highlighted = True
        self.text = ""

    def set_style(self, colors: Colors, highlighted: bool) -> None:
        if (colors, highlighted) != (self.colors, self.highlighted):
            self.colors, self.highlighted = colors, highlighted
            self.set_markdown(self.text, force=True)

    def set_markdown(self, text: str, force: bool = False) -> None:
        """Show `text`; when it grew from the text shown (a streaming reply), only its last blocks are
        parsed and only the widgets whose pieces changed are touched."""
        if not text:
            pieces: list[Piece] = []
        elif force:
            pieces = render(text, self.colors, self.highlighted)
        else:
            pieces = render_more(self.pieces, self.text, text, self.colors, self.highlighted)
        self.text = text
        groups = _groups(pieces)
        for g, (start, end) in enumerate(groups):
            now = pieces[start:end]
            if g < len(self.groups):
                old_start, old_end = self.groups[g]
                old = self.pieces[old_start:old_end]
                if isinstance(old[0], Code) == isinstance(now[0], Code):
                    if now != old or force:
                        self._update(self.widgets[g], now)
                    continue
            widget = self._make(now)
            if g < len(self.widgets):
                self.layout_.replaceWidget(self.widgets[g], widget)
                self.widgets[g].deleteLater()
                self.widgets[g] = widget
            else:
                self.layout_.addWidget(widget)
                self.widgets.append(widget)
        for widget in self.widgets[len(groups):]:
            self.layout_.removeWidget(widget)
            widget.deleteLater()
        del self.widgets[len(groups):]
        self.pieces, self.groups = pieces, groups

    def _make(self, pieces: list[Piece]) -> QWidget:
        if isinstance(pieces[0], Code):
            return CodeBlock(pieces[0], self)
        label = text_label(self._label_name, Qt.TextFormat.RichText, self)
        if self.width() > 0:  # its text is laid out first at the width it will have
            label.resize(self.width(), label.height())
        label.setText("".join(p.html for p in pieces))
        return label

    @staticmethod
    def _update(widget: QWidget, pieces: list[Piece]) -> None:
        if isinstance(pieces[0], Code):
            assert isinstance(widget, CodeBlock)
            widget.show_piece(pieces[0])
        else:
            assert isinstance(widget, TextLabel)
            widget.setText("".join(p.html for p in pieces))

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """Its height at the width it has. Qt's own hint lays every piece out again at the hint's
        width, a second width beside the real one, and the layouts keep one: each paint of a
        streaming answer measured every label twice."""
        width = self.width()
        if width <= 0 or not self.isVisible():
            return super().sizeHint()
        return QSize(width, self.heightForWidth(width))

    def code_blocks(self) -> list[CodeBlock]:
        return [w for w in self.widgets if isinstance(w, CodeBlock)]
