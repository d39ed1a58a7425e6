"""The transcript: one widget per message, Markdown answers (code blocks with syntax colours and a
Copy button), reasoning in a block that folds.

Streaming text is buffered and painted on a timer (at most every 40 ms), and only the message
being written is re-rendered, so the cost of a token does not grow with the transcript and a fast
model cannot flood the event loop.
"""

from __future__ import annotations

import json
from typing import cast

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.markdown_html import Colors
from app.ui.base import icons
from app.ui.base.props import props
from app.ui.widgets.markdown_view import MarkdownView, copy_button, text_label

FLUSH_MS = 40
QWIDGETSIZE_MAX = 16_777_215
PAGE_SIZE = 6  # messages per page of the transcript (see Transcript): the streaming page is laid out per paint


class ToolCallCard(QFrame):
    """One tool call: its name, arguments, whether they fit the tool's schema, and its result."""

    def __init__(self, call: dict, errors: list[str] | None, result: str | None, editable: bool) -> None:
        super().__init__()
        self.setObjectName("toolCard")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        fn = call.get("function", {})
        self.title = props(QLabel(), objectName="role")
        icons.set_text(self.title, f"🔧 {fn.get('name', '?')}")
        layout.addWidget(self.title)
        self.arguments = text_label("toolArgs")
        self.arguments.setText(json.dumps(fn.get("arguments", {}), indent=2, ensure_ascii=False))
        layout.addWidget(self.arguments)
        if errors is not None:
            verdict = "✓ arguments match the tool's schema" if not errors else "✗ " + "; ".join(errors)
            verdict_label = text_label("stats")
            verdict_label.setText(verdict)
            layout.addWidget(verdict_label)
        self.result = props(QLineEdit(), objectName="toolResult")
        self.result.setPlaceholderText("the tool's result (JSON or text)")
        if result is not None:
            self.result.setText(result)
        self.result.setReadOnly(not editable)
        self.result.setVisible(editable or result is not None)
        layout.addWidget(self.result)


class MessageWidget(QFrame):
    """One message. Assistant messages have a reasoning block, the answer and a stats line."""

    edit_requested = Signal(object)  # self
    regenerate_requested = Signal(object)
    tool_results_ready = Signal(object, list)  # self, [result text per call]

    def __init__(self, role: str, content: str = "", reasoning: str = "", stats: dict | None = None,
                 position: int = -1, colors: Colors | None = None, highlighted: bool = True) -> None:
        super().__init__()
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        self.role, self.position = role, position
        self.content, self.reasoning = content, reasoning
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 10, 14, 10)
        layout.setSpacing(6)
        head = QHBoxLayout()
        head.addWidget(props(QLabel({"user": "You", "tool": "Tool result"}.get(role, "Assistant")), objectName="role"))
        head.addStretch(1)
        self.action = props(QPushButton("Edit" if role == "user" else "Regenerate"), objectName="messageAction")
        self.action.setVisible(role in ("user", "assistant"))
        self.action.setFlat(True)
        self.action.clicked.connect(
            lambda: (self.edit_requested if role == "user" else self.regenerate_requested).emit(self))
        self.copy = copy_button(lambda: self.content, "messageCopy")
        self.copy.setVisible(role in ("user", "assistant"))
        head.addWidget(self.copy)
        head.addWidget(self.action)
        layout.addLayout(head)

        self.reasoning_toggle = props(QToolButton(), objectName="reasoningToggle")
        self.reasoning_toggle.setCheckable(True)
        self.reasoning_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.reasoning_toggle.toggled.connect(self._show_reasoning)
        self.reasoning_label = text_label("reasoning")
        layout.addWidget(self.reasoning_toggle)
        layout.addWidget(self.reasoning_label)

        self.body: MarkdownView | QLabel = (MarkdownView("messageText") if role == "assistant"
                                            else text_label("messageText"))
        if isinstance(self.body, MarkdownView):
            self.body.colors, self.body.highlighted = colors or Colors(), highlighted
        layout.addWidget(self.body)
        self.tool_cards: list[ToolCallCard] = []
        self.tools_box = QVBoxLayout()
        layout.addLayout(self.tools_box)
        self.send_results = props(QPushButton("Send tool results"), objectName="primary")
        self.send_results.setVisible(False)
        self.send_results.clicked.connect(
            lambda: self.tool_results_ready.emit(self, [c.result.text() for c in self.tool_cards]))
        layout.addWidget(self.send_results, 0, Qt.AlignmentFlag.AlignLeft)
        # wraps at its spaces: one long line set the message's minimum width, and a narrow window cut
        # the message (and its Edit and Regenerate) off instead of wrapping it
        self.stats_label = text_label("stats")
        layout.addWidget(self.stats_label)
        self._streaming = False
        self.set_reasoning(reasoning, expanded=False)
        self.set_content(content)
        self.set_stats(stats or {})

    # -- content ------------------------------------------------------------

    def set_tool_calls(self, calls: list[dict], errors: list[list[str]] | None = None,
                       results: list[str] | None = None, editable: bool = False) -> None:
        for card in self.tool_cards:
            card.setParent(None)
        self.tool_cards = []
        for i, call in enumerate(calls):
            card = ToolCallCard(call, errors[i] if errors else None, results[i] if results else None, editable)
            self.tools_box.addWidget(card)
            self.tool_cards.append(card)
        self.send_results.setVisible(editable and bool(calls))

    def set_content(self, text: str) -> None:
        self.content = text
        if isinstance(self.body, MarkdownView):
            self.body.set_markdown(text)
        else:
            self.body.setText(text)
        self.body.setVisible(bool(text) or self.role == "user")

    def set_reasoning(self, text: str, expanded: bool | None = None) -> None:
        self.reasoning = text
        has = bool(text)
        self.reasoning_toggle.setVisible(has)
        if expanded is not None:
            self.reasoning_toggle.setChecked(expanded)
        self.reasoning_label.setText(text)
        self.reasoning_label.setVisible(has and self.reasoning_toggle.isChecked())
        self._label_toggle()

    def _show_reasoning(self, on: bool) -> None:
        self.reasoning_label.setVisible(on and bool(self.reasoning))
        self._label_toggle()

    def _label_toggle(self) -> None:
        arrow = "▾" if self.reasoning_toggle.isChecked() else "▸"
        what = "Thinking…" if self._streaming_reasoning() else f"Reasoning ({len(self.reasoning.split())} words)"
        self.reasoning_toggle.setText(f"{arrow} {what}")

    def _streaming_reasoning(self) -> bool:
        return self._streaming and not self.content

    def set_streaming(self, on: bool) -> None:
        self._streaming = on
        self.action.setEnabled(not on)
        self._label_toggle()

    def set_stats(self, stats: dict) -> None:
        if not stats:
            self.stats_label.setVisible(False)
            return
        if stats.get("stop_reason") == "failed":  # what streamed before the reply (or its engine) failed
            self.stats_label.setText("cut short: the reply failed here")
            self.stats_label.setVisible(True)
            return
        parts = [f"{stats.get('generated_tokens', 0)} tokens",
                 f"{stats.get('generation_tps', 0):.1f} tok/s",
                 f"first token {stats.get('ttft_seconds', 0):.2f} s",
                 prompt_stats(stats)]
        if stats.get("drafted"):
            parts.append(draft_stats(stats))
        if "json_valid" in stats:
            parts.append("JSON ✓ matches the schema" if stats["json_valid"]
                         else "JSON ✗ " + "; ".join(stats.get("json_errors", []))[:200])
        if stats.get("stop_reason") == "stopped":
            parts.append("stopped")
        elif stats.get("stop_reason") == "length":
            parts.append("token limit reached")
        self.stats_label.setText(" · ".join(parts))
        self.stats_label.setVisible(True)


