"""Patching a file's header in place, under an undo journal. No Qt.

Only when the new header fits the old one's alignment padding (no tensor byte moves). The old
header is saved to an fsynced journal (`.NAME.clover-undo`) before the file is touched, and the
journal is removed only after the new header is on disk and verified, so `recover_in_place` can
always give the original file back after a crash.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from app.base.fileio import fsync_dir
from app.gguf.gguf_file import encode_header, header_pieces, pieces_length, read_header
from app.model.patch_profile import PatchError, PatchReport, Profile, VerificationError, load_profile
from app.model.patch_rules import decide_rules, verify

_UNDO_MAGIC = b"CLOVER-UNDO-1\n"


def undo_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.clover-undo")


def overwrite_start(path: Path, data: bytes) -> None:
    """Write `data` over the first bytes of the file, durably."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        os.pwrite(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def recover_in_place(path: str | Path) -> bool:
    """Finish an interrupted in-place patch by putting the original header back. True if it did.

    The undo journal is written and fsynced before the file's header is touched, and removed only
    after the new header is on disk, so a journal that exists and is complete means the header may
    be torn: restoring it gives the original file back byte for byte.
    """
    path = Path(path)
    undo = undo_path(path)
    if not undo.exists():
        return False
    blob = undo.read_bytes()
    import hashlib

    ok = blob.startswith(_UNDO_MAGIC) and len(blob) >= len(_UNDO_MAGIC) + 32
    if ok:
        digest, saved = blob[len(_UNDO_MAGIC):len(_UNDO_MAGIC) + 32], blob[len(_UNDO_MAGIC) + 32:]
        ok = hashlib.sha256(saved).digest() == digest
    if not ok:
        # The crash came while the journal itself was being written: the file was not touched yet.
        undo.unlink()
        fsync_dir(path.parent)
        return False
    overwrite_start(path, saved)
    undo.unlink()
    fsync_dir(path.parent)
    return True


def patch_in_place(path: str | Path, profile: str | Path | Profile = "clover", *,
                   write_header: Callable[[Path, bytes], None] = overwrite_start) -> PatchReport:
    """Rewrite only the header of `path`, when that is provably safe; otherwise refuse.

    Safe means: the new header ends inside the old header's alignment padding, so the data section
    does not move and no tensor byte is rewritten; and the old header is first saved to an fsynced
    undo journal (`.NAME.clover-undo`), so a crash during the header write is undone by
    `recover_in_place` (which every patch of the file runs first). `write_header(path, head)` writes
    the new header over the old one (a test passes one that stops half-way, as a crash would).
    """
    import hashlib
    import time

    started = time.monotonic()
    path = Path(path)
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    recovered = recover_in_place(path)
    header = read_header(path)
    kvs, results, requires = decide_rules(header, prof, path)
    report = PatchReport(path, path, prof.name, results)
    if recovered:
        report.notes.append("an interrupted in-place patch was undone first")
    if report.failed:
        report.notes.append("nothing written: a rule cannot apply")
        return report
    if not report.changed:
        report.notes.append("the file already matches upstream llama.cpp; nothing to do")
        return report
    pieces = header_pieces(header.version, kvs.values(), header.tensors, header.alignment)
    if pieces_length(pieces) != header.data_offset:
        raise PatchError(
            f"in-place patching is not safe for this file: the new header needs {pieces_length(pieces)} bytes with "
            f"padding but the data section starts at {header.data_offset}, so every tensor byte would move; "
            "write a patched copy instead (it takes about as long as copying the file)")
    # in place, a large value left in the file is read first: the header is rewritten over where it lies
    new_head = encode_header(header.version, kvs.values(), header.tensors, header.alignment)
    with open(path, "rb") as f:
        old_head = f.read(header.data_offset)
    undo = undo_path(path)
    with open(undo, "wb") as f:
        f.write(_UNDO_MAGIC + hashlib.sha256(old_head).digest() + old_head)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(path.parent)
    write_header(path, new_head)  # a crash from here on is undone by recover_in_place
    try:
        verify(path, header, prof, requires)
    except VerificationError:
        recover_in_place(path)
        raise
    undo.unlink()
    fsync_dir(path.parent)
    report.written = True
    report.seconds = time.monotonic() - started
    report.method = "header rewritten in place"
    return report
