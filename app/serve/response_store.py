"""Responses the local server keeps for `/v1/responses` (`store`, the default, and
`previous_response_id`): each one's answer and the conversation that led to it, as one JSON file in
the data folder (`<data>/server-responses/`), so a client can go on from a response by its id, also
after a restart. Bounded: the latest `limit` responses and `max_bytes` in all; the oldest go first.
No Qt."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from app.base.paths import app_dirs

LIMIT = 256  # responses kept
MAX_BYTES = 64 << 20  # in all; one larger than this alone is not kept
_ID = re.compile(r"^resp_[A-Za-z0-9]{1,64}$")


class ResponseStore:
    def __init__(self, folder: Path | None = None, limit: int = LIMIT, max_bytes: int = MAX_BYTES) -> None:
        self._folder = folder
        self.limit, self.max_bytes = limit, max_bytes
        self._lock = threading.Lock()

    @property
    def folder(self) -> Path:
        return self._folder or app_dirs().data / "server-responses"

    def _path(self, rid: str) -> Path | None:
        return self.folder / f"{rid}.json" if _ID.match(rid) else None

    def put(self, rid: str, response: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        """Keep a response and the conversation it ends (the messages it answered, then its own)."""
        path = self._path(rid)
        if path is None:
            raise ValueError(f"not a response id: {rid!r}")
        data = json.dumps({"response": response, "messages": messages}, ensure_ascii=False).encode()
        if len(data) > self.max_bytes:
            return
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            part = path.with_suffix(".part")
            part.write_bytes(data)
            os.replace(part, path)
            self._prune()

    def get(self, rid: str) -> dict[str, Any] | None:
        """{"response": ..., "messages": [...]} or None when it is not kept (never was, or pruned)."""
        path = self._path(rid)
        if path is None:
            return None
        try:
            value = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def _prune(self) -> None:
        files = []
        for p in self.folder.glob("resp_*.json"):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((st.st_mtime_ns, p.name, st.st_size, p))
        files.sort(reverse=True)  # newest first
        total = 0
        for i, (_, _, size, p) in enumerate(files):
            total += size
            if i >= self.limit or total > self.max_bytes:
                p.unlink(missing_ok=True)
