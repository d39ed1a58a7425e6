"""The saved conversations: the sidebar's list (grouped by date, app/chat/conversation_groups.py,
filtered by the search box across titles and messages), opening one into the transcript, a new
chat, renaming, pinning, exporting and deleting with an Undo. The store is app/chat/store.py;
replies are the chat controller's.

A delete hides the conversation at once and offers Undo for `undo_ms`; the store deletes it (one
transaction, its messages with it) when that time is up, when another is deleted, or when the
window closes (`finish_delete`): closing is not an Undo. A crash in the meantime leaves it whole
in the store, so nothing is ever half deleted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QPlainTextEdit, QWidget

from app.chat.conversation_groups import grouped
from app.ui.base.messages import messages

if TYPE_CHECKING:
    from app.chat.session import ChatSession
    from app.chat.store import Store
    from app.ui.controllers.chat_controller import ChatController
    from app.ui.widgets.sidebar import Sidebar

UNDO_MS = 8000  # time to read the bar and reach Undo


class Conversations(QObject):
    opened = Signal()  # a conversation (or a new chat) is in the transcript: show the chat page

    def __init__(self, chat: ChatController, store: Store, sidebar: Sidebar) -> None:
        super().__init__(chat)
        self.chat, self.store, self.sidebar = chat, store, sidebar
        self.session: ChatSession = chat.session
        self.pending: int | None = None  # deleted, Undo still offered
        self._pending_was_open = False
        self.undo_ms = UNDO_MS
        self._undo_timer = QTimer(self)
        self._undo_timer.setSingleShot(True)
        self._undo_timer.timeout.connect(self.finish_delete)
        sidebar.new_chat.connect(self.new_chat)
        sidebar.conversation_selected.connect(self._on_selected)
        sidebar.rename_requested.connect(self.rename)
        sidebar.pin_requested.connect(self.pin)
        sidebar.delete_requested.connect(self.delete)
        sidebar.undo_requested.connect(self.undo)
        sidebar.export_requested.connect(self._export_dialog)
        sidebar.search_changed.connect(lambda _text: self.refresh())
        chat.conversations_changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        shown = self.store.conversations()
        words = self.sidebar.search.text().strip()
        if words:
            found = set(self.store.search(words))
            shown = [c for c in shown if c.id in found]
        shown = [c for c in shown if c.id != self.pending]
        self.sidebar.fill(grouped(shown), self.session.conversation_id)

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

    def pin(self, cid: int, pinned: bool) -> None:
        self.store.set_pinned(cid, pinned)
        self.refresh()

    # ------------------------------------------------------------------ delete, with an Undo

    def delete(self, cid: int) -> None:
        """Hide the conversation and offer Undo; the store deletes it when the offer ends."""
        if self.chat.generating and cid == self.session.conversation_id:
            messages().error("Stop the reply before deleting its conversation.")
            return
        self.finish_delete()  # one Undo at a time: an earlier delete is done now
        title = self.store.conversation(cid).title
        self.pending, self._pending_was_open = cid, cid == self.session.conversation_id
        if self._pending_was_open:
            self.session.new()
            self.chat.transcript.clear()
        self.sidebar.show_undo(title)
        self._undo_timer.start(self.undo_ms)
        self.refresh()

    def undo(self) -> None:
        """The deleted conversation back in the list (and in the transcript, if it was open there)."""
        cid, self.pending = self.pending, None
        self._undo_timer.stop()
        self.sidebar.hide_undo()
        # back in the transcript only where the blank chat it left is still there
        if cid is not None and self._pending_was_open and self.session.conversation_id is None:
            self.open(cid, show=False)
        self.refresh()

    def finish_delete(self) -> None:
        """Delete the conversation whose Undo is offered, now (its time is up, or the window closes)."""
        cid, self.pending = self.pending, None
        self._undo_timer.stop()
        self.sidebar.hide_undo()
        if cid is not None:
            self.store.delete(cid)
            self.refresh()

    # ------------------------------------------------------------------ export

    def export(self, path: str | Path, fmt: str, cid: int | None = None) -> None:
        """Write a conversation (the open one unless `cid` says) as Markdown ("md") or JSON."""
        cid = self.session.conversation_id if cid is None else cid
        if cid is None:
            raise ValueError("no conversation is open")
        text = self.store.export_markdown(cid) if fmt == "md" else self.store.export_json(cid)
        Path(path).write_text(text, encoding="utf-8")

    def _export_dialog(self, cid: int, fmt: str) -> None:
        title = self.store.conversation(cid).title
        parent = cast(QWidget, self.sidebar.window())
        path, _ = QFileDialog.getSaveFileName(parent, "Export conversation", f"{title[:40]}.{fmt}")
        if path:
            try:
                self.export(path, fmt, cid)
            except OSError as exc:
                messages().error(f"Could not export: {exc}")
