"""A JSON POST to the local server under test, answered whatever its status: the tests of every API it
speaks read the status, the headers and the body the same way."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def post(server, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of `body` POSTed as JSON to `path` on `server` (its `port` on 127.0.0.1)."""
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()
