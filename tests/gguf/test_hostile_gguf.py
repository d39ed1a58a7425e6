"""Hostile GGUF files against `python -m app patch`, `patch --dry-run` and `plan` (issue 29, item 7):
what is not a file, an architecture name that is not text, and legal headers with huge arrays.
Each test failed before its fix."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.gguf import gguf_file, gguf_read
from app.gguf.gguf_file import KV, MAGIC, GGUFError, TensorInfo, ValueType, encode_header, encode_string, read_header
from tests.conftest import ROOT
from tests.helpers.app_process import app_command, run_app
from tests.helpers.gguf_models import write_glm4_moe

V = ValueType
COMMANDS = (("patch",), ("patch", "--dry-run"), ("plan",))


def dialect_file(path: Path, *, arch: bytes = b"glm4moe", extra: list[KV] = ()) -> int:
    """A small file in the Clover dialect (the patch has two rules to apply), `extra` KVs after its
    own; the header's size."""
    def string(text: bytes) -> bytes:
        return struct.pack("<Q", len(text)) + text

    name = arch.decode("utf-8", "replace")
    kvs = [KV("general.architecture", V.STRING, string(arch)),
           KV.make(f"{name}.block_count", V.UINT32, 1),
           KV.make(f"{name}.rope.partial_dimension_count", V.UINT32, 64),
           KV.make(f"{name}.rope.dimension_count", V.UINT32, 128),
           KV.make("tokenizer.ggml.tokens", V.ARRAY, ["a", "<|endoftext|>", "<|im_end|>"], V.STRING),
           KV.make("tokenizer.ggml.eos_token_id", V.UINT32, 1), *extra]
    head = encode_header(3, kvs, [TensorInfo("blk.0.attn_norm.weight", (32,), 0, 0)], 32)
    with open(path, "wb") as f:
        f.write(head)
        f.write(bytes(range(128)))
    return len(head)


def big_u8(n: int) -> KV:
    return KV("clover_test.big_u8", V.ARRAY, struct.pack("<IQ", int(V.UINT8), n) + bytes(n), V.UINT8, n)


def one_byte_strings(n: int) -> KV:
    return KV("clover_test.strings", V.ARRAY, struct.pack("<IQ", int(V.STRING), n) + (struct.pack("<Q", 1) + b"s") * n,
              V.STRING, n)


