"""One BFCL case as a run left it: the question, the tools offered, what the model wrote (its reasoning
folded apart), the calls read from it, the acceptable answers and the checker's reason. Every part is
read-only text that can be selected and copied; the long ones fold."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from app.bench.bfcl_cases import Case
from app.bench.bfcl_run import CaseRecord
from app.ui.base import theme
from app.ui.base.props import props

MAX_LINES = 16  # a part taller than this scrolls inside itself


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def lines(items: list[Any]) -> str:
    """A list of calls, one to a line."""
    return "\n".join(json.dumps(item, ensure_ascii=False) for item in items)


def messages_text(case: Case) -> str:
    return "\n\n".join(f"── {m.get('role', '?')} ──\n{m.get('content', '')}" for m in case.messages)


def answers_text(case: Case) -> str:
    if case.kind == "irrelevance":
        return ("None: no function offered fits this question, so any call is wrong; the model should answer "
                "in words.")
    if case.kind == "relevance":
        return "Any call: a function fits, and the check is only that the model calls one."
    return ("Each call below, with any one of the values listed for each parameter (\"\" means the parameter "
            "may be left out):\n\n" + lines(case.ground_truth or []))


class FittedText(QPlainTextEdit):
    """Read-only text as tall as its lines (wrapped at the widget's width), up to MAX_LINES."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("caseText")
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)

    def show_text(self, text: str) -> None:
        self.setPlainText(text)
        self._fit()

    def _fit(self) -> None:
        lines = max(1, int(self.document().documentLayout().documentSize().height()))
        margins = self.contentsMargins().top() + self.contentsMargins().bottom()
        doc_margin = 2 * int(self.document().documentMargin())
        self.setFixedHeight(min(lines, MAX_LINES) * self.fontMetrics().lineSpacing() + margins + doc_margin + 4)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._fit()


class Fold(QWidget):
    """A part with a heading that opens and closes it."""

    def __init__(self, title: str, open_: bool = True) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(theme.metric("space_1"))
        self.title = title
        self.toggle = props(QToolButton(), objectName="foldToggle", checkable=True, checked=open_)
        self.toggle.toggled.connect(self._show)
        self.text = FittedText()
        layout.addWidget(self.toggle)
        layout.addWidget(self.text)
        self._show(open_)

    def set_title(self, title: str) -> None:
        self.title = title
        self._show(self.toggle.isChecked())

    def _show(self, on: bool) -> None:
        self.toggle.setText(("▾ " if on else "▸ ") + self.title)
        self.text.setVisible(on)


class CasePage(QWidget):
    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(theme.metric("space_2"))
        self.heading = props(QLabel(), objectName="cardTitle", wordWrap=True)
        self.verdict = props(QLabel(), objectName="fact", wordWrap=True)
        self.note = props(QLabel(), objectName="warning", wordWrap=True, visible=False)
        for label in (self.heading, self.verdict, self.note):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            layout.addWidget(label)
        self.question = Fold("Question")
        self.tools = Fold("Tools offered", open_=False)
        self.reasoning = Fold("The model's reasoning", open_=False)
        self.raw = Fold("What the model wrote")
        self.calls = Fold("Calls read from it")
        self.answers = Fold("Acceptable answers")
        self.parts = (self.question, self.tools, self.reasoning, self.raw, self.calls, self.answers)
        for part in self.parts:
            layout.addWidget(part)
        self.setVisible(False)

    def show_case(self, record: CaseRecord, case: Case | None, missing: str = "") -> None:
        """`case` from the dataset (None where it is not here: `missing` says why)."""
        self.heading.setText(f"{record.id}  ·  {record.category}  ·  {'✓ correct' if record.valid else '✗ wrong'}")
        why = record.reason or "Every call matches one of the acceptable answers."
        extra = f" ({record.error_type})" if record.error_type else ""
        took = f"{record.seconds:.1f} s, {record.prompt_tokens:,} prompt tokens, {record.generated_tokens:,} written"
        self.verdict.setText(f"Checker: {why}{extra}\n{took}")
        self.note.setText(missing)
        self.note.setVisible(case is None)
        for part in (self.question, self.tools, self.answers):
            part.setVisible(case is not None)
        if case is not None:
            self.question.text.show_text(messages_text(case))
            tools = case.tools()
            self.tools.set_title(f"Tools offered ({len(tools)})")
            self.tools.text.show_text(pretty(tools))
            self.answers.text.show_text(answers_text(case))
        self.reasoning.setVisible(bool(record.reasoning.strip()))
        self.reasoning.text.show_text(record.reasoning.strip())
        self.raw.text.show_text(record.raw or (f"(no answer: {record.error})" if record.error else "(nothing)"))
        self.calls.set_title(f"Calls read from it ({len(record.calls)})")
        self.calls.text.show_text(lines(record.calls) if record.calls else "(none)")
        self.setVisible(True)

