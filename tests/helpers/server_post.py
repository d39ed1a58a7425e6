"""A JSON POST to the local server under test, answered whatever its status: the tests of every API it
speaks read the status, the headers and the body the same way; and `serve` run until it listens."""

from __future__ import annotations

import json
import threading
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


def serve_until_listening(model, **options) -> tuple[int, list[str]]:
    """serve_model in this process, stopped once it says it listens: its exit code and every line it said."""
    from app.serve.headless import serve_model

    lines: list[str] = []
    stop = threading.Event()

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("listening on"):
            stop.set()

    return serve_model(model, say=say, stop=stop, **options), lines
