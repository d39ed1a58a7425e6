"""One round of MCP calls in the chat: ask the user first (servers with "Confirm each call" on) in a
bar under the calls' cards, with Run and Decline, run the calls in an Op, show each call's state
(waiting, running, done, failed) and its result or error on its card, and hand the results back to
be sent to the model. The question never blocks the window: the rest of it stays usable."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QCheckBox, QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.chat.mcp_client import CallOutcome
from app.chat.mcp_tools import answer_calls
from app.ui.base import theme
from app.ui.base.ops import Op
from app.ui.base.props import props

if TYPE_CHECKING:
    from app.chat.session import RecordedReply
    from app.ui.widgets.chat_view import MessageWidget
    from app.ui.widgets.tools_panel import ToolsPanel


class ApprovalBar(QFrame):
    """"The model asks to run: …  [Run] [Decline]  [ ] Don't ask again for <server>"."""

    def __init__(self, lines: list[str], servers: list[str]) -> None:
        super().__init__()
        self.setObjectName("approval")
        layout = QVBoxLayout(self)
        theme.pad(layout)
        self.text = props(QLabel("The model asks to run:\n" + "\n".join(lines)), objectName="fact", wordWrap=True)
        layout.addWidget(self.text)
        row = QHBoxLayout()
        self.run_button = props(QPushButton("Run"), objectName="primary", toolTip="Run these calls now")
        self.decline_button = props(QPushButton("Decline"), toolTip="Tell the model the calls were declined")
        self.dont_ask = QCheckBox(f"Don't ask again for {', '.join(servers)}")
        row.addWidget(self.run_button)
        row.addWidget(self.decline_button)
        row.addWidget(self.dont_ask, 1)
        layout.addLayout(row)


class McpRound(QObject):
    answered = Signal(int, list)  # position of the assistant message, one result text per call

    def __init__(self, window: QWidget, tools: ToolsPanel) -> None:
        super().__init__(window)
        self.window, self.tools = window, tools
        self.pending: ApprovalBar | None = None  # the question being asked

    def ask(self, recorded: RecordedReply, widget: MessageWidget) -> None:
        toolbox = self.tools.mcp.toolbox
        reserved = self.tools.reserved_names()
        servers: list[str] = []
        lines: list[str] = []
        for call, route in zip(recorded.calls, recorded.routes, strict=True):
            tool = toolbox.route(call["function"]["name"], reserved) if toolbox and route == "mcp" else None
            if tool is not None and toolbox is not None and toolbox.needs_confirmation(tool):
                servers += [tool.server] if tool.server not in servers else []
                args = json.dumps(call["function"].get("arguments", {}), ensure_ascii=False)
                lines.append(f"• {tool.server} / {tool.name} {args[:300]}")
        if not lines:
            self._run(recorded, widget, None)
            return
        bar = ApprovalBar(lines, servers)
        for card, route in zip(widget.tool_cards, recorded.routes, strict=False):
            if route == "mcp":
                card.set_state("waiting", "asks for your approval")

        def finished(approved: bool) -> None:
            self.pending = None
            bar.setParent(None)
            bar.deleteLater()
            if approved and bar.dont_ask.isChecked():
                for name in servers:
                    self.tools.mcp.settings.get(name).confirm_calls = False
                    box_ = self.tools.mcp.boxes.get(name)
                    if box_ is not None:
                        box_.confirm.setChecked(False)
                self.tools.mcp.save_settings()
            self._run(recorded, widget, [approved or r != "mcp" for r in recorded.routes])

        bar.run_button.clicked.connect(lambda: finished(True))
        bar.decline_button.clicked.connect(lambda: finished(False))
        widget.tools_box.addWidget(bar)
        self.pending = bar
        bar.run_button.setFocus()

    def _run(self, recorded: RecordedReply, widget: MessageWidget, approved: list[bool] | None) -> None:
        toolbox, reserved = self.tools.mcp.toolbox, self.tools.reserved_names()
        for card, route in zip(widget.tool_cards, recorded.routes, strict=False):
            if route == "mcp":
                card.set_state("running")
                card.result.setVisible(False)

        def done(outcomes: list[CallOutcome]) -> None:
            for card, outcome in zip(widget.tool_cards, outcomes, strict=False):
                card.result.setText(outcome.text)
                card.result.setVisible(True)
                card.set_state("failed" if outcome.is_error else "done", f"{outcome.seconds:.1f} s")
                card.result.setToolTip(("✗ " if outcome.is_error else "✓ ") + f"{outcome.seconds:.2f} s")
            self.answered.emit(recorded.position, [o.text for o in outcomes])

        def run(_ctx: Any) -> list[CallOutcome]:
            return answer_calls(recorded.calls, recorded.routes, toolbox, approved, reserved)

        Op(self, run, name="MCP tool calls").success(done).run()
