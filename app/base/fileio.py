"""Small file-system helpers shared by the patcher and the downloader. No Qt."""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import sys
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
