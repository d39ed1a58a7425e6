"""An answer on screen: prose in labels, each code block in a card with its language, syntax
colours and a Copy button (app/ui/widgets/code_block.py). Built from app.chat.markdown_html's
pieces; while an answer streams, only the pieces that changed are touched (usually the last one).
Consecutive prose pieces share a label (up to GROUP): a new label costs a style-sheet polish (about
a millisecond), one per paragraph made a fast model's tokens dear."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from app.chat.markdown_html import Code, Colors, Piece, Prose, render, render_more
from app.ui.base import theme
from app.ui.widgets.code_block import CodeBlock
from app.ui.widgets.column_layout import ColumnLayout
from app.ui.widgets.document_view import RichText

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
            if g < len(self.widgets):  # not replaceWidget(): its plain QWidgetItem keeps no size cache, and
                old_widget = self.widgets[g]  # every later layout pass asked the widget for its sizes again
                self.layout_.insertWidget(self.layout_.indexOf(old_widget), widget)
                self.layout_.removeWidget(old_widget)
                old_widget.deleteLater()
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
        label = RichText(self._label_name, self, self.width())  # laid out first at the width it will have
        label.setText("".join(p.html for p in pieces))
        return label

    @staticmethod
    def _update(widget: QWidget, pieces: list[Piece]) -> None:
        if isinstance(pieces[0], Code):
            assert isinstance(widget, CodeBlock)
            widget.show_piece(pieces[0])
        else:
            assert isinstance(widget, RichText)
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
