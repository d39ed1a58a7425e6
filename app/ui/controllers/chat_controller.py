"""The chat's turn loop: send, stream into the transcript with a live readout (in the status bar
and under the answer), record the reply, answer its tool calls (the demo tools at once, MCP tools
after the user's say), regenerate and edit keeping versions, switch versions, delete, stop. The
conversation logic is app/chat/session.py; the speed arithmetic app/chat/readout.py.

The composer's Send and Stop follow one rule, in `_sync_buttons`: Send while a model is ready and
no reply is being written, Stop (in Send's place) while one is.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication

from app.chat.readout import Readout, final_text
from app.engine.contract import Reply, ReplyStats
from app.engine.tool_calls import ToolsError
from app.ui.base.messages import messages

if TYPE_CHECKING:
    from app.base.settings import Settings
    from app.chat.session import ChatSession
    from app.engine.contract import ModelInfo
    from app.ui.controllers.model_controller import ModelController
    from app.ui.widgets.chat_view import Transcript
    from app.ui.widgets.composer import Composer
    from app.ui.widgets.mcp_round import McpRound
    from app.ui.widgets.settings_panel import SettingsPanel
    from app.ui.widgets.tools_panel import ToolsPanel

READOUT_MS = 250
LOAD_FIRST = "Load a model first: pick one at the top of the chat, or find one in Models"
THINKING_ON = "Let the model reason before it answers (Qwen-style enable_thinking)"
THINKING_NO_MODEL = "Load a model first: thinking is the model's switch"
THINKING_OFF = ("Off: this model's chat template has no thinking switch (enable_thinking), so whether it "
                "reasons first is up to the model")


class ChatController(QObject):
    readout_changed = Signal(str)  # the live tokens/s readout, each time it changes
    reply_finished = Signal(object)  # Reply, after it is shown and saved
    conversations_changed = Signal()  # a conversation was created or its title changed
    chat_wanted = Signal()  # show the chat page (a message was sent)
    warnings_changed = Signal(list)  # the chips a user must not miss (the model bar shows them)

    def __init__(self, model: ModelController, session: ChatSession, settings: Settings, transcript: Transcript,
                 composer: Composer, settings_panel: SettingsPanel, tools: ToolsPanel, mcp_round: McpRound) -> None:
        super().__init__(composer)
        self.model, self.session, self.settings = model, session, settings
        self.transcript, self.composer, self.tools, self.mcp_round = transcript, composer, tools, mcp_round
        self.panel = settings_panel
        self.generating = False
        self.editing: tuple[int, str] | None = None  # (the position of the message being edited, the draft it replaced)
        self.last_reply: Reply | None = None
        self._flushes_at_start = 0
        self.readout = Readout()
        self._readout_shown_at, self._readout_text = 0.0, ""
        transcript.painting.connect(self._update_readout)  # one layout pass and one paint for both
        w = model.worker
        w.text_waiting.connect(self._on_text_waiting, Qt.ConnectionType.QueuedConnection)  # from the engine thread
        transcript.source = self._take_text
        w.finished.connect(self._on_finished)
        model.generation_failed.connect(self._on_failed)
        model.state_changed.connect(self._sync_buttons)
        model.loaded.connect(self._on_loaded)
        composer.input.submit.connect(self.send)
        composer.send_button.clicked.connect(self.send)
        composer.stop_button.clicked.connect(self.stop)
        composer.thinking.toggled.connect(self._on_thinking_toggled)
        composer.thinking_budget.valueChanged.connect(self._on_budget_changed)
        tools.changed.connect(self.update_chips)
        mcp_round.answered.connect(self.send_tool_results)
        transcript.regenerate_requested.connect(self.regenerate)
        transcript.edit_requested.connect(self.edit_message)
        transcript.delete_requested.connect(self.delete_from)
        transcript.version_requested.connect(self.show_version)
        transcript.versions_of = self.session.versions
        transcript.cleared.connect(self.cancel_edit)
        composer.cancel_edit_button.clicked.connect(lambda: self.cancel_edit(restore=True))
        transcript.tool_results_ready.connect(self.send_tool_results)
        self._sync_buttons()

    def _sync_buttons(self) -> None:
        self.composer.send_button.setEnabled(self.model.ready and not self.generating)
        self.composer.stop_button.setEnabled(self.generating)
        self.composer.set_generating(self.generating)

    def _set_generating(self, on: bool) -> None:
        self.generating = on
        if on:
            self.model.claim("chat")
        else:
            self.model.release("chat")
        self._sync_buttons()

    # ------------------------------------------------------------------ the model's switches

    def _on_loaded(self, info: ModelInfo) -> None:
        thinking = self.composer.thinking
        thinking.setEnabled(info.thinking_switch)
        thinking.setChecked(info.thinking_switch and bool(self.settings.get("chat.thinking", self.model.key)))
        thinking.setToolTip(THINKING_ON if info.thinking_switch else THINKING_OFF)
        budget = self.composer.thinking_budget
        budget.setValue(int(self.settings.get("chat.thinking_budget", self.model.key)))
        self.composer.budget_button.setEnabled(thinking.isEnabled() and thinking.isChecked())  # its menu holds it
        budget.setEnabled(thinking.isEnabled() and thinking.isChecked())
        self.update_chips()

    def _on_thinking_toggled(self, on: bool) -> None:
        if self.composer.thinking.isEnabled() and self.model.key:
            self.settings.set("chat.thinking", bool(on), self.model.key)
            self.settings.save()

    def _on_budget_changed(self, tokens: int) -> None:
        if self.composer.thinking.isEnabled() and self.model.key:
            self.settings.set("chat.thinking_budget", int(tokens), self.model.key)
            self.settings.save()

    def update_chips(self) -> None:
        """Say what is on that the user might not see: tools offered (and whether the template reads
        them), no thinking switch."""
        chips = []
        try:
            tools = self.tools.all_tools()
        except ToolsError:
            tools = None
        info = self.model.info
        self.composer.set_tool_count(len(tools or []))
        if tools:
            if info is not None and getattr(info, "chat_template_from_model", False) and not info.tools_in_template:
                chips.append(f"⚠ {len(tools)} tool(s) offered, but this model's template ignores tools")
            else:
                chips.append(f"🔧 {len(tools)} tool(s) offered")
        if self.tools.schema_enabled():
            chips.append("{ } answers constrained to a JSON schema")
        if info is not None and not info.thinking_switch:
            chips.append("no thinking switch in this template")
        self.composer.set_chips(chips)
        self.warnings_changed.emit([c for c in chips if c.startswith("⚠")])

    # ------------------------------------------------------------------ a turn

    def send(self) -> None:
        text = self.composer.message_text()
        if not text or self.generating:
            return
        if self.model.info is None:
            messages().error(LOAD_FIRST)
            return
        self.chat_wanted.emit()
        if self.editing is not None:  # the edited message and what followed it become a version now
            position = self.editing[0]
            self.cancel_edit()
            self.session.keep_version(position)
            self.transcript.remove_from(position)
        if self.session.add_user(text, self.panel.system_prompt()):
            self.transcript.clear()
            self.conversations_changed.emit()
        self.composer.input.clear()
        self.composer.clear_attachments()
        self.transcript.add_message("user", text)
        self._generate()

    def _generate(self) -> None:
        try:
            tools, schema = self.tools.all_tools(), self.tools.schema()
        except ToolsError as exc:
            messages().error(f"The tools panel has a problem: {exc}")
            return
        thinking = self.composer.thinking
        request = self.session.request(thinking=thinking.isChecked() and thinking.isEnabled(),
                                       sampling=self.panel.sampling(), tools=tools, json_schema=schema,
                                       thinking_budget=self.composer.thinking_budget.value())
        self._set_generating(True)
        self.transcript.begin_reply()
        self._flushes_at_start = self.transcript.flushes
        self.readout.start(time.perf_counter())
        self._readout_text = self.readout.text()
        self.readout_changed.emit(self._readout_text)
        self._readout_shown_at = time.perf_counter()
        self.model.engine_thread.request_generate.emit(request)

    def _take_text(self) -> list[tuple[str, str]]:
        """What the engine streamed since the transcript's last paint (it asks before each)."""
        events = self.model.worker.text.take()
        if self.model.closing:  # late results of a reply stopped by closing the window
            return []
        # tool calls are shown as cards when the reply ends
        return [(kind, text) for kind, text in events if kind in ("reasoning", "answer")]

    def _on_text_waiting(self) -> None:
        if self.transcript.flushes == self._flushes_at_start:  # the reply's first text shows at once
            self.transcript.flush()

    def _update_readout(self) -> None:
        """Count at each paint of the reply (the first token's time to a paint's precision); say it at
        most every READOUT_MS."""
        now = time.perf_counter()
        first = self.readout.first_at is None
        self.readout.count(self.model.worker.tokens, now)
        if not self.generating or (not first and now - self._readout_shown_at < READOUT_MS / 1000):
            return
        text = self.readout.text()
        if text != self._readout_text:
            self._readout_shown_at, self._readout_text = now, text
            self.readout_changed.emit(text)
            w = self.transcript.streaming
            if w is not None and text:  # the stats under the answer, live while it writes
                w.stats_label.setText(text)
                w.stats_label.setVisible(True)

    def _finish(self) -> None:
        self._set_generating(False)

    def _on_finished(self, reply: Reply) -> None:
        if self.model.closing:
            return
        stats = reply.stats.as_dict()
        if reply.json_value is not None or reply.json_errors:
            stats["json_valid"] = not reply.json_errors
            stats["json_errors"] = reply.json_errors
        widget = self.transcript.end_reply(stats)
        self._finish()
        self.readout_changed.emit(final_text(reply.stats))
        self.last_reply = reply
        if self.session.conversation_id is None:
            self.reply_finished.emit(reply)
            return
        recorded = self.session.record_reply(reply, stats, demo_tools=self.tools.demo.isChecked(),
                                             mcp=self.tools.mcp.toolbox, reserved=self.tools.reserved_names())
        self.conversations_changed.emit()
        if recorded.calls and widget is not None:
            widget.set_tool_calls(recorded.calls, [c.errors for c in reply.tool_calls], recorded.demo_results,
                                  editable=recorded.demo_results is None and not recorded.mcp_pending)
            self.reply_finished.emit(reply)
            if recorded.demo_results is not None:
                self.send_tool_results(recorded.position, recorded.demo_results)
            elif recorded.mcp_pending:
                self.mcp_round.ask(recorded, widget)
            return
        self.reply_finished.emit(reply)

    def send_tool_results(self, position: int, results: list[str]) -> None:
        """Store one tool message per call of the assistant message at `position`, then continue."""
        if self.generating or self.session.conversation_id is None:
            return
        widget = self.transcript.messages[position]
        widget.send_results.setVisible(False)
        for card in widget.tool_cards:
            card.result.setReadOnly(True)
        self.session.add_tool_results(position, results)
        for result in results:
            self.transcript.add_message("tool", result)
        self._generate()

    def _on_failed(self, message: str) -> None:
        """A reply that failed (or whose engine process died): what it streamed stays, in the
        transcript and in the conversation, as a stopped reply's does; the message says what happened."""
        if self.generating:
            w = self.transcript.end_reply()
            if w is not None and not w.content and not w.reasoning:
                self.transcript.remove_from(len(self.transcript.messages) - 1)
            elif w is not None and self.session.conversation_id is not None:
                stats = ReplyStats(stop_reason="failed")
                w.set_stats(stats.as_dict())
                self.session.record_reply(Reply(w.content, w.reasoning, w.content, "", stats), stats.as_dict(),
                                          demo_tools=False)
                self.conversations_changed.emit()
            self._finish()
            self.readout_changed.emit("reply cut short")
        messages().error(message)

    def stop(self) -> None:
        self.model.stop()

    def regenerate(self, position: int) -> None:
        """A new answer at `position`; the old one and what followed it stay as a version."""
        if self.generating or self.session.conversation_id is None:
            return
        self.cancel_edit()
        self.session.keep_version(position)
        self.transcript.remove_from(position)
        self._generate()

    def regenerate_last(self) -> None:
        last = self._last("assistant")
        if last is not None:
            self.regenerate(last)

    def copy_last_answer(self) -> None:
        last = self._last("assistant")
        if last is not None:
            QGuiApplication.clipboard().setText(self.transcript.messages[last].content)
            messages().info("The last answer is on the clipboard")

    def _last(self, role: str) -> int | None:
        return next((w.position for w in reversed(self.transcript.messages) if w.role == role), None)

    def delete_from(self, position: int) -> None:
        """Delete the message at `position` and the ones after it (with their versions)."""
        if self.generating or self.session.conversation_id is None:
            return
        self.cancel_edit()
        self.session.truncate(position)
        self.transcript.remove_from(position)

    def show_version(self, position: int, index: int) -> None:
        """Show version `index` at `position`: it and what followed it come back, and the conversation
        goes on from there."""
        if self.generating or self.session.conversation_id is None:
            return
        count = self.session.versions(position)[1]
        if not 0 <= index < count:
            return
        self.cancel_edit()
        self.session.show_version(position, index)
        self.transcript.remove_from(position)
        for m in self.session.store.messages(self.session.conversation_id)[position:]:
            self.transcript.add_message(m.role, m.content, m.reasoning, m.stats,
                                        tool_calls=(m.extra or {}).get("tool_calls"))

    def edit_message(self, position: int) -> None:
        """Put a user message back into the composer, the cursor at its end. It and the messages after
        it stay until Send replaces them; "Undo edit" (or Ctrl+Z in the box) keeps them as they were."""
        if self.generating or self.session.conversation_id is None:
            return
        if self.editing is None:
            self.editing = (position, self.composer.input.toPlainText())
        else:
            self.editing = (position, self.editing[1])
        self.composer.replace_text(self.transcript.messages[position].content)
        self.composer.edit_bar.setVisible(True)
        self.composer.input.setFocus()

    def cancel_edit(self, restore: bool = False) -> None:
        """Stop editing: the conversation stays as it is; `restore` puts back the draft it replaced."""
        if self.editing is None:
            return
        draft = self.editing[1]
        self.editing = None
        self.composer.edit_bar.setVisible(False)
        if restore:
            self.composer.replace_text(draft)
