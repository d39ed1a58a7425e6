"""Conversations in SQLite under the data folder. No Qt.

One database file (`conversations.db`), schema versioned with `PRAGMA user_version` and a
migration per version. Regenerate and edit keep what they replace as versions: the message and
everything after it, with the versions kept further on, as one JSON `tail` (`keep_version`,
`show_version`). A file that SQLite cannot read, or whose integrity check fails, is moved
aside (`conversations.db.corrupt-YYYYmmdd-HHMMSS`) and a new one started; `Store.notice` says so,
for the UI to show: nothing is silently lost.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 4
_MIGRATIONS = {
    1: """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            updated REAL NOT NULL
        );
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            reasoning TEXT NOT NULL DEFAULT '',
            stats TEXT NOT NULL DEFAULT '{}',
            created REAL NOT NULL,
            UNIQUE (conversation_id, position)
        );
        CREATE INDEX messages_by_conversation ON messages(conversation_id, position);
    """,
    # tool calls of an assistant message, and the name / call id of a tool result
    2: "ALTER TABLE messages ADD COLUMN extra TEXT NOT NULL DEFAULT '{}';",
    # a conversation pinned to the top of the list
    3: "ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;",
    # the versions a regenerate or an edit kept: a message and everything after it when it was replaced
    4: """
        CREATE TABLE versions (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            slot INTEGER NOT NULL,
            tail TEXT NOT NULL,
            created REAL NOT NULL,
            UNIQUE (conversation_id, position, slot)
        );
    """,
}


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    created: float
    updated: float
    pinned: bool = False


_CONVERSATION = "id, title, system_prompt, created, updated, pinned"


def _conversation(row: tuple) -> Conversation:
    return Conversation(row[0], row[1], row[2], row[3], row[4], bool(row[5]))


def _rowid(cur: sqlite3.Cursor) -> int:
    if cur.lastrowid is None:
        raise sqlite3.DatabaseError("the insert gave no row id")
    return cur.lastrowid


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    position: int
    role: str
    content: str
    reasoning: str
    stats: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # {"tool_calls": [...]}, {"name", "tool_call_id"}

    def template_message(self) -> dict[str, Any]:
        """The message as chat templates (and the OpenAI API) take it."""
        msg: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.role == "assistant" and self.reasoning:
            msg["reasoning_content"] = self.reasoning  # Qwen3.6-style templates keep it in tool loops
        for key in ("tool_calls", "name", "tool_call_id"):
            if self.extra and key in self.extra:
                msg[key] = self.extra[key]
        return msg


class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.notice: str | None = None
        try:
            self.db = self._open()
        except sqlite3.DatabaseError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            self.path.replace(aside)
            for suffix in ("-wal", "-shm"):
                sidecar = self.path.with_name(self.path.name + suffix)
                if sidecar.exists():
                    sidecar.replace(aside.with_name(aside.name + suffix))
            self.notice = (f"The conversation database could not be read ({exc}). It was moved to {aside} "
                           "and a new one was started.")
            self.db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False)
        try:
            db.execute("PRAGMA foreign_keys = ON")
            ok = db.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                raise sqlite3.DatabaseError(f"integrity check: {ok}")
            db.execute("PRAGMA journal_mode = WAL")
            # a commit waits for no disk flush (2-4 ms each here, tens on a hard disk, on the window's
            # thread at every message): with WAL it is never corrupt, and an app crash loses nothing;
            # only a power cut can take back the last message written
            db.execute("PRAGMA synchronous = NORMAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"written by a newer version (schema {version})")
            for v in range(version + 1, SCHEMA_VERSION + 1):
                with db:
                    db.executescript(_MIGRATIONS[v])
                    db.execute(f"PRAGMA user_version = {v}")
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ conversations

    def create(self, title: str = "New chat", system_prompt: str = "") -> int:
        now = time.time()
        with self.db:
            cur = self.db.execute("INSERT INTO conversations (title, system_prompt, created, updated) VALUES (?,?,?,?)",
                                  (title, system_prompt, now, now))
        return _rowid(cur)

    def conversations(self) -> list[Conversation]:
        rows = self.db.execute(f"SELECT {_CONVERSATION} FROM conversations "
                               "ORDER BY pinned DESC, updated DESC, id DESC").fetchall()
        return [_conversation(row) for row in rows]

    def search(self, text: str) -> list[int]:
        """The conversations whose title or messages hold every word of `text` (each word anywhere,
        case-insensitive for ASCII as SQLite's LIKE is), in the list's order."""
        where: list[str] = []
        args: list[str] = []
        for word in text.split():
            pattern = "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            where.append("(c.title LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m WHERE "
                         "m.conversation_id = c.id AND m.content LIKE ? ESCAPE '\\'))")
            args += [pattern, pattern]
        rows = self.db.execute("SELECT c.id FROM conversations c" + (" WHERE " + " AND ".join(where) if where else "")
                               + " ORDER BY c.pinned DESC, c.updated DESC, c.id DESC", args).fetchall()
        return [row[0] for row in rows]

    def conversation(self, cid: int) -> Conversation:
        row = self.db.execute(f"SELECT {_CONVERSATION} FROM conversations WHERE id = ?", (cid,)).fetchone()
        if row is None:
            raise KeyError(f"no conversation {cid}")
        return _conversation(row)

    def set_pinned(self, cid: int, pinned: bool) -> None:
        """Pin a conversation to the top of the list, or unpin it (its place by date is kept)."""
        with self.db:
            self.db.execute("UPDATE conversations SET pinned = ? WHERE id = ?", (int(pinned), cid))

    def update(self, cid: int, *, title: str | None = None, system_prompt: str | None = None) -> None:
        with self.db:
            if title is not None:
                self.db.execute("UPDATE conversations SET title = ?, updated = ? WHERE id = ?",
                                (title, time.time(), cid))
            if system_prompt is not None:
                self.db.execute("UPDATE conversations SET system_prompt = ?, updated = ? WHERE id = ?",
                                (system_prompt, time.time(), cid))

    def delete(self, cid: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM conversations WHERE id = ?", (cid,))

    # ------------------------------------------------------------------ messages

    def messages(self, cid: int) -> list[Message]:
        rows = self.db.execute("SELECT id, conversation_id, position, role, content, reasoning, stats, extra "
                               "FROM messages WHERE conversation_id = ? ORDER BY position", (cid,)).fetchall()
        return [Message(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6] or "{}"),
                        json.loads(row[7] or "{}")) for row in rows]

    def add(self, cid: int, role: str, content: str, reasoning: str = "", stats: dict | None = None,
            extra: dict | None = None) -> int:
        now = time.time()
        with self.db:
            position = self.db.execute("SELECT COALESCE(MAX(position) + 1, 0) FROM messages WHERE conversation_id = ?",
                                       (cid,)).fetchone()[0]
            cur = self.db.execute(
                "INSERT INTO messages (conversation_id, position, role, content, reasoning, stats, extra, created) "
                "VALUES (?,?,?,?,?,?,?,?)", (cid, position, role, content, reasoning, json.dumps(stats or {}),
                                             json.dumps(extra or {}, ensure_ascii=False), now))
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, cid))
        return _rowid(cur)

    def truncate(self, cid: int, from_position: int) -> None:
        """Remove the messages at and after a position, and their versions (delete)."""
        with self.db:
            self.db.execute("DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (cid, from_position))
            self.db.execute("DELETE FROM versions WHERE conversation_id = ? AND position >= ?", (cid, from_position))

    # ------------------------------------------------------------------ versions

    def _slots(self, cid: int, position: int) -> list[int]:
        rows = self.db.execute("SELECT slot FROM versions WHERE conversation_id = ? AND position = ?",
                               (cid, position)).fetchall()
        return [row[0] for row in rows]

    def _live_slot(self, cid: int, position: int, slots: list[int]) -> int:
        """The slot of the version shown at `position`: the mark its message got when it was brought
        back, else the newest (a message written after the others were kept)."""
        row = self.db.execute("SELECT extra FROM messages WHERE conversation_id = ? AND position = ?",
                              (cid, position)).fetchone()
        mark = json.loads(row[0] or "{}").get("version") if row else None
        return int(mark) if mark is not None else max(slots, default=-1) + 1

    def versions(self, cid: int, position: int) -> tuple[int, int]:
        """(the index of the version shown, how many there are) at `position`; (0, 1) with none kept."""
        slots = self._slots(cid, position)
        if not slots:
            return 0, 1
        every = sorted([*slots, self._live_slot(cid, position, slots)])
        return every.index(self._live_slot(cid, position, slots)), len(every)

    def _stash(self, cid: int, position: int, slot: int) -> None:
        """Within a transaction: the messages from `position` on and the versions after it become
        version `slot` at `position`, and leave the conversation."""
        messages = [m for m in self.messages(cid) if m.position >= position]
        if not messages:
            return
        nested = self.db.execute("SELECT position, slot, tail, created FROM versions WHERE conversation_id = ? "
                                 "AND position > ?", (cid, position)).fetchall()
        tail = {"messages": [{"role": m.role, "content": m.content, "reasoning": m.reasoning, "stats": m.stats,
                              "extra": m.extra} for m in messages],
                "versions": [{"position": p, "slot": s, "tail": t, "created": c} for p, s, t, c in nested]}
        self.db.execute("INSERT INTO versions (conversation_id, position, slot, tail, created) VALUES (?,?,?,?,?)",
                        (cid, position, slot, json.dumps(tail, ensure_ascii=False), time.time()))
        self.db.execute("DELETE FROM versions WHERE conversation_id = ? AND position > ?", (cid, position))
        self.db.execute("DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (cid, position))

    def keep_version(self, cid: int, position: int) -> None:
        """Keep the message at `position` and everything after it as a version, and take them out of
        the conversation: a regenerate or an edit writes the new version in their place."""
        with self.db:
            self._stash(cid, position, self._live_slot(cid, position, self._slots(cid, position)))

    def show_version(self, cid: int, position: int, index: int) -> None:
        """Bring back version `index` (as `versions` counts) at `position`: the one shown now is kept,
        the chosen one's messages and the versions after it take its place, and the conversation goes
        on from them."""
        slots = self._slots(cid, position)
        live = self._live_slot(cid, position, slots)
        every = sorted([*slots, live])
        if not 0 <= index < len(every):
            raise IndexError(f"no version {index} at position {position} (there are {len(every)})")
        target = every[index]
        if target == live:
            return
        with self.db:
            tail = json.loads(self.db.execute("SELECT tail FROM versions WHERE conversation_id = ? AND position = ? "
                                              "AND slot = ?", (cid, position, target)).fetchone()[0])
            self.db.execute("DELETE FROM versions WHERE conversation_id = ? AND position = ? AND slot = ?",
                            (cid, position, target))
            self._stash(cid, position, live)
            now = time.time()
            for i, m in enumerate(tail["messages"]):
                extra = dict(m["extra"] or {}, **({"version": target} if i == 0 else {}))
                self.db.execute(
                    "INSERT INTO messages (conversation_id, position, role, content, reasoning, stats, extra, "
                    "created) VALUES (?,?,?,?,?,?,?,?)", (cid, position + i, m["role"], m["content"], m["reasoning"],
                                                         json.dumps(m["stats"]), json.dumps(extra, ensure_ascii=False),
                                                         now))
            for v in tail["versions"]:
                self.db.execute("INSERT INTO versions (conversation_id, position, slot, tail, created) "
                                "VALUES (?,?,?,?,?)", (cid, v["position"], v["slot"], v["tail"], v["created"]))
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, cid))

    # ------------------------------------------------------------------ export

    def export_json(self, cid: int) -> str:
        c = self.conversation(cid)
        return json.dumps({
            "title": c.title, "system_prompt": c.system_prompt, "created": c.created, "updated": c.updated,
            "messages": [{"role": m.role, "content": m.content, "reasoning": m.reasoning, "stats": m.stats,
                          **(m.extra or {})} for m in self.messages(cid)],
        }, indent=2, ensure_ascii=False)

    def export_markdown(self, cid: int) -> str:
        c = self.conversation(cid)
        out = [f"# {c.title}", ""]
        if c.system_prompt:
            out += ["**System:** " + c.system_prompt, ""]
        for m in self.messages(cid):
            out.append(f"## {m.role.capitalize()}")
            out.append("")
            if m.reasoning:
                out += ["<details><summary>Reasoning</summary>", "", m.reasoning, "", "</details>", ""]
            if m.content:
                out += [m.content, ""]
            for call in (m.extra or {}).get("tool_calls", []):
                fn = call.get("function", {})
                out += [f"Tool call: `{fn.get('name')}({json.dumps(fn.get('arguments', {}), ensure_ascii=False)})`", ""]
            tps = m.stats.get("generation_tps")
            if tps:
                out += [f"*{m.stats.get('generated_tokens', 0)} tokens, {tps:.1f} tok/s, "
                        f"first token after {m.stats.get('ttft_seconds', 0):.2f} s*", ""]
        return "\n".join(out)
