"""One rule for a request's top-level field that the server does not read, the same on every API it
speaks: the request is answered, and the answer names the field in its `X-Clover-Warning` header
("fields this server does not read, ignored: ...") and in its top-level `warnings` list (a stream:
in its first event where the API has a place for it), so a client never takes a field it sent for
one that did something. No API's field is refused for being unknown: clients add fields faster than
servers learn them, and a refusal would stop an agent over a field that changes nothing.

Each API's known set (its module says which is which) holds the fields it reads, those it refuses
with a 400 when they ask for what it cannot do, and those it accepts with no effect: the model's
name (the server answers with its own), who the user is, a service tier, and fields whose effect a
local server already has by itself. No I/O, no Qt."""

from __future__ import annotations

import json
from typing import Any

NAMED = 16  # fields named in one warning; past these, how many more
WORDS = "fields this server does not read, ignored: "


def unread_fields(body: dict[str, Any], known: frozenset[str]) -> str | None:
    """The warning for a body's top-level fields outside `known` (None when there are none): each
    name as JSON writes it in ASCII (a header carries it), the first NAMED of them in order."""
    names = sorted(json.dumps(k)[1:-1] for k in body if k not in known)
    if not names:
        return None
    more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return WORDS + ", ".join(names[:NAMED]) + more
