"""The transcript: a centred column (at most the theme's column_max wide) of messages
(app/ui/widgets/message_widget.py), their hover actions and versions passed on as positions.

Streaming text is buffered and painted on a timer (at most every FLUSH_MS), and only the message
being written is re-rendered, so the cost of a token does not grow with the transcript and a fast
model cannot flood the event loop. The same timer moves the thinking block's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QApplication, QScrollArea, QVBoxLayout, QWidget

from app.chat.markdown_html import Colors
from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.column_layout import ColumnLayout
from app.ui.widgets.markdown_view import MarkdownView
from app.ui.widgets.message_widget import MessageWidget, ToolCallCard, draft_stats, prompt_stats

__all__ = ["PAGE_SIZE", "MessageWidget", "ToolCallCard", "Transcript", "draft_stats", "prompt_stats"]

FLUSH_MS = 66  # 15 paints a second: a fast model costs the GUI thread less per token, the text still flows
QWIDGETSIZE_MAX = 16_777_215
PAGE_SIZE = 6  # messages per page of the transcript (see Transcript): the streaming page is laid out per paint


def _column(page: QWidget) -> QVBoxLayout:
    return cast(QVBoxLayout, page.layout())


class _Page(QWidget):
    """A page of messages. A full page is frozen: it answers the transcript's layout from the height it
    measured once (its messages at its width) and stops presenting itself as height-for-width, so
    the transcript's layout passes while a reply streams never reach its messages. Without this each
    pass measured every message of every page again (QLabel's height-for-width at two widths): a
    token's cost grew with the transcript. A frozen page measures again when one of its own messages
    changes (a folded block opened, a tool result typed) or its width does."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("transcriptPage")
        self.frozen: int | None = None  # the measured height while frozen

    def freeze(self) -> None:
        self.frozen = None
        self.setMinimumHeight(0)
        self.setMaximumHeight(QWIDGETSIZE_MAX)
        self.frozen = _column(self).totalHeightForWidth(self.width())
        self.setFixedHeight(self.frozen)  # the transcript's layout can neither stretch nor squeeze it

    def thaw(self) -> None:
        self.frozen = None
        self.setMinimumHeight(0)
        self.setMaximumHeight(QWIDGETSIZE_MAX)

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt's name)
        return self.frozen is None and super().hasHeightForWidth()

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return self.frozen if self.frozen is not None else super().heightForWidth(width)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(self.width(), self.frozen) if self.frozen is not None else super().sizeHint()

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(0, self.frozen) if self.frozen is not None else super().minimumSizeHint()

    def event(self, event: QEvent) -> bool:
        if self.frozen is not None and event.type() == QEvent.Type.LayoutRequest:
            handled = super().event(event)
            self.freeze()  # one of its messages changed its size
            return handled
        if (self.frozen is not None and event.type() == QEvent.Type.Resize
                and cast(QResizeEvent, event).oldSize().width() != cast(QResizeEvent, event).size().width()):
            handled = super().event(event)
            self.freeze()  # a new width: its messages wrap differently
            return handled
        return super().event(event)


class Transcript(QScrollArea):
    """The message list, with a streaming message at the end while a reply is written."""

    edit_requested = Signal(int)  # position
    regenerate_requested = Signal(int)
    delete_requested = Signal(int)
    version_requested = Signal(int, int)  # position, the index of the version to show
    tool_results_ready = Signal(int, list)  # position of the assistant message, results
    cleared = Signal()  # every message removed (another conversation, a new chat)
    painting = Signal()  # a paint of the streaming reply is due: what else changes with it, now (the readout)

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("transcript")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = props(QWidget(), objectName="transcriptInner")
        outer = ColumnLayout(inner)
        theme.pad(outer, "space_6", "space_4")  # the sides widen past column_max (resizeEvent)
        outer.setSpacing(theme.metric("space_4"))
        # Messages live in pages of PAGE_SIZE, each a widget with its own layout: a streaming reply
        # invalidates only its page's layout (the pages above keep theirs, and answer the layout's
        # questions from their caches), and a finished reply stays where it was written (moving it
        # to another parent would re-polish and re-measure every label in it).
        self.pages_layout = outer
        self.pages: list[_Page] = []
        outer.addStretch(1)
        self.setWidget(inner)
        self.messages: list[MessageWidget] = []
        self.streaming: MessageWidget | None = None
        self._pending = {"reasoning": "", "answer": ""}
        self._timer = QTimer(self)
        self._timer.setInterval(FLUSH_MS)
        self._timer.timeout.connect(self.flush)
        self.flushes = 0  # paints of the streaming message (tests and the UI benchmark read it)
        # where streamed (kind, text) events wait until the next paint (the chat controller sets it)
        self.source: Callable[[], list[tuple[str, str]]] = list
        self._highlight = True  # syntax colours in code blocks (a setting)
        self.colors = Colors()
        self.verticalScrollBar().rangeChanged.connect(self._follow)
        self._stick_to_bottom = True
        # (index, count) of the versions of the message at a position; the chat controller sets it
        self.versions_of: Callable[[int], tuple[int, int]] = lambda _position: (0, 1)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        """Keep the messages in a centred column at most column_max wide."""
        side = max(theme.metric("space_6"), (event.size().width() - theme.metric("column_max")) // 2)
        margins = self.pages_layout.contentsMargins()
        if margins.left() != side:
            self.pages_layout.setContentsMargins(side, margins.top(), side, margins.bottom())
        super().resizeEvent(event)

    @property
    def highlight(self) -> bool:
        return self._highlight

    @highlight.setter
    def highlight(self, on: bool) -> None:
        self._highlight = on
        self._restyle()

    def set_colors(self, colors: Colors) -> None:
        """The theme's colours for code (called when the theme changes)."""
        self.colors = colors
        self._restyle()

    def _restyle(self) -> None:
        for w in self.messages:
            if isinstance(w.body, MarkdownView):
                w.body.set_style(self.colors, self._highlight)

    def _page(self) -> QVBoxLayout:
        """The layout of the page the next message goes into (a new page when the last is full)."""
        last = self.pages[-1] if self.pages else None
        if last is None or _column(last).count() >= PAGE_SIZE:
            if last is not None:
                last.freeze()
            last = _Page()
            column = ColumnLayout(last)
            column.setContentsMargins(0, 0, 0, 0)
            column.setSpacing(theme.metric("space_4"))
            self.pages_layout.insertWidget(len(self.pages), last)
            self.pages.append(last)
        return _column(last)

    def _drop_empty_pages(self) -> None:
        while self.pages and _column(self.pages[-1]).count() == 0:
            page = self.pages.pop()
            self.pages_layout.removeWidget(page)
            page.deleteLater()
        if self.pages:
            self.pages[-1].thaw()  # the last page takes new messages again

    def clear(self) -> None:
        for w in self.messages:
            w.setParent(None)
            w.deleteLater()
        self.messages.clear()
        self.streaming = None
        self._drop_empty_pages()
        self.cleared.emit()

    def add_message(self, role: str, content: str, reasoning: str = "", stats: dict | None = None,
                    tool_calls: list[dict] | None = None) -> MessageWidget:
        column = self._page()
        w = MessageWidget(role, content, reasoning, stats, position=len(self.messages), colors=self.colors,
                          highlighted=self._highlight, parent=column.parentWidget())
        w.edit_requested.connect(lambda m: self.edit_requested.emit(m.position))
        w.regenerate_requested.connect(lambda m: self.regenerate_requested.emit(m.position))
        w.delete_requested.connect(lambda m: self.delete_requested.emit(m.position))
        w.version_requested.connect(lambda m, index: self.version_requested.emit(m.position, index))
        w.tool_results_ready.connect(lambda m, results: self.tool_results_ready.emit(m.position, results))
        if tool_calls:
            w.set_tool_calls(tool_calls)
        if role in ("user", "assistant"):
            w.set_version(*self.versions_of(w.position))
        column.addWidget(w)
        self.messages.append(w)
        self._stick_to_bottom = True
        return w

    def remove_from(self, position: int) -> None:
        for w in self.messages[position:]:
            w.setParent(None)
            w.deleteLater()
        del self.messages[position:]
        self._drop_empty_pages()

    # -- streaming ------------------------------------------------------------

    def begin_reply(self) -> MessageWidget:
        self.streaming = self.add_message("assistant", "")
        self.streaming.set_streaming(True)
        self._pending = {"reasoning": "", "answer": ""}
        self._timer.start()
        return self.streaming

    def append(self, kind: str, text: str) -> None:
        self._pending[kind] += text
        w = self.streaming
        if w is not None:  # the thinking clock runs from the first reasoning token to the first answer token
            if kind == "reasoning":
                w.thinking.start()
            elif w.thinking.live():
                w.thinking.stop()

    def flush(self) -> None:
        w = self.streaming
        if w is None:
            return
        for kind, text in self.source():
            self.append(kind, text)
        self.painting.emit()
        reasoning, answer = self._pending["reasoning"], self._pending["answer"]
        if w.thinking.live():  # the clock moves while the model thinks, tokens or not
            text = w.thinking.text()
            if text != w.reasoning_toggle.text():  # a tenth of a second passed
                w.reasoning_toggle.setText(text)
        if not reasoning and not answer:
            return
        self._pending = {"reasoning": "", "answer": ""}
        if reasoning:
            w.set_reasoning(w.reasoning + reasoning, expanded=True if not w.content else None)
        if answer:
            first = not w.content
            w.set_content(w.content + answer)
            if first and w.reasoning:
                w.set_reasoning(w.reasoning, expanded=False)  # the answer started: fold the reasoning
        self.flushes += 1
        self._settle(w.body, w.thinking)

    def _settle(self, *changed: QWidget) -> None:
        """Lay the column out now, in one pass: left to Qt, each level of nested layouts waits for the
        next turn of the event loop, and the window paints each half-done layout in between (three
        paints of the whole column a flush, the text jumping under the reader)."""
        inner, seen = self.widget(), set()
        for start in changed:
            widget: QWidget | None = start
            while widget is not None and widget is not inner and id(widget) not in seen:
                seen.add(id(widget))
                widget.updateGeometry()  # its parent's layout asks it for its size again
                widget = widget.parentWidget()
        if inner is not None:
            QApplication.sendEvent(inner, QEvent(QEvent.Type.LayoutRequest))  # the scroll area sizes it now

    def end_reply(self, stats: dict | None = None) -> MessageWidget | None:
        self.flush()
        self._timer.stop()
        w, self.streaming = self.streaming, None
        if w is not None:
            w.set_streaming(False)
            if stats is not None and w.thinking.seconds is not None:  # saved with the reply: shown when reopened
                stats["thinking_seconds"] = round(w.thinking.seconds, 1)
            w.set_reasoning(w.reasoning, expanded=False)
            w.set_stats(stats or {})
        return w

    def _follow(self, _min: int, maximum: int) -> None:
        if self._stick_to_bottom:
            self.verticalScrollBar().setValue(maximum)
