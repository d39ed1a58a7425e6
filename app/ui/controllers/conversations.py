"""The saved conversations: the sidebar's list, opening one into the transcript, a new chat,
renaming, deleting and exporting. The store is app/chat/store.py; replies are the chat controller's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QPlainTextEdit, QWidget

from app.ui.base.messages import messages

if TYPE_CHECKING:
    from app.chat.session import ChatSession
    from app.chat.store import Store
    from app.ui.controllers.chat_controller import ChatController
    from app.ui.widgets.sidebar import Sidebar


class Conversations(QObject):
    opened = Signal()  # a conversation (or a new chat) is in the transcript: show the chat page

    def __init__(self, chat: ChatController, store: Store, sidebar: Sidebar) -> None:
        super().__init__(chat)
        self.chat, self.store, self.sidebar = chat, store, sidebar
        self.session: ChatSession = chat.session
        sidebar.new_chat.connect(self.new_chat)
        sidebar.conversation_selected.connect(self._on_selected)
        sidebar.rename_requested.connect(self.rename)
        sidebar.delete_requested.connect(self.delete)
        sidebar.export_requested.connect(self._export_dialog)
        chat.conversations_changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        self.sidebar.fill(self.store.conversations(), self.session.conversation_id)

    def _on_selected(self, cid: int) -> None:
        if not self.chat.generating:
            self.open(cid)

    def reopen_last(self) -> None:
        """At start: the conversation worked on last back in the transcript (the chat page shows it
        when it is opened or a model loads; the welcome page stays first)."""
        last = next(iter(self.store.conversations()), None)
        if last is not None:
            self.open(last.id, show=False)
            self.refresh()

    def open(self, cid: int, *, show: bool = True) -> None:
        self.session.open(cid)
        conv = self.store.conversation(cid)
        prompt = cast(QPlainTextEdit, self.chat.panel.widgets["chat.system_prompt"])
        prompt.blockSignals(True)
        prompt.setPlainText(conv.system_prompt)
        prompt.blockSignals(False)
        transcript = self.chat.transcript
        transcript.clear()
        for m in self.store.messages(cid):
            transcript.add_message(m.role, m.content, m.reasoning, m.stats,
                                   tool_calls=(m.extra or {}).get("tool_calls"))
        if show:
            self.opened.emit()

    def new_chat(self) -> None:
        if self.chat.generating:
            return
        self.session.new()
        self.chat.transcript.clear()
        self.sidebar.conversations.clearSelection()
        self.opened.emit()
        self.chat.composer.input.setFocus()

    def rename(self, cid: int, title: str) -> None:
        self.store.update(cid, title=title)
        self.refresh()

    def delete(self, cid: int) -> None:
        if self.chat.generating and cid == self.session.conversation_id:
            messages().error("Stop the reply before deleting its conversation.")
            return
        self.store.delete(cid)
        if cid == self.session.conversation_id:
            self.session.new()
            self.chat.transcript.clear()
        self.refresh()

    def export(self, path: str | Path, fmt: str) -> None:
        cid = self.session.conversation_id
        if cid is None:
            raise ValueError("no conversation is open")
        text = self.store.export_markdown(cid) if fmt == "md" else self.store.export_json(cid)
        Path(path).write_text(text, encoding="utf-8")

    def _export_dialog(self, fmt: str) -> None:
        if self.session.conversation_id is None:
            messages().error("Open a conversation to export it.")
            return
        title = self.store.conversation(self.session.conversation_id).title
        parent = cast(QWidget, self.sidebar.window())
        path, _ = QFileDialog.getSaveFileName(parent, "Export conversation", f"{title[:40]}.{fmt}")
        if path:
            try:
                self.export(path, fmt)
            except OSError as exc:
                messages().error(f"Could not export: {exc}")
