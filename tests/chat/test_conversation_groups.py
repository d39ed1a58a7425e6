"""The conversation list's date groups and the store's search, with fixed dates."""

from __future__ import annotations

from datetime import datetime

from app.chat.conversation_groups import OLDER, PINNED, TODAY, WEEK, YESTERDAY, day_group, grouped
from app.chat.store import Conversation, Store

NOW = datetime(2026, 12, 7, 9, 30)  # a Monday morning, local time


def at(*when: int) -> float:
    return datetime(*when).timestamp()


def conv(cid: int, updated: float, pinned: bool = False) -> Conversation:
    return Conversation(cid, f"chat {cid}", "", updated, updated, pinned)


def test_days_are_calendar_days_in_local_time():
    today = NOW.date()
    assert day_group(at(2026, 12, 7, 0, 1), today) == TODAY
    assert day_group(at(2026, 12, 6, 23, 50), today) == YESTERDAY  # ten minutes before midnight
    assert day_group(at(2026, 12, 5, 12, 0), today) == WEEK
    assert day_group(at(2026, 11, 30, 8, 0), today) == WEEK  # seven days ago
    assert day_group(at(2026, 11, 29, 23, 0), today) == OLDER  # eight
    assert day_group(at(2026, 12, 8, 10, 0), today) == TODAY  # a clock set back: not "Older"


def test_pinned_first_then_by_day_empty_groups_left_out_order_kept():
    chats = [conv(1, at(2026, 12, 7, 9, 0)), conv(2, at(2026, 1, 1, 9, 0), pinned=True),
             conv(3, at(2026, 12, 7, 8, 0)), conv(4, at(2025, 6, 1, 9, 0))]
    assert [(name, [c.id for c in cs]) for name, cs in grouped(chats, NOW)] == [
        (PINNED, [2]), (TODAY, [1, 3]), (OLDER, [4])]
    assert grouped([], NOW) == []


def test_search_finds_titles_and_message_text_every_word_anywhere(tmp_path):
    store = Store(tmp_path / "c.db")
    weather = store.create("Weather in Lisbon")
    store.add(weather, "user", "Is it warm?")
    store.add(weather, "assistant", "Sunny and 24 degrees.")
    code = store.create("Refactor")
    store.add(code, "user", "Rename the parser to 100%_reader")
    assert store.search("sunny") == [weather]  # a word from an answer, any case
    assert store.search("lisbon DEGREES") == [weather]  # one word in the title, one in a message
    assert store.search("parser sunny") == []  # every word must be in the conversation
    assert store.search("100%_r") == [code]  # LIKE's wild cards are taken literally
    assert store.search("0_") == []  # "_" unescaped would match the "00" of 100
    assert store.search("  ") == [code, weather]  # no words: all, newest first
    store.close()