def prompt_stats(stats: dict) -> str:
    """'prompt 27 tokens at 900 tok/s', or what the cache saved: '20 of 27 tokens cached, 7 read at 900
    tok/s', with how many of those the prompt cache restored (another conversation's or an earlier
    run's); a prompt read wholly from the cache has no speed, nor has one of a single token."""
    total, evaluated = stats.get("prompt_tokens", 0), stats.get("prompt_evaluated", stats.get("prompt_tokens", 0))
    if total and evaluated == 0:
        return f"prompt: all {total} tokens cached"
    speed = stats.get("prompt_tps", 0)
    at = f" at {speed:.0f} tok/s" if evaluated > 1 and speed >= 1 else ""
    restored = stats.get("prompt_restored", 0)
    saved = f" ({restored} from the prompt cache)" if restored else ""
    if 0 < evaluated < total:
        return f"prompt: {total - evaluated} of {total} tokens cached{saved}, {evaluated} read{at}"
    return f"prompt {total} tokens{at}"


def draft_stats(stats: dict) -> str:
    """Speculative decoding's part: 'guesses: 30 of 40 accepted, 1.5 tokens a decode' (each accepted
    guess is a decode saved)."""
    drafted, accepted, made = stats.get("drafted", 0), stats.get("accepted", 0), stats.get("generated_tokens", 0)
    per_decode = made / (made - accepted) if made > accepted else 1.0
    return f"guesses: {accepted} of {drafted} accepted, {per_decode:.1f} tokens a decode"


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
    tool_results_ready = Signal(int, list)  # position of the assistant message, results
    cleared = Signal()  # every message removed (another conversation, a new chat)

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("transcript")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = props(QWidget(), objectName="transcriptInner")
        outer = QVBoxLayout(inner)
        outer.setContentsMargins(24, 16, 24, 16)
        outer.setSpacing(12)
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
        self._highlight = True  # syntax colours in code blocks (a setting)
        self.colors = Colors()
        self.verticalScrollBar().rangeChanged.connect(self._follow)
        self._stick_to_bottom = True

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
            column = QVBoxLayout(last)
            column.setContentsMargins(0, 0, 0, 0)
            column.setSpacing(12)
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
        w = MessageWidget(role, content, reasoning, stats, position=len(self.messages), colors=self.colors,
                          highlighted=self._highlight)
        w.edit_requested.connect(lambda m: self.edit_requested.emit(m.position))
        w.regenerate_requested.connect(lambda m: self.regenerate_requested.emit(m.position))
        w.tool_results_ready.connect(lambda m, results: self.tool_results_ready.emit(m.position, results))
        if tool_calls:
            w.set_tool_calls(tool_calls)
        self._page().addWidget(w)
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

    def flush(self) -> None:
        w = self.streaming
        if w is None:
            return
        reasoning, answer = self._pending["reasoning"], self._pending["answer"]
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

    def end_reply(self, stats: dict | None = None) -> MessageWidget | None:
        self.flush()
        self._timer.stop()
        w, self.streaming = self.streaming, None
        if w is not None:
            w.set_streaming(False)
            w.set_reasoning(w.reasoning, expanded=False)
            w.set_stats(stats or {})
        return w

    def _follow(self, _min: int, maximum: int) -> None:
        if self._stick_to_bottom:
            self.verticalScrollBar().setValue(maximum)
