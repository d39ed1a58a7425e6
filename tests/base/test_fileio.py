"""The append writer: whole aligned blocks straight to disk, everything else through the page cache,
and the file right either way."""

from __future__ import annotations

import os

import pytest

from app.base.fileio import DIRECT_ALIGN, AppendWriter, aligned_buffer


def takes_direct_io(folder) -> bool:
    probe = folder / "probe"
    probe.touch()
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_DIRECT))
        return True
    except (AttributeError, OSError):
        return False
    finally:
        probe.unlink()


def test_blocks_short_tails_and_an_unaligned_start(tmp_path):
    data = os.urandom(5 * DIRECT_ALIGN + 123)
    block = aligned_buffer(2 * DIRECT_ALIGN)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10_000)  # longer than the start: cut there
    with AppendWriter(path, 100) as w:
        w.write(memoryview(data)[:DIRECT_ALIGN - 100])  # up to the first aligned offset
        for at in (DIRECT_ALIGN - 100, 3 * DIRECT_ALIGN - 100):
            block[:] = data[at:at + 2 * DIRECT_ALIGN]
            w.write(memoryview(block))
        w.write(memoryview(data)[5 * DIRECT_ALIGN - 100:])  # a short tail
        w.sync()
        direct = w.direct_bytes
    assert path.read_bytes() == b"x" * 100 + data
    if not takes_direct_io(tmp_path):
        pytest.skip("the content is right; this file system refuses O_DIRECT, so the direct path is not checked")
    assert direct == 4 * DIRECT_ALIGN  # both aligned blocks, nothing else


def test_a_buffer_the_disk_refuses_falls_back_to_the_page_cache(tmp_path):
    """An O_DIRECT write from a misaligned address fails with EINVAL: written the other way, and the
    writer stops trying direct writes."""
    if not takes_direct_io(tmp_path):
        pytest.skip("this file system refuses O_DIRECT: there is no direct write to fall back from")
    raw = bytearray(os.urandom(2 * DIRECT_ALIGN + 1))
    misaligned = memoryview(raw)[1:]  # a bytearray's data is at most 16-byte aligned, so +1 is never 4096-aligned
    path = tmp_path / "f"
    with AppendWriter(path, 0) as w:
        w.write(misaligned)
        assert w.direct_fd is None and w.direct_bytes == 0
        w.write(misaligned)
    assert path.read_bytes() == bytes(misaligned) * 2


def test_rewind_drops_what_follows(tmp_path):
    path = tmp_path / "f"
    with AppendWriter(path, 0) as w:
        w.write(memoryview(b"a" * 5000))
        w.rewind(1000)
        w.write(memoryview(b"b" * 10))
    assert path.read_bytes() == b"a" * 1000 + b"b" * 10
