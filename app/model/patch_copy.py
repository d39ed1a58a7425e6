"""Writing a patched copy's bytes: the new header's pieces, and the data section shared with the
source by reflink (FICLONERANGE, on XFS and btrfs) where the file system can. No Qt.

Plain byte copying is `app.base.fileio.copy_range`; its cancel and short-source errors become the
patch's own through `patch_errors`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from app.base.fileio import CopyCancelled, ShortCopy, check_cancel, copy_range, pwrite_at
from app.gguf.gguf_file import KV, FileSpan, GGUFHeader, ValueType, header_pieces, pieces_length
from app.model.patch_profile import PatchCancelled, PatchError

try:
    import fcntl
except ImportError:  # Windows: no reflink
    fcntl = None  # type: ignore[assignment]


@contextlib.contextmanager
def patch_errors() -> Iterator[None]:
    """A copy's cancel and a source shorter than its header, as the patch's errors."""
    try:
        yield
    except CopyCancelled:
        raise PatchCancelled("cancelled") from None
    except ShortCopy as exc:
        raise PatchError(f"copied {exc.done} of {exc.length} data bytes: the source file is shorter than its "
                         "header says") from None


FICLONERANGE = 0x4020940D  # _IOW(0x94, 13, struct file_clone_range)
PADDING_KEY = "clover_launcher.padding"  # llama.cpp ignores keys it does not know


def _clone_range(src_fd: int, src_offset: int, dst_fd: int, dst_offset: int, length: int) -> None:
    import struct

    fcntl.ioctl(dst_fd, FICLONERANGE, struct.pack("qQQQ", src_fd, src_offset, length, dst_offset))


@functools.lru_cache(maxsize=16)
def _reflink_support(folder: str, device: int) -> int | None:
    """The file system block size if files in `folder` can share extents (FICLONERANGE), else None."""
    if fcntl is None or not hasattr(os, "statvfs"):
        return None
    import tempfile

    block = os.statvfs(folder).f_bsize
    try:
        with tempfile.TemporaryDirectory(dir=folder, prefix=".clover-reflink-") as tmp:
            a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
            with open(a, "wb") as f:
                f.write(b"\1" * block)
            fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDWR | os.O_CREAT)
            try:
                _clone_range(fa, 0, fb, 0, block)
            finally:
                os.close(fa)
                os.close(fb)
    except OSError:
        return None
    return block


def reflink_block(source: Path, folder: Path) -> int | None:
    """The block size to align to when the copy can be a reflink (same file system, one that shares
    extents), else None."""
    try:
        if os.stat(source).st_dev != os.stat(folder).st_dev:
            return None
        return _reflink_support(str(folder), os.stat(folder).st_dev)
    except OSError:
        return None


def header_for_reflink(header: GGUFHeader, kvs: dict[str, KV], block: int) -> list[bytes | FileSpan]:
    """The new header, padded (by a string KV llama.cpp ignores) so that the data section starts at
    the same offset modulo the block size as in the source: then the data's blocks can be shared."""
    base = dict(kvs)
    base[PADDING_KEY] = KV.make(PADDING_KEY, ValueType.STRING, "")
    unpadded = pieces_length(header_pieces(header.version, base.values(), header.tensors, 1))
    target = unpadded + (header.data_offset - unpadded) % block
    base[PADDING_KEY] = KV.make(PADDING_KEY, ValueType.STRING, " " * (target - unpadded))
    head = header_pieces(header.version, base.values(), header.tensors, header.alignment)
    assert pieces_length(head) == target and (target - header.data_offset) % block == 0
    return head


def write_pieces(fd: int, pieces: list[bytes | FileSpan], *, cancel: Callable[[], bool] | None = None) -> int:
    """Write a header's pieces at the start of `fd`: bytes as they are, a large value left in its file
    copied from there by the kernel (never held in memory). The bytes written."""
    at = 0
    for piece in pieces:
        if isinstance(piece, FileSpan):
            with piece.file.open() as src:
                copy_range(src.fileno(), piece.offset, fd, at, piece.length, cancel=cancel)
            at += piece.length
            continue
        view = memoryview(piece)
        done = 0
        while done < len(view):
            done += pwrite_at(fd, view[done:], at + done)
        at += len(view)
    return at


def reflink_copy(src_fd: int, src_off: int, dst_fd: int, dst_off: int, length: int, block: int, *,
                 cancel: Callable[[], bool] | None = None) -> str:
    """The data section: the bytes up to the source's next block boundary copied, the rest (to the
    end of the file) shared with the source; the offsets differ by a multiple of the block size."""
    head = min(-src_off % block, length)
    if head:
        copy_range(src_fd, src_off, dst_fd, dst_off, head, cancel=cancel)
    check_cancel(cancel)
    if length > head:
        _clone_range(src_fd, src_off + head, dst_fd, dst_off + head, 0)  # 0: to the end of the source
    return "reflink"
