"""An answer on screen: prose drawn from documents of its own (app/ui/widgets/document_view.py),
each code block in a card with its language, syntax colours and a Copy button
(app/ui/widgets/code_block.py). Built from app.chat.markdown_html's pieces; while an answer streams,
only the pieces that changed are touched (usually the last one). Consecutive prose pieces share one
text widget (up to GROUP): each new widget is styled and laid out on its own, and one per paragraph
made a fast model's tokens dear."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QRect, QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from app.chat.markdown_html import Code, Colors, Piece, Prose, render, render_more
from app.ui.base import theme
from app.ui.widgets.code_block import CodeBlock
from app.ui.widgets.document_view import RichText

GROUP = 8  # prose pieces (paragraphs, lists, tables) that share one text widget


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
    """A Markdown answer as prose and code blocks, stacked by the view itself (no QLayout).

    A new block shown in a layout lays out that layout and every one above it, once for each block;
    the view places its blocks itself, from the first that changed, each at its height for the width
    (which the blocks remember), and tells the message above once, when its own height changed."""

    def __init__(self, object_name: str = "messageText") -> None:
        super().__init__()
        self._label_name = object_name
        self.spacing = theme.metric("space_2")
        self.pieces: list[Piece] = []
        self.groups: list[tuple[int, int]] = []  # the pieces (start, end) each widget shows
        self.widgets: list[QWidget] = []
        self.colors = Colors()
        self.highlighted = True
        self.text = ""
        self._heights: dict[int, int] = {}  # the stack's height at each width asked, until a block changes
        self._placed = 0  # the stack's height as last placed
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

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
        first = len(groups)  # the first widget whose height may have changed
        new: list[QWidget] = []
        for g, (start, end) in enumerate(groups):
            now = pieces[start:end]
            if g < len(self.groups):
                old_start, old_end = self.groups[g]
                old = self.pieces[old_start:old_end]
                if isinstance(old[0], Code) == isinstance(now[0], Code):
                    if now != old or force:
                        self._update(self.widgets[g], now)
                        first = min(first, g)
                    continue
            first = min(first, g)
            widget = self._make(now)
            new.append(widget)
            if g < len(self.widgets):
                self._drop(self.widgets[g])
                self.widgets[g] = widget
            else:
                self.widgets.append(widget)
        for widget in self.widgets[len(groups):]:
            self._drop(widget)
        if len(self.widgets) > len(groups):
            first = min(first, len(groups))
        del self.widgets[len(groups):]
        self.pieces, self.groups = pieces, groups
        self._place(first)
        for widget in new:  # placed first: a widget shown unplaced is sized by Qt from its hints
            widget.show()

    @staticmethod
    def _drop(widget: QWidget) -> None:
        widget.hide()
        widget.deleteLater()

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

    # -- the stack -------------------------------------------------------------------------------

    def _place(self, first: int = 0) -> None:
        """Place the blocks from `first` on at their heights for the view's width; when the stack's
        height changed, the message above is told (it asks heightForWidth again)."""
        width = self.width()
        self._heights.clear()
        y = 0
        if 0 < first <= len(self.widgets):
            above = self.widgets[first - 1].geometry()
            y = above.bottom() + 1 + self.spacing
        for widget in self.widgets[first:]:
            height = widget.heightForWidth(width)
            if widget.geometry() != QRect(0, y, width, height):
                widget.setGeometry(0, y, width, height)
            y += height + self.spacing
        total = max(0, y - self.spacing) if self.widgets else 0
        if total != self._placed:
            self._placed = total
            self.updateGeometry()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # a block's height changed (a font, a bar)
            self._place()
            return True
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._place()

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt's name)
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        height = self._heights.get(width)
        if height is None:
            heights = [w.heightForWidth(width) for w in self.widgets]
            height = self._heights[width] = sum(heights) + self.spacing * max(0, len(heights) - 1)
        return height

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """Its height at the width it has (Qt's hint would ask a width of its own)."""
        width = self.width()
        return QSize(width, self.heightForWidth(width) if width > 0 else 0)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(0, 0)

    def code_blocks(self) -> list[CodeBlock]:
        return [w for w in self.widgets if isinstance(w, CodeBlock)]
