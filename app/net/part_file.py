"""The part of a download on disk: `NAME.part` beside the target and its record `NAME.part.json`,
the running SHA-256 of what it holds at each checkpoint, and where a resume may start (app/net/
download.py asks it). A layout (an in-stream patch) puts a new header in front of the source's bytes.
Every rule, and what happens after a crash: docs/architecture/files.md. No Qt."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.base.fileio import fsync_dir
from app.net.responses import safe_url


@dataclass(frozen=True)
class Layout:
    """Where the source's bytes go in the file written (an in-stream patch): the file starts with
    `prefix` (a new header); the source's first `skip` bytes (its own header, given as `skipped`)
    are hashed, so the source's SHA-256 is still checked, but not written; byte i >= skip of the
    source lands at len(prefix) + i - skip."""

    prefix: bytes
    skip: int
    skipped: bytes

    @property
    def shift(self) -> int:
        return len(self.prefix) - self.skip

    def fingerprint(self) -> str:
        return hashlib.sha256(self.prefix + self.skip.to_bytes(8, "little")).hexdigest()


def _hash_from(f: Any, length: int, h: Any) -> None:
    """Add the next `length` bytes of `f` (fewer at its end) to the hash `h`, 16 MiB at a time."""
    left = length
    while left > 0:
        chunk = f.read(min(16 << 20, left))
        if not chunk:
            break
        h.update(chunk)
        left -= len(chunk)


class PartFile:
    """`NAME.part` beside the target and its record `NAME.part.json`.

    It knows how many of the source's bytes the part holds (`start`, the offset a resume asks
    from), the SHA-256 of exactly those bytes (`hasher`) and the validator (ETag or Last-Modified)
    of the version they came from; the record also says what the whole file should be (`expected`,
    `hash_source`, `total`). With a layout the part is `shift` bytes longer than the source's bytes
    it holds: it starts with the new header, and the source's own header is hashed but not written.

    The record's first line is the checkpoint (a JSON object, replaced atomically and fsynced); each
    line after it, appended as a block is hashed (`mark`), gives the part's length and SHA-256 at that
    block's end, so a process killed between checkpoints loses at most the blocks not yet hashed."""

    def __init__(self, target: Path, url: str, layout: Layout | None) -> None:
        self.path = target.with_name(target.name + ".part")
        self.meta_path = target.with_name(target.name + ".part.json")
        self.folder = target.parent
        self.url, self.layout = url, layout
        self.shift = layout.shift if layout is not None else 0
        self.start = 0
        self.hasher: Any = hashlib.sha256()
        self.validator: str | None = None
        self.expected: str | None = None
        self.hash_source = "none"
        self.total: int | None = None
        self.notes: list[str] = []  # what a resume found, in words
        # the part's length when it holds none of the source's bytes (with a layout: the new header)
        self.floor = len(layout.prefix) if layout is not None else 0

    def resume(self) -> dict[str, Any] | None:
        """Take the part up where the last point of its record that its bytes still hash to says it
        ends, cutting off what lies past that point (a crash's unrecorded tail); the record's
        checkpoint is returned. A part with no usable record, or that matches no point of it, is
        started over, with a note (None)."""
        if not self.path.exists():
            self.start_over()
            return None
        have = self.path.stat().st_size
        meta, points = self._read_record()
        if meta is None or not self._usable(meta):
            if have > self.floor:
                self.notes.append(f"a partial download ({have:,} bytes) had no usable record of what it holds "
                                  f"({self.meta_path.name}), so it could not be checked: started over")
            self.start_over()
            return None
        found = self._verified_prefix(points, have)
        if found is None:
            if have > self.floor:
                self.notes.append(f"the partial download ({have:,} bytes) does not match its record "
                                  "(it changed on disk): started over")
            self.start_over()
            return None
        length, h = found
        if length < have:
            os.truncate(self.path, length)  # past the last recorded point: bytes no hash vouches for
        self.start, self.hasher, self.validator = length - self.shift, h, meta.get("validator")
        return meta

    def _read_record(self) -> tuple[dict[str, Any] | None, list[tuple[int, str]]]:
        """The record's checkpoint (None: missing or unreadable) and every (length, SHA-256) point it
        gives, the checkpoint's among them. A line cut short by a crash is passed over."""
        try:
            lines = self.meta_path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            return None, []
        entries: list[Any] = []
        for line in lines:
            try:
                entries.append(json.loads(line))
            except ValueError:
                entries.append(None)
        meta = entries[0] if entries and isinstance(entries[0], dict) and "url" in entries[0] else None
        if meta is None:
            return None, []
        points = [(e["length"], e["part_sha256"]) for e in entries
                  if isinstance(e, dict) and isinstance(e.get("length"), int) and isinstance(e.get("part_sha256"), str)]
        return meta, points

    def _usable(self, meta: dict[str, Any]) -> bool:
        """The record is of this download: the same set-up (layout), and the same URL, or the same
        file by its known SHA-256 (a download moved to another address)."""
        layout = self.layout.fingerprint() if self.layout is not None else None
        if meta.get("layout") != layout:
            return False
        return meta.get("url") == safe_url(self.url) or (self.expected is not None
                                                          and meta.get("expected_sha256") == self.expected)

    def _verified_prefix(self, points: list[tuple[int, str]], have: int) -> tuple[int, Any] | None:
        """The longest recorded length (within the `have` bytes the part holds, and holding some of the
        source's bytes) whose recorded SHA-256 the part's bytes match, with the hash at that point."""
        wanted = sorted({(length, digest) for length, digest in points if self.floor < length <= have})
        if not wanted:
            return None
        h = hashlib.sha256(self.layout.skipped if self.layout is not None else b"")
        best = None
        with open(self.path, "rb") as f:
            f.seek(self.floor)
            at = self.floor
            for length, digest in wanted:
                _hash_from(f, length - at, h)
                at = length
                if h.hexdigest() == digest:
                    best = (length, h.copy())
        return best

    def start_over(self) -> None:
        """The one way to start over: the part holds none of the source's bytes (with a layout, only
        the new header, the source's own header already hashed), no version is known, and the old
        record is gone (the next checkpoint writes a new one)."""
        self.validator = None
        self.meta_path.unlink(missing_ok=True)
        if self.layout is None:
            self.path.unlink(missing_ok=True)
            self.start, self.hasher = 0, hashlib.sha256()
            return
        with open(self.path, "wb") as f:
            f.write(self.layout.prefix)
            f.flush()
            os.fsync(f.fileno())
        self.start, self.hasher = self.layout.skip, hashlib.sha256(self.layout.skipped)

    def checkpoint(self, hasher: Any = None) -> None:
        """Record the part's length and the SHA-256 of the source's bytes it holds (`hasher`: the one
        still being fed while a body is received), atomically and durably; the points marked since
        the last checkpoint go (this one is the newest)."""
        h = self.hasher if hasher is None else hasher
        tmp = self.meta_path.with_name(self.meta_path.name + ".tmp")
        line = json.dumps({"url": safe_url(self.url), "length": self.start + self.shift,
                           "part_sha256": h.hexdigest(), "expected_sha256": self.expected,
                           "hash_source": self.hash_source, "size": self.total, "validator": self.validator,
                           "layout": self.layout.fingerprint() if self.layout is not None else None})
        with open(tmp, "w") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())  # a crash of the machine leaves the old checkpoint or this one, never none
        os.replace(tmp, self.meta_path)

    def mark(self, length: int, digest: str) -> None:
        """Record that the part's first `length` bytes, written, hash to `digest` (a line appended to
        the record, on the hashing thread). Not fsynced: a resume checks every point against the bytes,
        so one that a crash of the machine left ahead of them is passed over. A failure is not an error:
        it costs a resume only the bytes since the previous point."""
        line = (json.dumps({"length": length, "part_sha256": digest}) + "\n").encode()
        try:
            fd = os.open(self.meta_path, os.O_WRONLY | os.O_APPEND)  # below a checkpoint, never on its own
        except OSError:
            return
        try:
            os.write(fd, line)
        except OSError:
            pass
        finally:
            os.close(fd)

    def discard(self) -> None:
        """Delete the part and its checkpoint: nothing half-trusted is kept."""
        self.path.unlink(missing_ok=True)
        self.meta_path.unlink(missing_ok=True)

    def finish(self, target: Path) -> None:
        """The part becomes the target, durably."""
        with open(self.path, "rb+") as f:
            os.fsync(f.fileno())  # what went through the page cache (direct writes are on disk already)
        os.replace(self.path, target)
        fsync_dir(target.parent)
        self.meta_path.unlink(missing_ok=True)
