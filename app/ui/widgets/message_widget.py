"""One message of the transcript: the user's as a bubble on the right, an answer full width with its
thinking block ("Thinking… 4.2 s" while it writes, "Thought for 6.1 s" folded after), Markdown body,
tool-call cards with their state, and the stats line; a tool's result in a box of its own.

Under each message a row of icon actions (copy, edit or regenerate, delete) shows while the mouse is
over it; the row keeps its space when hidden, so hovering never moves the text. Where a message has
versions (a regenerate or an edit kept the old one) "‹ 2/3 ›" switches between them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Generic, TypeVar, cast

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QEnterEvent, QGuiApplication, QResizeEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QPushButton, QToolButton, QVBoxLayout, QWidget

from app.chat.markdown_html import Colors
from app.ui.base import icons, theme
from app.ui.base.props import props
from app.ui.widgets.column_layout import ColumnLayout
from app.ui.widgets.controls import IconButton
from app.ui.widgets.markdown_view import MarkdownView, TextLabel, text_label

ACTION_ICON = 16
T = TypeVar("T")
ROW_MARGIN = "none"  # above and below the hover row
BUBBLE_SHARE = 0.8  # of the column a user's bubble may take: the answer's side stays open


class ToolCallCard(QFrame):
    """One tool call: its name, state (running, done, failed), arguments, whether they fit the tool's
    schema, and its result."""

    def __init__(self, call: dict, errors: list[str] | None, result: str | None, editable: bool) -> None:
        super().__init__()
        self.setObjectName("toolCard")
        layout = QVBoxLayout(self)
        theme.pad(layout, spacing="space_1")
        fn = call.get("function", {})
        head = QHBoxLayout()
        self.title = props(QLabel(), objectName="role")
        icons.set_text(self.title, f"🔧 {fn.get('name', '?')}")
        head.addWidget(self.title)
        head.addStretch(1)
        self.state = props(QLabel(), objectName="toolState")
        head.addWidget(self.state)
        layout.addLayout(head)
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
            self.set_state("done")
        else:
            self.set_state("waiting", "for your result") if editable else self.set_state("")
        self.result.setReadOnly(not editable)
        self.result.setVisible(editable or result is not None)
        layout.addWidget(self.result)

    def set_state(self, state: str, detail: str = "") -> None:
        """'running', 'done', 'failed', 'waiting' (for the user's result) or '' (none shown)."""
        words = {"running": "running…", "done": "✓ done", "failed": "✗ failed", "waiting": "waiting"}
        self.state.setText(words.get(state, "") + (f" · {detail}" if detail else ""))
        self.state.setProperty("state", state)
        self.state.style().unpolish(self.state)
        self.state.style().polish(self.state)


class RowPart(Generic[T]):
    """A part of a message's hover row, read as an attribute: the row makes its buttons first."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.stored = "_" + name

    def __get__(self, message: MessageWidget, owner: type | None = None) -> T:
        message.action_row.build()
        return cast(T, getattr(message, self.stored))


@theme.per_theme
def row_height() -> int:
    """The height of a built hover row, from a button and a version label in this theme's style."""
    button = IconButton("copy", "", "icon", ACTION_ICON, object_name="messageAction")
    label = props(QLabel("1/2"), objectName="versionLabel")
    button.ensurePolished()
    label.ensurePolished()
    rows = max(button.sizeHint().height(), label.sizeHint().height())
    for w in (button, label):
        w.deleteLater()
    return rows + 2 * theme.metric(ROW_MARGIN)


class ActionRow(QWidget):
    """The place of a message's hover row, as tall as the row; `build` makes its buttons the first time
    they are wanted (the mouse over the message, versions to show). Seven buttons made with each
    message were a third of the time a send took."""

    def __init__(self, build: Callable[[QHBoxLayout], None]) -> None:
        super().__init__()
        self._build = build
        self.built = False

    def build(self) -> None:
        if not self.built:
            self.built = True
            row = QHBoxLayout(self)
            theme.pad(row, "none", ROW_MARGIN, "space_half")
            self._build(row)
            self.updateGeometry()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return super().sizeHint() if self.built else QSize(0, row_height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return super().minimumSizeHint() if self.built else QSize(0, row_height())


class ThinkingBlock(QWidget):
    """The reasoning, folded under a button that times it: live while it is written, then the total."""

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        theme.pad(layout, "none", "none", "space_1")
        self.toggle = props(QToolButton(), objectName="reasoningToggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.label = text_label("reasoning")
        layout.addWidget(self.label)
        self.started: float | None = None  # perf_counter when the reasoning began to stream
        self.seconds: float | None = None  # how long it took, once it ended (saved with the stats)
        self.words = 0
        self._arrow = ""
        self.toggle.toggled.connect(self._show)

    def live(self) -> bool:
        return self.started is not None and self.seconds is None

    def start(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()

    def stop(self) -> None:
        if self.live() and self.started is not None:
            self.seconds = time.perf_counter() - self.started

    def text(self) -> str:
        """The button's words: 'Thinking… 4.2 s', 'Thought for 6.1 s' or, without a time, the length."""
        if self.live() and self.started is not None:
            return f"Thinking… {time.perf_counter() - self.started:.1f} s"
        if self.seconds is not None:
            return f"Thought for {self.seconds:.1f} s"
        return f"Thought · {self.words} words"

    def refresh(self) -> None:
        self.toggle.setText(self.text())
        arrow = "chevron-down" if self.toggle.isChecked() else "chevron-right"
        if arrow != self._arrow:
            self._arrow = arrow
            self.toggle.setIcon(theme.icon(arrow, "muted", 14))

    def _show(self, on: bool) -> None:
        self.label.setVisible(on)
        self.refresh()


class MessageWidget(QFrame):
    """One message. Assistant messages have a thinking block, the answer and a stats line."""

    edit_requested = Signal(object)  # self
    regenerate_requested = Signal(object)
    delete_requested = Signal(object)
    version_requested = Signal(object, int)  # self, the version's index (0-based) to show
    tool_results_ready = Signal(object, list)  # self, [result text per call]

    def __init__(self, role: str, content: str = "", reasoning: str = "", stats: dict | None = None,
                 position: int = -1, colors: Colors | None = None, highlighted: bool = True,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)  # made in its page: styled once, not again when the page takes it
        self.setObjectName({"user": "userMessage", "tool": "toolMessage"}.get(role, "assistantMessage"))
        self.role, self.position = role, position
        self.content, self.reasoning = content, reasoning
        self.stats: dict = stats or {}
        layout = ColumnLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(theme.metric("space_2"))
        self.thinking = ThinkingBlock()
        self.reasoning_toggle, self.reasoning_label = self.thinking.toggle, self.thinking.label
        self.body: MarkdownView | TextLabel
        if role == "user":
            self.body = text_label("bubbleText")
            bubble = props(QFrame(), objectName="bubble")
            self.bubble_layout = inside = QVBoxLayout(bubble)
            theme.pad(inside, "space_4", "space_2")
            inside.addWidget(self.body)
            self.bubble = bubble
            row = QHBoxLayout()
            row.addStretch(1)
            row.addWidget(bubble)  # as wide as its text, at most BUBBLE_SHARE of the column (resizeEvent)
            layout.addLayout(row)
        elif role == "tool":
            self.body = text_label("toolArgs")
            box = props(QFrame(), objectName="toolResultBox")
            inside = QVBoxLayout(box)
            theme.pad(inside)
            heading = props(QLabel(), objectName="role")
            icons.set_text(heading, "🔧 Tool result")
            inside.addWidget(heading)
            inside.addWidget(self.body)
            layout.addWidget(box)
        else:
            layout.addWidget(self.thinking)
            self.body = MarkdownView("messageText")
            self.body.colors, self.body.highlighted = colors or Colors(), highlighted
            layout.addWidget(self.body)
        self.thinking.setVisible(False)
        self.tool_cards: list[ToolCallCard] = []
        self.tools_box = QVBoxLayout()
        self.tools_box.setSpacing(theme.metric("space_2"))
        layout.addLayout(self.tools_box)
        self.send_results = props(QPushButton("Send tool results"), objectName="primary")
        self.send_results.setVisible(False)
        self.send_results.clicked.connect(
            lambda: self.tool_results_ready.emit(self, [c.result.text() for c in self.tool_cards]))
        layout.addWidget(self.send_results, 0, Qt.AlignmentFlag.AlignLeft)
        # wraps at its spaces: one long line set the message's minimum width, and a narrow window cut
        # the message (and its actions) off instead of wrapping it
        self.stats_label = text_label("stats")
        layout.addWidget(self.stats_label)
        layout.addWidget(self._actions())
        self._streaming = False
        self.set_reasoning(reasoning, expanded=False)
        self.set_content(content)
        self.set_stats(self.stats)

    def _actions(self) -> QWidget:
        """The hover row's place: versions, copy, edit or regenerate, delete, made when first wanted."""
        self.version: tuple[int, int] = (0, 1)  # (index shown, how many)
        self.action_row = ActionRow(self._build_actions)
        self.action_row.setVisible(self.role in ("user", "assistant"))
        return self.action_row

    def _build_actions(self, row: QHBoxLayout) -> None:
        if self.role == "user":
            row.addStretch(1)
        self._version_prev = IconButton("chevron-left", "Previous version", "muted", 14, object_name="messageAction")
        self._version_label = props(QLabel(), objectName="versionLabel")
        self._version_next = IconButton("chevron-right", "Next version", "muted", 14, object_name="messageAction")
        self._version_prev.clicked.connect(lambda: self.version_requested.emit(self, self.version[0] - 1))
        self._version_next.clicked.connect(lambda: self.version_requested.emit(self, self.version[0] + 1))
        for w in (self._version_prev, self._version_label, self._version_next):
            row.addWidget(w)
        self._copy = IconButton("copy", "Copy (Markdown)", "icon", ACTION_ICON, object_name="messageAction")
        self._copy.clicked.connect(self._copy_content)
        self._edit = IconButton("pencil", "Edit: the old message is kept as a version", "icon", ACTION_ICON,
                                object_name="messageAction")
        self._edit.clicked.connect(lambda: self.edit_requested.emit(self))
        self._regenerate = IconButton("refresh-cw", "Regenerate (Ctrl+R): the old answer is kept as a version",
                                      "icon", ACTION_ICON, object_name="messageAction")
        self._regenerate.clicked.connect(lambda: self.regenerate_requested.emit(self))
        self._delete = IconButton("trash-2", "Delete this message and the ones after it", "icon", ACTION_ICON,
                                  object_name="messageAction")
        self._delete.clicked.connect(lambda: self.delete_requested.emit(self))
        self._hover_actions = [self._copy, self._edit if self.role == "user" else self._regenerate,
                               self._delete]
        for w in self._hover_actions:
            row.addWidget(w)
        if self.role != "user":
            row.addStretch(1)
        for w in (self._version_prev, self._version_label, self._version_next, self._copy, self._edit,
                  self._regenerate, self._delete):
            policy = w.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            w.setSizePolicy(policy)
            w.setVisible(False)
        self._show_version()

    # the row's buttons: made with the row when first asked for
    version_prev: RowPart[IconButton] = RowPart()
    version_label: RowPart[QLabel] = RowPart()
    version_next: RowPart[IconButton] = RowPart()
    copy: RowPart[IconButton] = RowPart()
    edit: RowPart[IconButton] = RowPart()
    regenerate: RowPart[IconButton] = RowPart()
    delete: RowPart[IconButton] = RowPart()
    hover_actions: RowPart[list[IconButton]] = RowPart()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        if self.role == "user":
            self._fit_bubble(event.size().width())
        super().resizeEvent(event)

    def _fit_bubble(self, width: int) -> None:
        """As wide as its longest line, at most BUBBLE_SHARE of the column (a wrapped QLabel would
        otherwise pick a narrow width of its own)."""
        most = max(120, int(width * BUBBLE_SHARE))
        pad = self.bubble_layout.contentsMargins()
        lines = self.content.splitlines() or [""]
        natural = max(self.body.fontMetrics().horizontalAdvance(line) for line in lines[:200]) + 2
        self.body.setMinimumWidth(min(natural, most - pad.left() - pad.right()))
        self.bubble.setMaximumWidth(most)

    # -- hover ---------------------------------------------------------------

    def enterEvent(self, event: QEnterEvent) -> None:  # noqa: N802 (Qt's name)
        self.show_actions(True)
        super().enterEvent(event)

    def leaveEvent(self, event: QEvent) -> None:  # noqa: N802
        self.show_actions(False)
        super().leaveEvent(event)

    def show_actions(self, on: bool) -> None:
        if not on and not self.action_row.built:
            return
        for w in self.hover_actions:
            w.setVisible(on and not self._streaming)

    def _copy_content(self) -> None:
        QGuiApplication.clipboard().setText(self.content)
        self.copy.set_icon("check")
        self.copy.setToolTip("Copied")
        QTimer.singleShot(1500, self.copy, self._copied_back)

    def _copied_back(self) -> None:
        self.copy.set_icon("copy")
        self.copy.setToolTip("Copy (Markdown)")

    def set_version(self, index: int, count: int) -> None:
        """Show '‹ index+1/count ›' where a message has versions."""
        self.version = (index, count)
        if count > 1 or self.action_row.built:
            self.action_row.build()
            self._show_version()

    def _show_version(self) -> None:
        index, count = self.version
        self._version_label.setText(f"{index + 1}/{count}")
        for w in (self._version_prev, self._version_label, self._version_next):
            w.setVisible(count > 1)
        self._version_prev.setEnabled(index > 0)
        self._version_next.setEnabled(index < count - 1)

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
            if self.role == "user" and self.width() > 0:
                self._fit_bubble(self.width())
        self.body.setVisible(bool(text) or self.role != "assistant")

    def set_reasoning(self, text: str, expanded: bool | None = None) -> None:
        self.reasoning = text
        block = self.thinking
        block.words = len(text.split())
        has = bool(text) and self.role == "assistant"
        block.setVisible(has)
        if expanded is not None:
            block.toggle.setChecked(expanded)
        block.label.setText(text)
        block.label.setVisible(has and block.toggle.isChecked())
        if block.seconds is None and self.stats.get("thinking_seconds") is not None:
            block.seconds = float(self.stats["thinking_seconds"])
        block.refresh()

    def _streaming_reasoning(self) -> bool:
        return self._streaming and not self.content

    def set_streaming(self, on: bool) -> None:
        self._streaming = on
        if not on:
            self.thinking.stop()
        self.show_actions(self.underMouse())
        self.thinking.refresh()

    def set_stats(self, stats: dict) -> None:
        self.stats = stats
        if not stats:
            self.stats_label.setVisible(False)
            return
        if stats.get("stop_reason") == "failed":  # what streamed before the reply (or its engine) failed
            self.stats_label.setText("cut short: the reply failed here")
            self.stats_label.setVisible(True)
            return
        self.stats_label.setText(stats_line(stats))
        self.stats_label.setVisible(True)


def stats_line(stats: dict) -> str:
    """The line under an answer: tokens, speed, first token, the prompt, guesses, JSON, why it stopped."""
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
    return " · ".join(parts)


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
