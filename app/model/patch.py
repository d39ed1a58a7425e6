"""The GGUF metadata patch: profile rules as data, a new header, the data section copied by the kernel.
No Qt.

A patch profile (`resources/patch_profiles/NAME.json`, docs/clover-dialect.md says why) lists rules,
each a detector and a transform. Applying one reads the source header and runs every rule, writes the
new header to a temporary file beside the target, copies the data section unchanged
(`os.copy_file_range`), then fsyncs, re-reads and verifies it before the rename. The same rules also
give llama.cpp load-time overrides (`load_overrides`), with no copy on disk.

The steps, the checks and the failure modes: docs/architecture/files.md and docs/patch.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from app.base.fileio import (
    BUFFER_CHUNK,
    COPY_CHUNK,
    check_cancel,
    compare_data,
    copy_range,
    free_bytes,
    fsync_dir,
)
from app.gguf.gguf_file import GGUFError, TensorInfo, header_pieces, pieces_length, read_header
from app.model.patch_copy import (
    FICLONERANGE,
    PADDING_KEY,
    header_for_reflink,
    patch_errors,
    reflink_block,
    reflink_copy,
    write_pieces,
)
from app.model.patch_journal import patch_in_place, recover_in_place
from app.model.patch_probe import llama_requires_key, requires_for_header
from app.model.patch_profile import (
    APPLIED,
    CANNOT_APPLY,
    NOT_NEEDED,
    PROFILES_DIR,
    CountFromTensors,
    MoveKey,
    PatchCancelled,
    PatchError,
    PatchReport,
    Profile,
    Progress,
    Requires,
    Rule,
    RuleResult,
    TokenId,
    VerificationError,
    all_profiles,
    load_profile,
)
from app.model.patch_rules import (
    OVERRIDE_STR_MAX,
    apply_rules,
    decide_rules,
    in_dialect,
    load_overrides,
    matching_profile,
    patched_header,
    verify,
)

try:
    import fcntl
except ImportError:  # Windows: no advisory lock; the O_EXCL-free partial file is still per-target
    fcntl = None  # type: ignore[assignment]


def default_target(source: Path) -> Path:
    return source.with_name(source.stem + ".patched" + (source.suffix or ".gguf"))


def patch_file(source: str | Path, target: str | Path | None = None, profile: str | Path | Profile = "clover", *,
               dry_run: bool = False, verify_data: bool = False, overwrite: bool = False,
               progress: Progress | None = None, cancel: Callable[[], bool] | None = None,
               copy_methods: tuple[str, ...] = ("reflink", "copy_file_range", "sendfile", "buffered")) -> PatchReport:
    """Patch `source` into `target` (default: NAME.patched.gguf beside it). See the module docstring.

    Returns a report; raises GGUFError for an unreadable source, PatchError when the patch cannot
    be made (a rule cannot apply, the target exists, ...), PatchCancelled, VerificationError.
    """
    import time

    started = time.monotonic()
    source = Path(source)
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    header = read_header(source)
    kvs, results, requires = decide_rules(header, prof, source)
    dest = Path(target) if target is not None else default_target(source)
    report = PatchReport(source, dest, prof.name, results, dry_run=dry_run)
    if report.failed:
        report.notes.append("nothing written: a rule cannot apply")
        return report
    if dry_run:
        report.notes.append("dry run: nothing written")
        return report
    if not report.changed:
        report.notes.append("the file already matches upstream llama.cpp; nothing to do")
        report.target = None
        return report
    if dest.resolve() == source.resolve():
        raise PatchError("the target is the source: the patch writes a new file and never modifies the source")
    if dest.exists() and not overwrite:
        raise PatchError(f"{dest} exists; choose another target or allow overwriting")
    if dest.exists() and not dest.is_file():
        raise PatchError(f"{dest} exists and is not a regular file; choose another target")
    if not dest.parent.is_dir():
        raise PatchError(f"the target folder {dest.parent} does not exist")

    new_head = header_pieces(header.version, kvs.values(), header.tensors, header.alignment)
    block = reflink_block(source, dest.parent) if "reflink" in copy_methods else None
    if block is not None and header.data_size >= 16 * block:
        new_head = header_for_reflink(header, kvs, block)
    else:
        block = None
    head_length = pieces_length(new_head)
    total = head_length + header.data_size
    try:
        free: int | None = free_bytes(dest.parent)
    except OSError:
        free = None
    if free is not None and free < total:
        raise PatchError(f"not enough free disk in {dest.parent}: {total} bytes needed, {free} free")

    partial = dest.with_name(f".{dest.name}.clover-partial")
    fd = os.open(partial, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PatchError(f"another patch is writing {dest} right now") from None
    try:
        with patch_errors():  # a copy's cancel or short source, as PatchCancelled or PatchError
            os.ftruncate(fd, 0)  # a leftover from a crashed run is discarded here
            if progress:
                progress(0, total)
            write_pieces(fd, new_head, cancel=cancel)
            src_fd = os.open(source, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            try:
                if block is not None:
                    report.method = reflink_copy(src_fd, header.data_offset, fd, head_length, header.data_size, block,
                                                 cancel=cancel)
                else:
                    report.method = copy_range(
                        src_fd, header.data_offset, fd, head_length, header.data_size, cancel=cancel,
                        methods=tuple(m for m in copy_methods if m != "reflink"),
                        progress=(lambda done: progress(head_length + done, total)) if progress else None)
                if progress:
                    progress(total, total)
            finally:
                os.close(src_fd)
            os.fsync(fd)
            report.bytes_copied = header.data_size
            verify(partial, header, prof, requires)
            if verify_data:
                diff = compare_data(source, header.data_offset, partial, head_length, header.data_size, cancel=cancel)
                if diff is not None:
                    raise VerificationError(f"data byte {diff} of the data section differs from the source")
                report.data_verified = True
            check_cancel(cancel)
            os.replace(partial, dest)
            fsync_dir(dest.parent)
            report.written = True
    except BaseException:
        try:
            partial.unlink()
        except FileNotFoundError:
            pass
        raise
    finally:
        os.close(fd)
    report.seconds = time.monotonic() - started
    return report


__all__ = [
    "APPLIED", "BUFFER_CHUNK", "CANNOT_APPLY", "COPY_CHUNK", "FICLONERANGE", "NOT_NEEDED", "OVERRIDE_STR_MAX",
    "PADDING_KEY", "PROFILES_DIR", "CountFromTensors", "GGUFError", "MoveKey", "PatchCancelled", "PatchError",
    "PatchReport", "Profile", "Progress", "Requires", "Rule", "RuleResult", "TensorInfo", "TokenId",
    "VerificationError", "all_profiles", "apply_rules", "compare_data", "copy_range", "decide_rules", "default_target",
    "header_for_reflink", "in_dialect", "llama_requires_key", "load_overrides", "load_profile", "matching_profile",
    "patch_file", "patch_in_place", "patched_header", "recover_in_place", "reflink_block", "reflink_copy",
    "requires_for_header", "verify", "write_pieces",
]
