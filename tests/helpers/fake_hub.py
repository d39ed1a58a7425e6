"""A fake Hugging Face Hub on 127.0.0.1: the endpoints huggingface_hub and the app's downloader call.

Read from huggingface_hub 2.4's own source (hf_api.py, utils/_http.py, utils/_pagination.py):
- `GET /api/models?search=&filter=gguf&sort=downloads&limit=&expand=...` (HfApi.list_models):
  a JSON list of models;
- `GET /api/models/OWNER/NAME[/revision/REV]?blobs=True` (HfApi.model_info with files_metadata):
  the model with `siblings` [{rfilename, size, blobId, lfs: {size, sha256, pointerSize}}];
- `GET /OWNER/NAME/resolve/REV/PATH` (hf_hub_url): the file, with Range, `X-Linked-Etag` (the
  SHA-256) and `X-Linked-Size`, as the Hub's CDN redirect ends up serving;
- errors with the headers huggingface_hub reads: 404 + `X-Error-Code: RepoNotFound`,
  401 + `X-Error-Code: GatedRepo` for a gated repo without the right token, 429 + `Retry-After`.
Faults: `latency` seconds before every answer, `rate_limit_first` 429s, `stall` paths that never
answer within a client's timeout. Used through `HF_ENDPOINT`; no test touches the real network.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.http_server import serve_handler


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, Path]  # path in repo -> local file
    downloads: int = 0
    likes: int = 0
    license: str = "apache-2.0"
    gated: bool = False
    last_modified: str = "2026-10-01T12:00:00.000Z"
    extra_files: dict[str, bytes] = field(default_factory=dict)  # small non-LFS files (README.md, ...)


@dataclass
class HubState:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    token: str = "hf_test_token"  # the token that opens gated repos
    latency: float = 0.0
    rate_limit_first: int = 0
    retry_after: int = 1
    stall: set[str] = field(default_factory=set)  # resolve paths ("repo/path") that stall
    stall_seconds: float = 5.0
    requests: list[dict] = field(default_factory=list)
    bytes_sent: int = 0
    _sha: dict[Path, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo: FakeRepo) -> FakeRepo:
        self.repos[repo.repo_id] = repo
        return repo

    def sha256(self, path: Path) -> str:
        with self._lock:
            if path not in self._sha:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                self._sha[path] = h.hexdigest()
            return self._sha[path]

    def header_requests(self) -> list[dict]:
        return [r for r in self.requests if "/resolve/" in r["path"]]


def _model_json(state: HubState, repo: FakeRepo, blobs: bool) -> dict:
    siblings = []
    for name, path in repo.files.items():
        entry: dict = {"rfilename": name}
        if blobs:
            size = path.stat().st_size
            entry.update(size=size, blobId=hashlib.sha1(name.encode()).hexdigest(),
                         lfs={"size": size, "sha256": state.sha256(path), "pointerSize": 134})
        siblings.append(entry)
    for name, data in repo.extra_files.items():
        entry = {"rfilename": name}
        if blobs:
            entry.update(size=len(data), blobId=hashlib.sha1(data).hexdigest())
        siblings.append(entry)
    return {"id": repo.repo_id, "_id": repo.repo_id, "author": repo.repo_id.split("/")[0],
            "downloads": repo.downloads, "likes": repo.likes, "lastModified": repo.last_modified,
            "gated": "auto" if repo.gated else False, "private": False,
            "tags": ["gguf", f"license:{repo.license}", "text-generation"], "library_name": "gguf",
            "siblings": siblings, "sha": "0" * 40}


def _handler(state: HubState):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _json(self, status: int, payload, headers: dict | None = None) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str | None, message: str, headers: dict | None = None) -> None:
            h = dict(headers or {})
            if code:
                h["X-Error-Code"] = code
            h["X-Error-Message"] = message
            self._json(status, {"error": message}, h)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            state.requests.append({"method": self.command, "path": url.path, "query": query,
                                   "headers": dict(self.headers)})
            if state.latency:
                time.sleep(state.latency)
            if url.path.startswith("/api/") and state.rate_limit_first > 0:
                state.rate_limit_first -= 1
                self._error(429, None, "rate limited", {"Retry-After": str(state.retry_after)})
                return
            path = urllib.parse.unquote(url.path)
            if path == "/api/models":
                self._list(query)
                return
            m = re.fullmatch(r"/api/models/([^/]+/[^/]+?)(?:/revision/[^/]+)?", path)
            if m:
                repo = state.repos.get(m.group(1))
                if repo is None:
                    self._error(404, "RepoNotFound", "Repository not found")
                    return
                self._json(200, _model_json(state, repo, "blobs" in query))
                return
            m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/[^/]+/(.+)", path)
            if m:
                self._resolve(m.group(1), m.group(2))
                return
            self._error(404, None, "not found")

        def _list(self, query: dict) -> None:
            search = (query.get("search") or [""])[0].lower()
            limit = int((query.get("limit") or ["1000"])[0])
            found = [r for r in state.repos.values() if search in r.repo_id.lower()]
            if "gguf" in query.get("filter", []):
                found = [r for r in found if any(p.endswith(".gguf") for p in r.files)]
            if (query.get("sort") or [""])[0] == "downloads":
                found.sort(key=lambda r: -r.downloads)
            self._json(200, [{k: v for k, v in _model_json(state, r, False).items() if k != "siblings"}
                             for r in found[:limit]])

        def _resolve(self, repo_id: str, name: str) -> None:
            repo = state.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return
            if repo.gated and self.headers.get("Authorization") != f"Bearer {state.token}":
                self._error(401, "GatedRepo", "Access to this model is restricted")
                return
            if f"{repo_id}/{name}" in state.stall:
                time.sleep(state.stall_seconds)
            if name in repo.extra_files:
                data = repo.extra_files[name]
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                return
            file = repo.files.get(name)
            if file is None:
                self._error(404, "EntryNotFound", "Entry not found")
                return
            size = file.stat().st_size
            start, end = 0, size - 1
            rng = self.headers.get("Range")
            partial = False
            if rng and (m := re.match(r"bytes=(\d+)-(\d*)", rng)):
                start = int(m.group(1))
                end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
                partial = True
                if start >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            self.send_response(206 if partial else 200)
            if partial:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("X-Linked-Etag", f'"{state.sha256(file)}"')
            self.send_header("X-Linked-Size", str(size))
            self.send_header("ETag", f'"{state.sha256(file)}"')
            self.end_headers()
            if self.command == "HEAD":
                return
            with open(file, "rb") as f:
                try:
                    self.wfile.flush()
                    sent = self.connection.sendfile(f, start, end - start + 1)
                    with state._lock:
                        state.bytes_sent += sent
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass

    return Handler


def fake_hub(state: HubState) -> contextlib.AbstractContextManager[str]:
    """Serve `state` on 127.0.0.1 (a free port); yields the endpoint URL (for HF_ENDPOINT)."""
    return serve_handler(_handler(state))
