"""The conversation list's groups: Pinned, then Today, Yesterday, Previous 7 days and Older by the
day a conversation was last written to, in local time. No Qt.

Days are calendar days, not spans of 24 hours: a chat from 23:50 is "Yesterday" ten minutes later.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from app.chat.store import Conversation

PINNED, TODAY, YESTERDAY, WEEK, OLDER = "Pinned", "Today", "Yesterday", "Previous 7 days", "Older"
ORDER = (PINNED, TODAY, YESTERDAY, WEEK, OLDER)


def day_group(updated: float, today: date) -> str:
    """The date group of a conversation last written at `updated` (a Unix time), seen on `today`."""
    days = (today - datetime.fromtimestamp(updated).date()).days
    if days <= 0:  # today, or a clock set back: never "Older" for a chat written a moment ago
        return TODAY
    if days == 1:
        return YESTERDAY
    return WEEK if days <= 7 else OLDER


def grouped(conversations: Sequence[Conversation], now: datetime | None = None) -> list[tuple[str, list[Conversation]]]:
    """(group, its conversations) in the list's order, empty groups left out; each group keeps the
    order given (the store's: most recently written first)."""
    today = (now or datetime.now()).date()
    groups: dict[str, list[Conversation]] = {name: [] for name in ORDER}
    for c in conversations:
        groups[PINNED if c.pinned else day_group(c.updated, today)].append(c)
    return [(name, groups[name]) for name in ORDER if groups[name]]
