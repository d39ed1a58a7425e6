"""Versions: a regenerate or an edit keeps what it replaced (the message and everything after it),
switchable, nested versions travelling with the version they belong to, and the conversation going
on from the version shown."""

from __future__ import annotations

import pytest

from app.chat.session import ChatSession
from app.chat.store import SCHEMA_VERSION, Store
from app.engine.contract import SamplingParams


def contents(store: Store, cid: int) -> list[str]:
    return [m.content for m in store.messages(cid)]


def test_regenerate_keeps_the_old_answer_and_what_followed_it(tmp_path):
    s = Store(tmp_path / "c.db")
    cid = s.create("t")
    for role, text in (("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")):
        s.add(cid, role, text)
    assert s.versions(cid, 1) == (0, 1)
    s.keep_version(cid, 1)  # regenerate the first answer
    assert contents(s, cid) == ["q1"]
    s.add(cid, "assistant", "a1 again")
    assert s.versions(cid, 1) == (1, 2)
    s.show_version(cid, 1, 0)
    assert contents(s, cid) == ["q1", "a1", "q2", "a2"] and s.versions(cid, 1) == (0, 2)
    s.show_version(cid, 1, 1)
    assert contents(s, cid) == ["q1", "a1 again"] and s.versions(cid, 1) == (1, 2)
    s.close()
    again = Store(tmp_path / "c.db")  # kept on disk
    assert again.versions(cid, 1) == (1, 2)
    again.show_version(cid, 1, 0)
    assert contents(again, cid) == ["q1", "a1", "q2", "a2"]
    with pytest.raises(IndexError):
        again.show_version(cid, 1, 2)


def test_nested_versions_travel_with_their_version(tmp_path):
    s = Store(tmp_path / "c.db")
    cid = s.create("t")
    for role, text in (("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")):
        s.add(cid, role, text)
    s.keep_version(cid, 3)
    s.add(cid, "assistant", "a2 again")  # position 3 has two versions in the first answer's line
    assert s.versions(cid, 3) == (1, 2)
    s.keep_version(cid, 1)
    s.add(cid, "assistant", "b1")
    assert contents(s, cid) == ["q1", "b1"]
    assert s.versions(cid, 3) == (0, 1)  # b1's line has no versions at 3
    s.show_version(cid, 1, 0)
    assert contents(s, cid) == ["q1", "a1", "q2", "a2 again"] and s.versions(cid, 3) == (1, 2)
    s.show_version(cid, 3, 0)
    assert contents(s, cid) == ["q1", "a1", "q2", "a2"]


def test_an_edit_is_a_version_of_the_user_message_and_delete_drops_versions(tmp_path):
    s = Store(tmp_path / "c.db")
    cid = s.create("t")
    s.add(cid, "user", "q1")
    s.add(cid, "assistant", "a1")
    s.keep_version(cid, 0)
    s.add(cid, "user", "q1 edited")
    assert s.versions(cid, 0) == (1, 2) and contents(s, cid) == ["q1 edited"]
    s.truncate(cid, 0)  # delete: the message goes with its versions
    assert contents(s, cid) == [] and s.versions(cid, 0) == (0, 1)


def test_the_next_request_is_made_of_the_version_shown(tmp_path):
    store = Store(tmp_path / "c.db")
    session = ChatSession(store)
    session.add_user("q1", "")
    cid = session.conversation_id
    assert cid is not None
    store.add(cid, "assistant", "first answer")
    session.keep_version(1)
    store.add(cid, "assistant", "second answer")
    session.show_version(1, 0)
    session.add_user("q2", "")
    request = session.request(thinking=False, sampling=SamplingParams())
    assert [(m["role"], m["content"]) for m in request.messages] == [
        ("user", "q1"), ("assistant", "first answer"), ("user", "q2")]
    assert session.versions(1) == (0, 2)


def test_schema_4_upgrades_a_schema_3_file(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    s = Store(path)
    cid = s.create("kept")
    s.set_pinned(cid, True)
    s.close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE versions")
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    again = Store(path)
    assert SCHEMA_VERSION == 4 and again.conversation(cid).pinned and again.versions(cid, 0) == (0, 1)
