"""Conversation storage: order, truncation, exports, schema version, corruption."""

from __future__ import annotations

import json
import sqlite3

import pytest

from app.chat.store import SCHEMA_VERSION, Store


def test_conversations_and_messages(tmp_path):
    s = Store(tmp_path / "c.db")
    a = s.create("first", "be brief")
    b = s.create("second")
    s.add(a, "user", "hello")
    s.add(a, "assistant", "hi!", reasoning="greet back", stats={"generation_tps": 42.0, "generated_tokens": 3})
    assert [c.id for c in s.conversations()] == [a, b]  # most recently updated first
    msgs = s.messages(a)
    assert [(m.position, m.role, m.content) for m in msgs] == [(0, "user", "hello"), (1, "assistant", "hi!")]
    assert msgs[1].reasoning == "greet back" and msgs[1].stats["generation_tps"] == 42.0
    s.truncate(a, 1)
    assert [m.role for m in s.messages(a)] == ["user"]
    s.add(a, "assistant", "again")
    assert s.messages(a)[-1].position == 1
    s.update(a, title="renamed", system_prompt="new")
    assert s.conversation(a).title == "renamed" and s.conversation(a).system_prompt == "new"
    s.delete(b)
    with pytest.raises(KeyError):
        s.conversation(b)
    s.close()
    again = Store(tmp_path / "c.db")
    assert [m.content for m in again.messages(a)] == ["hello", "again"] and again.notice is None


def test_exports(tmp_path):
    s = Store(tmp_path / "c.db")
    cid = s.create("Weather", "You are terse.")
    s.add(cid, "user", "Lisbon or Oslo?")
    s.add(cid, "assistant", "Lisbon.", reasoning="Lisbon is south.",
          stats={"generation_tps": 200.5, "generated_tokens": 3, "ttft_seconds": 0.2})
    md = s.export_markdown(cid)
    assert md.startswith("# Weather") and "**System:** You are terse." in md
    assert "<details><summary>Reasoning</summary>" in md and "200.5 tok/s" in md
    data = json.loads(s.export_json(cid))
    assert data["messages"][1] == {"role": "assistant", "content": "Lisbon.", "reasoning": "Lisbon is south.",
                                   "stats": {"generation_tps": 200.5, "generated_tokens": 3, "ttft_seconds": 0.2}}


def test_schema_version_and_newer_database(tmp_path):
    s = Store(tmp_path / "c.db")
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    s.close()
    db = sqlite3.connect(tmp_path / "c.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    newer = Store(tmp_path / "c.db")
    assert newer.notice and "newer version" in newer.notice
    assert list(tmp_path.glob("c.db.corrupt-*"))


def test_garbage_file_is_moved_aside(tmp_path):
    (tmp_path / "c.db").write_bytes(b"\x00garbage" * 1000)
    s = Store(tmp_path / "c.db")
    assert s.notice and "moved to" in s.notice
    assert s.conversations() == []
    assert (list(tmp_path.glob("c.db.corrupt-*"))[0]).read_bytes() == b"\x00garbage" * 1000


def test_version_1_database_is_migrated_and_keeps_its_messages(tmp_path):
    db = sqlite3.connect(tmp_path / "c.db")
    from app.chat.store import _MIGRATIONS

    db.executescript(_MIGRATIONS[1])
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO conversations (id, title, system_prompt, created, updated) VALUES (1, 'old', '', 0, 0)")
    db.execute("INSERT INTO messages (conversation_id, position, role, content, created) "
               "VALUES (1, 0, 'user', 'hi', 0)")
    db.commit()
    db.close()
    s = Store(tmp_path / "c.db")
    assert s.notice is None and s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert s.conversation(1).pinned is False
    assert s.messages(1)[0].content == "hi" and s.messages(1)[0].extra == {}
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    s.add(1, "assistant", "", extra={"tool_calls": [call]})
    s.add(1, "tool", '{"temperature": 9}', extra={"name": "get_weather", "tool_call_id": "call_0"})
    msgs = [m.template_message() for m in s.messages(1)]
    assert msgs[1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert msgs[2] == {"role": "tool", "content": '{"temperature": 9}', "name": "get_weather", "tool_call_id": "call_0"}
    assert "Tool call: `get_weather({\"city\": \"Oslo\"})`" in s.export_markdown(1)
    assert json.loads(s.export_json(1))["messages"][1]["tool_calls"] == [call]


def test_a_pinned_conversation_leads_the_list_and_keeps_its_date(tmp_path):
    s = Store(tmp_path / "c.db")
    old = s.create("old")
    s.create("new")
    assert [c.title for c in s.conversations()] == ["new", "old"]
    updated = s.conversation(old).updated
    s.set_pinned(old, True)
    assert [(c.title, c.pinned) for c in s.conversations()] == [("old", True), ("new", False)]
    assert s.conversation(old).updated == updated
    s.set_pinned(old, False)
    assert [c.title for c in s.conversations()] == ["new", "old"]


def test_a_commit_waits_for_no_disk_flush_and_a_reopen_keeps_it(tmp_path):
    """WAL with synchronous NORMAL: the window's thread never waits for fsync at a message, and what
    was committed is there after the connection goes away without a clean close (an app crash)."""
    store = Store(tmp_path / "c.db")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    cid = store.create("t")
    store.add(cid, "user", "kept")
    again = Store(tmp_path / "c.db")  # the first connection is still open, as after a crash
    assert [m.content for m in again.messages(cid)] == ["kept"]