# ----------------------------------------------------------------------------- not a regular file


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_a_fifo_is_refused_before_it_is_opened(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    # the window's Open model… and every command read a header through read_header: on a thread here,
    # so that a read that waits for a writer (as before) fails the test instead of hanging it
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            read_header(fifo)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (the test looks at what it was)
            outcome.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # a writer comes and goes: the open returns
        pytest.fail("read_header waited on a FIFO")
    assert isinstance(outcome[0], GGUFError) and "is not a regular file" in str(outcome[0])
    for command in COMMANDS:
        try:
            r = run_app(*command, str(fifo), timeout=30)  # before: all three waited for a writer forever
        except subprocess.TimeoutExpired:
            pytest.fail(f"`python -m app {' '.join(command)}` hung on a FIFO")
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        assert f"{fifo} is not a regular file (it is a named pipe (FIFO))" in r.stderr, (command, r.stderr)


def test_a_directory_is_said_in_words(tmp_path):
    folder = tmp_path / "model.gguf"
    folder.mkdir()
    for command in COMMANDS:
        r = run_app(*command, str(folder))
        assert r.returncode == 2, (command, r.stderr)
        assert f"{folder} is not a regular file (it is a directory)" in r.stderr and "Errno" not in r.stderr, \
            (command, r.stderr)


def test_a_missing_file_is_said_in_words(tmp_path):
    missing = tmp_path / "missing.gguf"
    for command in COMMANDS:
        r = run_app(*command, str(missing))
        assert r.returncode == 2 and f"error: {missing}: No such file or directory" in r.stderr, (command, r.stderr)
        assert "Errno" not in r.stderr


# ----------------------------------------------------------------------------- text that is not text


def test_an_architecture_name_that_is_not_utf8_is_said_in_words(tmp_path):
    path = tmp_path / "bad-arch.gguf"
    dialect_file(path, arch=b"ll\xffama")
    with pytest.raises(GGUFError, match=r"architecture name \(general.architecture\) is not valid UTF-8"):
        read_header(path)
    for command in COMMANDS:
        r = run_app(*command, str(path))
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        assert "the header's architecture name (general.architecture) is not valid UTF-8: b'll\\xffama'" \
            in r.stderr, (command, r.stderr)
        assert "\ufffd" not in r.stderr + r.stdout and "the model has no" not in r.stderr


def test_a_missing_key_is_a_sentence_not_a_quoted_key(tmp_path):
    path = tmp_path / "no-blocks.gguf"
    head = encode_header(3, [KV.make("general.architecture", V.STRING, "llama")],
                         [TensorInfo("token_embd.weight", (32,), 0, 0)], 32)
    path.write_bytes(head + b"\0" * 128)
    r = run_app("plan", str(path))
    assert r.returncode == 2 and "error: the model has no llama.block_count\n" in r.stderr, r.stderr


# ----------------------------------------------------------------------------- huge legal arrays


def test_each_string_is_walked_once_however_far_the_window_moves(tmp_path, monkeypatch):
    """300,000 strings (2.7 MB) read through a 256 KiB window: before, each larger re-read walked the
    strings again from the start (about twice the strings in all; 5.6 s for 6 million)."""
    path = tmp_path / "strings.gguf"
    dialect_file(path, extra=[one_byte_strings(300_000), KV.make("after", V.UINT32, 7)])
    gguf_read._WALKED.clear()
    calls = []
    real = gguf_read._U64.unpack_from
    monkeypatch.setattr(gguf_read, "_U64", type("Counting", (), {
        "unpack_from": staticmethod(lambda *a: calls.append(1) or real(*a))})())
    header = read_header(path, first_read=256 << 10)
    assert len(calls) < 300_000 + 1_000, len(calls)
    assert header.get("after") == 7 and header.kvs["clover_test.strings"].count == 300_000
    assert header.kvs["clover_test.strings"].value[299_999] == "s"


# Linux's own figures for this process (VmHWM: the peak; getrusage's ru_maxrss would carry the peak of
# the pytest process that started it across exec)
MEASURE = """
import sys, time
from app.model.patch import patch_file

def status(name):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(name + ":"))

before = status("VmRSS")
started = time.perf_counter()
dry = patch_file(sys.argv[1], dry_run=True)
report = patch_file(sys.argv[1], sys.argv[2])
print(status("VmHWM") - before, time.perf_counter() - started, report.written, dry.changed)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc/self/status (VmHWM)")
def test_huge_arrays_are_copied_not_held_in_memory(tmp_path):
    """A header of 40 million u8 elements and 2.5 million one-byte strings (62.5 MB), dry run and patch in
    a new process: its peak memory grows by the reader's windows (8 MiB, up to 16 MiB while a value may
    still be kept) and a hash's piece, 29 MB here, not by the arrays (before: about 4x the header, 250 MB);
    the arrays reach the patched file byte for byte."""
    source, target = tmp_path / "huge.gguf", tmp_path / "huge.patched.gguf"
    size = dialect_file(source, extra=[big_u8(40_000_000), one_byte_strings(2_500_000)])
    r = subprocess.run([sys.executable, "-c", MEASURE, str(source), str(target)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    grown, seconds, written, changed = r.stdout.split()
    assert written == "True" and changed == "True"
    assert int(grown) < 40e6, f"peak RSS grew by {int(grown) / 1e6:.0f} MB for a {size / 1e6:.0f} MB header"
    old, new = read_header(source), read_header(target)
    for key in ("clover_test.big_u8", "clover_test.strings"):
        assert old.kvs[key].span is not None and new.kvs[key].span is not None  # read as byte ranges
        assert new.kvs[key].raw == old.kvs[key].raw
    assert new.get("glm4moe.rope.dimension_count") == 64 and "glm4moe.rope.partial_dimension_count" not in new.kvs
    with open(source, "rb") as a, open(target, "rb") as b:
        a.seek(old.data_offset)
        b.seek(new.data_offset)
        assert a.read() == b.read() == bytes(range(128))


def test_a_reflink_header_keeps_large_values_as_ranges(tmp_path):
    """The reflink export pads the new header to the source's block offset; a large value in it stays a
    byte range of the source, copied when the header is written."""
    from app.model.patch import apply_rules, header_for_reflink, load_profile, write_pieces

    source = tmp_path / "big.gguf"
    dialect_file(source, extra=[big_u8(20_000_000)])
    header = read_header(source)
    kvs, _ = apply_rules(header, load_profile("clover"))
    pieces = header_for_reflink(header, kvs, 4096)
    assert any(isinstance(p, gguf_file.FileSpan) for p in pieces)
    target = tmp_path / "copy.gguf"
    with open(target, "wb") as f:
        length = write_pieces(f.fileno(), pieces)
        f.seek(length)
        f.write(bytes(range(128)))
    copy = read_header(target)
    assert (copy.data_offset - header.data_offset) % 4096 == 0 and copy.tensors == header.tensors
    assert copy.kvs["clover_test.big_u8"].raw == header.kvs["clover_test.big_u8"].raw


def with_large_array(source: Path, target: Path, key: str, etype: ValueType, count: int, element: bytes) -> int:
    """`source` with one more KV after its own: an array of `count` copies of `element`, written a
    piece at a time (the test process never holds it); the new file's size."""
    header = read_header(source)
    data = source.read_bytes()
    last = list(header.kvs.values())[-1]
    kvs_end = last.offset + len(encode_string(last.key)) + 4 + last.size
    with open(target, "wb") as f:
        f.write(MAGIC + struct.pack("<IQQ", header.version, len(header.tensors), len(header.kvs) + 1))
        f.write(data[24:kvs_end])
        f.write(encode_string(key) + struct.pack("<IIQ", int(V.ARRAY), int(etype), count))
        piece = element * ((1 << 20) // len(element))
        left = count
        while left:
            n = min(left, len(piece) // len(element))
            f.write(piece[:n * len(element)])
            left -= n
        f.write(data[kvs_end:header.header_end])
        f.write(b"\0" * (-f.tell() % header.alignment))
        f.write(data[header.data_offset:])
        return f.tell()


# The peak RSS of `python -m app plan` alone: a process of its own whose only child it is
PEAK_OF_PLAN = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
sys.stderr.write(r.stderr)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux only")
@pytest.mark.parametrize("what, etype, count, element", [
    ("100M-element u8 array", V.UINT8, 100_000_000, b"\x07"),
    ("6M one-byte strings", V.STRING, 6_000_000, struct.pack("<Q", 1) + b"s"),
])
def test_plan_does_not_hold_large_header_arrays(tmp_path, what, etype, count, element):
    """Issue 41: a legal vendor-dialect header with a huge array the plan does not use. llama.cpp's
    no-alloc load, which the plan asks whether the file needs a key, held the whole header in memory
    (736 MB for the u8 array, 442 MB for the strings); it is now asked about a sparse copy whose
    header leaves such values out, and answers the same."""
    from app.model.patch_probe import llama_requires_key

    base = write_glm4_moe(tmp_path / "base.gguf", dialect="vendor")
    path = tmp_path / "large.gguf"
    size = with_large_array(base, path, "clover_test.large", etype, count, element)
    assert size > 50e6 and read_header(path).kvs["clover_test.large"].span is not None
    r = subprocess.run([sys.executable, "-c", PEAK_OF_PLAN, *app_command("plan", path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    code, peak = map(int, r.stdout.split())
    assert code == 0, r.stderr
    assert peak < 300e6, f"{what}: the plan's peak RSS was {peak / 1e6:.0f} MB"
    for key in ("glm4moe.expert_shared_count", "glm4moe.no_such_key"):  # the answers of the file without it
        assert llama_requires_key(path)(key) == llama_requires_key(base)(key)
    assert llama_requires_key(path)("glm4moe.expert_shared_count") is True
