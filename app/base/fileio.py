"""Small file-system helpers shared by the patcher, the downloader and the settings files: durable
writes, direct writes, a text file replaced whole, and copying or comparing byte ranges between
files by the kernel where it can. No Qt."""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_SYNC_FILE_RANGE_WRITE = 2


@functools.lru_cache(maxsize=1)
def _sync_file_range() -> Any:
    """libc's sync_file_range (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to begin writing this range to disk now, without waiting.

    Writing a big file then overlaps with the disk writes, the final fsync has little left to do,
    and gigabytes of dirty pages never pile up. Failure is harmless: the fsync still runs.
    """
    fn = _sync_file_range()
    if fn is not None:
        fn(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def write_text_atomic(path: Path, text: str) -> None:
    """`path` holds `text` whole or its old content: written beside it, then moved over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    """Make a rename in this folder durable (POSIX; a no-op elsewhere)."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


DIRECT_ALIGN = 4096  # offsets, lengths and buffer addresses of direct writes: a multiple of every sector size
# Writes through the page cache go in pieces of this size. Linux sizes page-cache folios by the write;
# on the 2-core VM, writes of 1 MiB and more were twice as slow in one run of two or three (the copy
# into the new folios stalled), while 64-128 KiB writes ran at the same speed every time.
PAGE_CACHE_WRITE = 128 << 10
_PWRITE = hasattr(os, "pwrite")  # POSIX; elsewhere (Windows) seek once and write in order


def aligned_buffer(size: int) -> mmap.mmap:
    """A writable buffer at a page boundary, as direct writes need (anonymous memory, reused)."""
    return mmap.mmap(-1, size)


class AppendWriter:
    """Writes a file front to back from `start`, truncating what was after it.

    On Linux, whole blocks at aligned offsets from an `aligned_buffer` go straight to the disk
    (O_DIRECT): no copy into the page cache, no gigabytes of dirty pages for the kernel to throttle
    and write back later, and `sync()` has only the metadata left. Anything else (a short last
    block, an unaligned resume point, a file system that refuses O_DIRECT, other systems) goes
    through the page cache. The kernel keeps the two paths coherent on one file.
    """

    def __init__(self, path: Path, start: int, *, direct: bool = True) -> None:
        self.pos = start
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
        self.direct_fd: int | None = None
        self.direct_bytes = 0
        try:
            os.ftruncate(self.fd, start)
            if not _PWRITE:
                os.lseek(self.fd, start, os.SEEK_SET)
            if direct and hasattr(os, "O_DIRECT") and _PWRITE:
                try:
                    self.direct_fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
                except OSError:  # EINVAL: this file system has no direct I/O
                    self.direct_fd = None
        except BaseException:
            os.close(self.fd)
            raise

    def write(self, data: memoryview) -> None:
        """All of `data` at the current position, or an OSError (ENOSPC: the disk is full)."""
        n = len(data)
        if self.direct_fd is not None and self.pos % DIRECT_ALIGN == 0 and n % DIRECT_ALIGN == 0 and n:
            try:
                done = 0
                while done < n:
                    done += os.pwrite(self.direct_fd, data[done:], self.pos + done)
                    if done % DIRECT_ALIGN:
                        break  # a short direct write off the alignment: the rest goes the other way
                self.direct_bytes += done
                self.pos += done
                data = data[done:]
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                os.close(self.direct_fd)  # the buffer or the file system does not allow it after all
                self.direct_fd = None
        while len(data):
            piece = data[:PAGE_CACHE_WRITE]
            if _PWRITE:
                k = os.pwrite(self.fd, piece, self.pos)
            else:
                k = os.write(self.fd, piece)
            self.pos += k
            data = data[k:]

    def rewind(self, pos: int) -> None:
        """Go back to `pos` and drop what is after it (a failed write may have left part of a block)."""
        self.pos = pos
        os.ftruncate(self.fd, pos)
        if not _PWRITE:
            os.lseek(self.fd, pos, os.SEEK_SET)

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        if self.direct_fd is not None:
            os.close(self.direct_fd)
            self.direct_fd = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> AppendWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------- copying byte ranges

COPY_CHUNK = 64 << 20  # bytes per kernel copy call: the progress granularity
BUFFER_CHUNK = 16 << 20  # the buffered fallback's read size


class CopyCancelled(Exception):
    """A copy stopped because its `cancel` callback asked; the caller cleans up."""


class ShortCopy(Exception):
    """The source ended before `length` bytes were copied."""

    def __init__(self, done: int, length: int) -> None:
        super().__init__(f"copied {done} of {length} bytes: the source ended early")
        self.done, self.length = done, length


def free_bytes(folder: Path) -> int:
    """Free bytes on the file system of `folder` (OSError when it cannot be asked)."""
    import shutil

    return shutil.disk_usage(folder).free


def check_cancel(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise CopyCancelled("cancelled")


def copy_range(src_fd: int, src_off: int, dst_fd: int, dst_off: int, length: int, *,
               progress: Callable[[int], None] | None = None, cancel: Callable[[], bool] | None = None,
               methods: tuple[str, ...] = ("copy_file_range", "sendfile", "buffered")) -> str:
    """Copy `length` bytes between two files at given offsets; return the method that did it.

    The kernel methods are tried in order and the next one takes over where one is unsupported
    (cross-filesystem, old kernel, Windows), continuing from the bytes already copied.
    """
    done = [0]  # shared with _copy_loop, so that a method that fails part-way hands over its progress
    used = []

    def kernel(step: Callable[[int, int], int], unsupported: tuple[int, ...], name: str) -> None:
        try:
            _copy_loop(step, done, length, dst_fd, dst_off, progress, cancel)
            used.append(name)
        except OSError as exc:
            if exc.errno not in unsupported:
                raise

    for method in methods:
        if done[0] >= length:
            break
        if method == "copy_file_range" and hasattr(os, "copy_file_range"):
            kernel(lambda at, n: os.copy_file_range(src_fd, dst_fd, n, src_off + at, dst_off + at),
                   (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM, errno.EBADF,
                    errno.ENOTSUP), method)
        elif method == "sendfile" and hasattr(os, "sendfile") and os.name == "posix":
            os.lseek(dst_fd, dst_off + done[0], os.SEEK_SET)
            kernel(lambda at, n: os.sendfile(dst_fd, src_fd, src_off + at, n),
                   (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF), method)
        elif method == "buffered":
            view = memoryview(bytearray(BUFFER_CHUNK))

            def buffered(at: int, n: int, view: memoryview = view) -> int:
                got = os.preadv(src_fd, [view[:n]], src_off + at) if hasattr(os, "preadv") else _pread_into(
                    src_fd, view[:n], src_off + at)
                written = 0
                while written < got:
                    written += pwrite_at(dst_fd, view[written:got], dst_off + at + written)
                return got

            _copy_loop(buffered, done, length, dst_fd, dst_off, progress, cancel, chunk=BUFFER_CHUNK)
            used.append(method)
    if done[0] != length:
        raise ShortCopy(done[0], length)
    return "+".join(used) or "nothing"


def _copy_loop(step: Callable[[int, int], int], done: list[int], length: int, dst_fd: int, dst_off: int,
               progress: Callable[[int], None] | None, cancel: Callable[[], bool] | None, chunk: int = 0) -> None:
    """Call `step(offset, count)` chunk by chunk until `length` bytes are copied (or it copies none)."""
    while done[0] < length:
        check_cancel(cancel)
        n = step(done[0], min(chunk or COPY_CHUNK, length - done[0]))
        if n == 0:
            return  # the source ended early, or this filesystem copies nothing: the next method takes over
        start_writeback(dst_fd, dst_off + done[0], n)
        done[0] += n
        if progress:
            progress(done[0])


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    os.lseek(fd, offset, os.SEEK_SET)
    data = os.read(fd, len(view))
    view[:len(data)] = data
    return len(data)


def pwrite_at(fd: int, view: memoryview, offset: int) -> int:
    """One positioned write (os.pwrite, or a seek and a write where there is none); the bytes written."""
    if _PWRITE:
        return os.pwrite(fd, view, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, view)


def compare_data(a: Path, a_off: int, b: Path, b_off: int, length: int, *,
                 progress: Callable[[int], None] | None = None, cancel: Callable[[], bool] | None = None) -> int | None:
    """Stream-compare two byte ranges; return the first differing position (relative), or None."""
    chunk = BUFFER_CHUNK
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        fa.seek(a_off)
        fb.seek(b_off)
        done = 0
        while done < length:
            check_cancel(cancel)
            want = min(chunk, length - done)
            x, y = fa.read(want), fb.read(want)
            if x != y:
                for i, (p, q) in enumerate(zip(x, y, strict=False)):
                    if p != q:
                        return done + i
                return done + min(len(x), len(y))
            done += want
            if progress:
                progress(done)
    return None
