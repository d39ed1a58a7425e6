"""A model file's SHA-256, read once per file and remembered (by path, size and modification time)
in the cache folder: the prompt cache's key to "the same model file". No Qt."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

from app.base.paths import app_dirs

log = logging.getLogger(__name__)

BLOCK = 8 << 20
_lock = threading.Lock()


def memo_path() -> Path:
    return app_dirs().cache / "file-digests.json"


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def known_sha256(path: str | Path) -> str | None:
    """The remembered digest, if the file has not changed since it was read."""
    path = Path(path).resolve()
    try:
        memo = json.loads(memo_path().read_text())
        got = memo.get(str(path))
        if got and {k: got.get(k) for k in ("size", "mtime_ns")} == _stamp(path):
            return str(got["sha256"])
    except (OSError, ValueError, AttributeError, KeyError):
        pass
    return None


def file_sha256(path: str | Path, stop: threading.Event | None = None) -> str | None:
    """The file's SHA-256 (remembered; read in 8 MiB blocks otherwise); None when `stop` was set
    while it was read or the file could not be read."""
    path = Path(path).resolve()
    known = known_sha256(path)
    if known:
        return known
    digest = hashlib.sha256()
    try:
        stamp = _stamp(path)
        with path.open("rb") as f:
            while block := f.read(BLOCK):
                if stop is not None and stop.is_set():
                    return None
                digest.update(block)
    except OSError as exc:
        log.warning("could not read %s for its SHA-256: %s", path, exc)
        return None
    sha = digest.hexdigest()
    with _lock:
        memo_file = memo_path()
        try:
            memo = json.loads(memo_file.read_text())
            if not isinstance(memo, dict):
                memo = {}
        except (OSError, ValueError):
            memo = {}
        memo = {k: v for k, v in memo.items() if Path(k).exists()}
        memo[str(path)] = {**stamp, "sha256": sha}
        try:
            memo_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = memo_file.with_name(memo_file.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(memo, indent=1))
            os.replace(tmp, memo_file)
        except OSError as exc:
            log.warning("could not remember the SHA-256 of %s: %s", path, exc)
    return sha
