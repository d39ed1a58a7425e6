"""One round of MCP calls in the chat: ask the user first (servers with "Confirm each call" on; the
question is window-modal but does not block the event loop), run the calls in an Op, show each
call's state (running, done, failed) and its result or error on its card, and hand the results back
to be sent to the model."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QCheckBox, QMessageBox, QWidget

from app.chat.mcp_client import CallOutcome
from app.chat.mcp_tools import answer_calls
from app.ui.base.ops import Op

if TYPE_CHECKING:
    from app.chat.session import RecordedReply
    from app.ui.widgets.chat_view import MessageWidget
    from app.ui.widgets.tools_panel import ToolsPanel


class McpRound(QObject):
    answered = Signal(int, list)  # position of the assistant message, one result text per call

    def __init__(self, window: QWidget, tools: ToolsPanel) -> None:
        super().__init__(window)
        self.window, self.tools = window, tools
        self.dialog: QMessageBox | None = None
        self.dont_ask: QCheckBox | None = None

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
        box = QMessageBox(QMessageBox.Icon.Question, "Run MCP tools?",
                          "The model asks to run:\n\n" + "\n".join(lines), parent=self.window)
        run = box.addButton("Run", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Decline", QMessageBox.ButtonRole.RejectRole)
        dont_ask = self.dont_ask = QCheckBox(f"Don't ask again for {', '.join(servers)}", box)  # kept referenced
        box.setCheckBox(dont_ask)

        def finished(_code: int) -> None:
            self.dialog = None
            approved = box.clickedButton() is run
            if approved and dont_ask.isChecked():
                for name in servers:
                    self.tools.mcp.settings.get(name).confirm_calls = False
                    box_ = self.tools.mcp.boxes.get(name)
                    if box_ is not None:
                        box_.confirm.setChecked(False)
                self.tools.mcp.save_settings()
            self._run(recorded, widget, [approved or r != "mcp" for r in recorded.routes])

        box.finished.connect(finished)
        self.dialog = box
        box.open()

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
