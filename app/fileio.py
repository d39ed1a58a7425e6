"""Small file-system helpers shared by the patcher and the downloader. No Qt."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path

_SYNC_FILE_RANGE_WRITE = 2


@functools.lru_cache(maxsize=1)
def _sync_file_range():
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
