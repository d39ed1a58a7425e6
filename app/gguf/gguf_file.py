"""GGUF header reading and writing, fast and defensive. No Qt.

A GGUF file is: magic "GGUF", version (u32), tensor count (u64), KV count (u64), the KV pairs,
the tensor infos (name, dims, ggml type, offset relative to the data section), padding to
`general.alignment` (default 32), then the data section. This module reads and writes everything
before the data section; the data is left on disk and copied by the kernel (see `app.model.patch`).

Design points:
- Every count, length and offset is checked against the bytes that remain before anything is
  allocated, so a malformed or hostile file gives a `GGUFError` that names the field and the byte
  offset, never a crash or unbounded memory use.
- A file is read through a window (8 MiB) that moves over the header as it is parsed, so each byte
  is read and walked once whatever the header's size; only a regular file is opened (a FIFO or a
  directory is refused before the open, which a FIFO would block).
- Each KV keeps its value's original bytes (`KV.raw`); values are decoded only when asked for,
  and numeric arrays are decoded with numpy in one call. A 250K-entry string array (a tokenizer)
  is walked once to find its end, then decoded only if someone reads it. A value larger than
  LARGE_VALUE (16 MiB) read from a file is not kept at all: `KV.span` says where it lies in the
  file, its bytes are read only if asked for, and a writer copies it from there
  (`header_pieces`), so memory does not grow with a huge (legal) array.
- Writing re-emits untouched KVs byte for byte, so a header round-trips exactly.
- Little-endian GGUF v2 and v3 only; a big-endian file is recognised and refused clearly.
"""

from __future__ import annotations

import array
import bisect
import functools
import os
import stat
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_NAME = 64  # GGML_MAX_NAME: tensor names must be shorter
MAX_ARRAY_NESTING = 8
MAX_KEY = (1 << 16) - 1  # the GGUF spec's limit on a key's length
LARGE_VALUE = 16 << 20  # a value larger than this, read from a file, stays there as a byte range (FileSpan)


class GGUFError(ValueError):
    """The file is not a GGUF file this program can read; says which field, at which byte offset."""

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None) -> None:
        where = []
        if field:
            where.append(f"field {field}")
        if offset is not None:
            where.append(f"byte offset {offset}")
        super().__init__(f"{message}" + (f" ({', '.join(where)})" if where else ""))
        self.field = field
        self.offset = offset


class ValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_SCALAR: dict[int, str] = {
    ValueType.UINT8: "<B", ValueType.INT8: "<b", ValueType.UINT16: "<H", ValueType.INT16: "<h",
    ValueType.UINT32: "<I", ValueType.INT32: "<i", ValueType.FLOAT32: "<f", ValueType.BOOL: "<?",
    ValueType.UINT64: "<Q", ValueType.INT64: "<q", ValueType.FLOAT64: "<d",
}
_NUMPY = {
    ValueType.UINT8: "<u1", ValueType.INT8: "<i1", ValueType.UINT16: "<u2", ValueType.INT16: "<i2",
    ValueType.UINT32: "<u4", ValueType.INT32: "<i4", ValueType.FLOAT32: "<f4", ValueType.BOOL: "<u1",
    ValueType.UINT64: "<u8", ValueType.INT64: "<i8", ValueType.FLOAT64: "<f8",
}

# ggml type id -> (name, block size in elements, bytes per block). From ggml.c's type traits.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}


@dataclass(frozen=True)
class FileStamp:
    """A file as it was when its header was read: a byte range of it is read later only if it is the
    same file, unchanged (same inode, size and modification time)."""

    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str, st: os.stat_result) -> FileStamp:
        return cls(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def open(self) -> BinaryIO:
        """The file, opened for reading, if it has not changed; else GGUFError."""
        f = open_regular(self.path)
        st = os.fstat(f.fileno())
        if FileStamp.of(self.path, st) != self:
            f.close()
            raise GGUFError(f"{self.path} changed after its header was read; read it again")
        return f


@dataclass(frozen=True)
class FileSpan:
    """A large header value left in its file (bytes [offset, offset+length)): a patch copies it from
    there, so memory does not grow with it; it is read only when something asks for its bytes."""

    file: FileStamp
    offset: int
    length: int

    def read(self) -> bytes:
        with self.file.open() as f:
            f.seek(self.offset)
            data = f.read(self.length)
        if len(data) != self.length:
            raise GGUFError(f"{self.file.path} ended before byte {self.offset + self.length}; read it again")
        return data


@dataclass
class KV:
    key: str
    type: ValueType
    data: bytes  # the value as stored (for arrays: element type + count + elements); b"" while `span` holds it
    array_type: ValueType | None = None
    count: int = 1  # elements, for arrays
    offset: int = 0  # where the KV pair starts in the file (0 for new ones)
    span: FileSpan | None = None  # a large value read from a file: where it lies there
    _value: Any = field(default=None, repr=False)
    _decoded: bool = field(default=False, repr=False)

    @property
    def raw(self) -> bytes:
        """The value's bytes as stored; a value left in its file is read from there on first use."""
        if self.span is not None and not self.data:
            self.data = self.span.read()
        return self.data

    @property
    def size(self) -> int:
        """Bytes of the value as stored, without reading a value left in its file."""
        return self.span.length if self.span is not None else len(self.data)

    @property
    def value(self) -> Any:
        """The decoded value: int/float/bool/str, or a list (numeric arrays: a numpy array)."""
        if not self._decoded:
            self._value, _ = _decode_value(memoryview(self.raw), 0, self.type, self.key, self.offset)
            self._decoded = True
        return self._value

    @classmethod
    def make(cls, key: str, vtype: ValueType, value: Any, array_type: ValueType | None = None) -> KV:
        raw = encode_value(vtype, value, array_type)
        count = len(value) if vtype == ValueType.ARRAY else 1
        return cls(key, vtype, raw, array_type, count)

    def same_value(self, other: KV) -> bool:
        if self is other or (self.span is not None and self.span == other.span):
            return True
        return self.type == other.type and self.size == other.size and self.raw == other.raw


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: ne0 first
    ggml_type: int
    offset: int  # relative to the start of the data section

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.ggml_type, (f"type{self.ggml_type}", 0, 0))[0]

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        _, block, size = GGML_TYPES[self.ggml_type]
        return self.n_elements // block * size


@dataclass
class GGUFHeader:
    version: int
    kvs: dict[str, KV]  # in file order
    tensors: list[TensorInfo]
    alignment: int
    data_offset: int  # absolute start of the data section in the file it was read from
    header_end: int  # where the tensor infos end (before padding)
    file_size: int

    @property
    def architecture(self) -> str | None:
        kv = self.kvs.get("general.architecture")
        return kv.value if kv is not None and kv.type == ValueType.STRING else None  # valid UTF-8: _parse checks

    @property
    def data_size(self) -> int:
        return self.file_size - self.data_offset

    def get(self, key: str, default: Any = None) -> Any:
        kv = self.kvs.get(key)
        return default if kv is None else kv.value


# ----------------------------------------------------------------------------- reading


class _NeedMore(Exception):
    """The buffer ended before the header did; the caller reads more of the file and retries."""


Fill = Callable[[int, int], bytes]  # (file offset, byte count) -> those bytes of the file


class _Reader:
    """Reads a header from `buf`, the file's bytes from `base` on. With `fill`, the window moves
    and grows over the file as the header is read (each byte is walked once); without it, `buf` is
    all there is and running past it raises _NeedMore. `keep` is where the value being read starts:
    its bytes stay in the window. With `spans` (a file on disk), a value that grows past LARGE_VALUE
    is not kept: it is skipped and left in the file as a byte range (`spanned`)."""

    def __init__(self, buf: bytes, file_size: int, fill: Fill | None = None, spans: bool = False) -> None:
        self.buf = buf
        self.base = 0
        self.pos = 0
        self.file_size = file_size
        self.fill = fill
        self.spans = spans and fill is not None
        self.window = max(len(buf), 1 << 16)
        self.keep: int | None = None
        self.spanned = False

    @property
    def end(self) -> int:
        """The file offset where the window ends."""
        return self.base + len(self.buf)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.file_size:
            raise GGUFError(f"{what} needs {n} bytes but only {self.file_size - self.pos} remain in the file",
                            field=what, offset=self.pos)
        if self.pos + n > self.end:
            self._more(self.pos + n)

    def _more(self, end: int) -> None:
        """Move the window so that it holds what is kept up to `end` (at least a window's worth)."""
        if self.fill is None:
            raise _NeedMore()
        if self.keep is not None and self.spans and end - self.keep > LARGE_VALUE:
            self.keep, self.spanned = None, True  # too large to hold: the value stays in the file
        start = self.pos if self.keep is None else min(self.keep, self.pos)
        size = end - start
        if self.keep is not None:  # a kept value that keeps growing: its window doubles, up to LARGE_VALUE
            size = max(size, min(2 * size, LARGE_VALUE + (1 << 16)) if self.spans else 2 * size)
        size = min(max(size, self.window), self.file_size - start)
        self.buf = b""  # the new window holds all that is kept: the old one goes first
        data = self.fill(start, size)
        if len(data) != size:
            raise GGUFError(f"could not read {size} bytes at {start} (got {len(data)}); the file changed while "
                            "reading?", offset=start)
        self.buf, self.base = data, start

    def skip(self, n: int, what: str) -> None:
        """Move past `n` bytes, read only when the value is kept in memory."""
        if self.spans and n >= LARGE_VALUE:
            if n > self.file_size - self.pos:
                raise GGUFError(f"{what} needs {n} bytes but only {self.file_size - self.pos} remain in the file",
                                field=what, offset=self.pos)
            self.keep, self.spanned = None, True
        else:
            self.need(n, what)
        self.pos += n

    def take(self, start: int, stop: int) -> bytes:
        """The file's bytes [start, stop), which the window holds."""
        return bytes(memoryview(self.buf)[start - self.base:stop - self.base])

    def head(self, n: int) -> bytes:
        """Up to `n` bytes from pos (fewer at the end of the file or of a buffer without `fill`)."""
        n = min(n, self.file_size - self.pos)
        if self.pos + n > self.end and self.fill is not None:
            self._more(self.pos + n)
        return self.take(self.pos, min(self.pos + n, self.end))

    def sha256(self, start: int, length: int) -> bytes | None:
        """SHA-256 of the file's bytes [start, start+length); None when they cannot be had."""
        import hashlib

        digest = hashlib.sha256()
        if start >= self.base and start + length <= self.end:
            digest.update(memoryview(self.buf)[start - self.base:start + length - self.base])
            return digest.digest()
        if self.fill is None or start + length > self.file_size:
            return None
        at = start
        while at < start + length:  # in pieces: a large value is never held whole
            n = min(self.window, start + length - at)
            data = self.fill(at, n)
            if len(data) != n:
                return None
            digest.update(data)
            at += n
        return digest.digest()

    def unpack(self, fmt: str, size: int, what: str) -> Any:
        self.need(size, what)
        value = struct.unpack_from(fmt, self.buf, self.pos - self.base)[0]
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        return self.unpack("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", 8, what)

    def string(self, what: str, limit: int | None = None) -> str:
        start = self.pos
        n = self.u64(f"{what} length")
        if n > self.file_size - self.pos:
            self.need(n, what)  # raises: past the end of the file
        if limit is not None and n > limit:
            raise GGUFError(f"{what} is {n} bytes long; the limit is {limit}", field=what, offset=start)
        self.need(n, what)
        try:
            text = str(memoryview(self.buf)[self.pos - self.base:self.pos - self.base + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(f"{what} is not valid UTF-8: {exc}", field=what, offset=start) from None
        self.pos += n
        return text

    def skip_value(self, vtype: int, what: str, depth: int = 0) -> tuple[int | None, int]:
        """Move past one value; return (array element type, count) for arrays."""
        if vtype in _SCALAR:
            self.skip(struct.calcsize(_SCALAR[vtype]), what)
            return None, 1
        if vtype == ValueType.STRING:
            n = self.u64(f"{what} length")
            self.skip(n, what)
            return None, 1
        if vtype == ValueType.ARRAY:
            if depth >= MAX_ARRAY_NESTING:
                raise GGUFError(f"{what}: arrays nested deeper than {MAX_ARRAY_NESTING}", field=what, offset=self.pos)
            at_type = self.pos
            etype = self.u32(f"{what} element type")
            if etype not in ValueType._value2member_map_:
                raise GGUFError(f"{what}: unknown array element type {etype}", field=what, offset=at_type)
            at_count = self.pos
            count = self.u64(f"{what} count")
            if etype in _SCALAR:
                size = struct.calcsize(_SCALAR[etype])
                if count > (self.file_size - self.pos) // size:
                    raise GGUFError(f"{what}: array of {count} elements cannot fit in the "
                                    f"{self.file_size - self.pos} bytes left", field=what, offset=at_count)
                self.skip(count * size, what)
            elif etype == ValueType.STRING:
                if count > (self.file_size - self.pos) // 8:  # each string needs at least its length
                    raise GGUFError(f"{what}: array of {count} strings cannot fit in the "
                                    f"{self.file_size - self.pos} bytes left", field=what, offset=at_count)
                self.pos = _walk_strings(self, count, what)
            else:  # nested arrays
                if count > (self.file_size - self.pos) // 12:
                    raise GGUFError(f"{what}: array of {count} arrays cannot fit", field=what, offset=at_count)
                for i in range(count):
                    self.skip_value(etype, f"{what}[{i}]", depth + 1)
            return ValueType(etype), count
        raise GGUFError(f"{what}: unknown value type {vtype}", field=what, offset=self.pos)


_U64 = struct.Struct("<Q")


# Large string arrays walked before: (count, their first 64 bytes) -> (their length, SHA-256 of them).
# A patch reads the same 250K-token vocabulary twice (the source, then the written file to verify it);
# the second time, hashing the same bytes (2 ms) stands in for walking them (25 ms): a walk's end is a
# function of the bytes walked and the count alone.
_WALKED: dict[tuple[int, bytes], tuple[int, bytes]] = {}
_WALKED_LOCK = threading.Lock()  # headers are read on several threads (the Hub view plans 6 at a time)
_WALK_MEMO_MIN = 4096  # strings: smaller arrays are walked faster than hashed


def _walk_strings(r: _Reader, count: int, what: str) -> int:
    """Position after `count` length-prefixed strings starting at r.pos, checked against the file.

    The hot loop (250K-entry tokenizers) does one unpack per string and no checks; where it runs off
    the window, the window moves on (or, without a file to read, _NeedMore) and the walk resumes at
    the string it stopped at, so every string is walked once; a length that runs past the file is
    found by a careful walk of that window alone. The same large array met again (same count, same
    bytes) is not walked again (`_WALKED`).
    """
    start = r.pos
    key = (count, r.head(64)) if count >= _WALK_MEMO_MIN else None
    with _WALKED_LOCK:
        known = _WALKED.get(key) if key is not None else None
    if known is not None:
        length, digest = known
        if start + length <= r.file_size and r.sha256(start, length) == digest:
            r.skip(length, what)  # kept in the window, or left in the file when large
            return r.pos
    unpack = _U64.unpack_from
    pos, i = start, 0
    while True:
        buf, base = r.buf, r.base
        first, off = i, pos - base
        first_off = off
        done = i
        try:
            for done in range(i, count):  # noqa: B007 (read after the loop: where a walk off the window stopped)
                off += 8 + unpack(buf, off)[0]
            done = count
        except (struct.error, OverflowError):
            pass  # string `done` starts at `off`, and its length is past the window
        pos = base + off
        if pos > r.file_size or (done < count and pos + 8 > r.file_size):
            _string_past_the_end(r, first, base + first_off, count, what)
        if done == count:
            break
        r.pos, i, buf = pos, done, b""
        r.need(8, f"{what}[{done}] length")  # the window moves on (the old one is dropped first)
    if key is not None:
        walked = r.sha256(start, pos - start)
        if walked is not None:
            with _WALKED_LOCK:
                if len(_WALKED) >= 8:  # the oldest goes
                    _WALKED.pop(next(iter(_WALKED)))
                _WALKED[key] = (pos - start, walked)
    r.pos = start
    r.skip(pos - start, what)  # the strings' bytes: in the window, or left in the file when large
    return r.pos
def _string_past_the_end(r: _Reader, index: int, pos: int, count: int, what: str) -> NoReturn:
    """Raise the error for the string from `index` (at `pos`) on that runs past the end of the file:
    a careful walk of what the fast walk found wrong."""
    for j in range(index, count):
        r.pos = pos
        r.need(8, f"{what}[{j}] length")
        n = _U64.unpack_from(r.buf, pos - r.base)[0]
        if n > r.file_size - pos - 8:
            raise GGUFError(f"{what}[{j}]: string of {n} bytes runs past the end of the file", field=what, offset=pos)
        pos += 8 + n
    raise GGUFError(f"{what}: the strings run past the end of the file", field=what, offset=pos)


@functools.lru_cache(maxsize=4)
def _string_starts(raw: bytes, count: int) -> array.array:
    """Where each element of a string array's raw bytes starts: one walk, then every lookup by index or
    by position is a bisection (a patch asks a 250K-token vocabulary several questions)."""
    starts = array.array("Q")
    append, unpack = starts.append, _U64.unpack_from
    pos = 12  # after element type (u32) and count (u64)
    for _ in range(count):
        append(pos)
        pos += 8 + unpack(raw, pos)[0]
    return starts


def find_string(kv: KV, text: str) -> int | None:
    """Index of `text` in a string-array KV, without decoding the array (a 250K tokenizer: milliseconds)."""
    if kv.type != ValueType.ARRAY or kv.array_type != ValueType.STRING:
        raise TypeError(f"{kv.key} is not an array of strings")
    raw = kv.raw
    needle = _U64.pack(len(text.encode("utf-8"))) + text.encode("utf-8")
    starts = _string_starts(raw, kv.count)
    hit = raw.find(needle, 12)
    while hit != -1:
        index = bisect.bisect_left(starts, hit)
        if index < len(starts) and starts[index] == hit:
            return index
        hit = raw.find(needle, hit + 1)  # the match was inside another string: look further
    return None


def _decode_value(mv: memoryview, pos: int, vtype: int, what: str, base: int) -> tuple[Any, int]:
    if vtype in _SCALAR:
        fmt = _SCALAR[vtype]
        return struct.unpack_from(fmt, mv, pos)[0], pos + struct.calcsize(fmt)
    if vtype == ValueType.STRING:
        n = struct.unpack_from("<Q", mv, pos)[0]
        return str(mv[pos + 8:pos + 8 + n], "utf-8", "replace"), pos + 8 + n
    if vtype == ValueType.ARRAY:
        etype, count = struct.unpack_from("<IQ", mv, pos)
        pos += 12
        if etype in _NUMPY:
            import numpy as np  # only numeric arrays need it; keeps `python -m app patch` start-up light

            size = np.dtype(_NUMPY[etype]).itemsize
            arr = np.frombuffer(mv, dtype=_NUMPY[etype], count=count, offset=pos).copy()
            if etype == ValueType.BOOL:
                arr = arr.astype(bool)
            return arr, pos + count * size
        items = []
        for _ in range(count):
            item, pos = _decode_value(mv, pos, etype, what, base)
            items.append(item)
        return items, pos
    raise GGUFError(f"{what}: unknown value type {vtype}", field=what, offset=base + pos)


def _parse(buf: bytes, file_size: int, fill: Fill | None = None, source: FileStamp | None = None) -> GGUFHeader:
    r = _Reader(buf, file_size, fill, spans=source is not None)
    del buf  # the reader's window, which moves on: no other reference keeps the first one alive
    r.need(4, "magic")
    magic = r.take(0, 4)
    if magic != MAGIC:
        if magic == b"FUGG":
            raise GGUFError("this GGUF file is big-endian; only little-endian files are supported",
                            field="magic", offset=0)
        raise GGUFError(f"not a GGUF file (starts with {magic!r}, expected b'GGUF')", field="magic", offset=0)
    r.pos = 4
    version = r.u32("version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
            raise GGUFError("this GGUF file is big-endian; only little-endian files are supported",
                            field="version", offset=4)
        if version == 1:
            raise GGUFError("GGUF version 1 is obsolete; convert the model again with a current llama.cpp",
                            field="version", offset=4)
        raise GGUFError(f"unsupported GGUF version {version} (supported: 2 and 3)", field="version", offset=4)
    n_tensors = r.u64("tensor count")
    n_kv = r.u64("KV count")
    # Every KV needs >= 8 (key length) + 4 (type) + 1 bytes, every tensor info >= 8 + 4 + 4 + 8.
    if n_kv > (file_size - r.pos) // 13:
        raise GGUFError(f"KV count {n_kv} cannot fit in a file of {file_size} bytes", field="KV count", offset=16)
    if n_tensors > (file_size - r.pos) // 24:
        raise GGUFError(f"tensor count {n_tensors} cannot fit in a file of {file_size} bytes",
                        field="tensor count", offset=8)

    kvs: dict[str, KV] = {}
    for i in range(n_kv):
        start = r.pos
        key = r.string(f"KV[{i}] key", MAX_KEY)
        if not key:
            raise GGUFError(f"KV[{i}] has an empty key", field=f"KV[{i}] key", offset=start)
        if key in kvs:
            raise GGUFError(f"duplicate key {key!r}", field=f"KV[{i}] key", offset=start)
        type_at = r.pos
        vtype = r.u32(f"{key} type")
        if vtype not in ValueType._value2member_map_:
            raise GGUFError(f"key {key!r} has unknown value type {vtype}", field=f"{key} type", offset=type_at)
        value_at = r.pos
        r.keep, r.spanned = value_at, False
        array_type, count = r.skip_value(vtype, key)
        etype = None if array_type is None else ValueType(array_type)
        if r.spanned and source is not None:  # large: left in the file, copied from there when written
            kvs[key] = KV(key, ValueType(vtype), b"", etype, count, start,
                          span=FileSpan(source, value_at, r.pos - value_at))
        else:
            kvs[key] = KV(key, ValueType(vtype), r.take(value_at, r.pos), etype, count, start)
        r.keep = None
    _check_architecture(kvs)

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in kvs:
        kv = kvs["general.alignment"]
        if kv.type != ValueType.UINT32:
            raise GGUFError(f"general.alignment must be uint32, not {kv.type.name}", field="general.alignment",
                            offset=kv.offset)
        alignment = kv.value
        if alignment == 0 or alignment & (alignment - 1):
            raise GGUFError(f"general.alignment {alignment} is not a power of two", field="general.alignment",
                            offset=kv.offset)

    infos: list[tuple[str, tuple[int, ...], int, int, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        start = r.pos
        name = r.string(f"tensor[{i}] name", 1 << 16)
        if len(name.encode()) >= MAX_NAME:
            raise GGUFError(f"tensor name {name[:80]!r} is {len(name.encode())} bytes; the limit is {MAX_NAME - 1}",
                            field=f"tensor[{i}] name", offset=start)
        if name in names:
            raise GGUFError(f"duplicate tensor {name!r}", field=f"tensor[{i}] name", offset=start)
        names.add(name)
        dims_at = r.pos
        n_dims = r.u32(f"{name} n_dims")
        if n_dims > MAX_DIMS:
            raise GGUFError(f"tensor {name!r} has {n_dims} dimensions; at most {MAX_DIMS}", field=f"{name} n_dims",
                            offset=dims_at)
        r.need(8 * n_dims, f"{name} dims")
        shape = struct.unpack_from(f"<{n_dims}q", r.buf, r.pos - r.base)
        r.pos += 8 * n_dims
        if any(d < 0 for d in shape):
            raise GGUFError(f"tensor {name!r} has a negative dimension {shape}", field=f"{name} dims", offset=dims_at)
        n = 1
        for d in shape:
            n *= d
        if n >= 2**63:
            raise GGUFError(f"tensor {name!r} has {n} elements, more than fit in int64", field=f"{name} dims",
                            offset=dims_at)
        type_at = r.pos
        ggml_type = r.u32(f"{name} type")
        if ggml_type not in GGML_TYPES:
            raise GGUFError(f"tensor {name!r} has unknown ggml type {ggml_type}", field=f"{name} type", offset=type_at)
        block = GGML_TYPES[ggml_type][1]
        if shape and shape[0] % block:
            raise GGUFError(f"tensor {name!r}: row of {shape[0]} elements is not a multiple of the "
                            f"{GGML_TYPES[ggml_type][0]} block size {block}", field=f"{name} dims", offset=dims_at)
        offset_at = r.pos
        offset = r.u64(f"{name} offset")
        infos.append((name, tuple(shape), ggml_type, offset, offset_at))

    header_end = r.pos
    data_offset = -(-header_end // alignment) * alignment if n_tensors else header_end
    if data_offset > file_size:
        raise GGUFError(f"the data section would start at {data_offset}, past the end of the file ({file_size})",
                        field="data section", offset=header_end)
    data_size = file_size - data_offset
    tensors = []
    end_of_previous = 0
    for name, shape, ggml_type, offset, offset_at in infos:
        info = TensorInfo(name, shape, ggml_type, offset)
        if offset % alignment:
            raise GGUFError(f"tensor {name!r} offset {offset} is not a multiple of the alignment {alignment}",
                            field=f"{name} offset", offset=offset_at)
        if offset > data_size or info.n_bytes > data_size - offset:
            raise GGUFError(f"tensor {name!r} ({info.n_bytes} bytes at data offset {offset}) runs past the end of "
                            f"the file: the data section holds {data_size} bytes (truncated file?)",
                            field=f"{name} offset", offset=offset_at)
        if offset < end_of_previous:
            raise GGUFError(f"tensor {name!r} at data offset {offset} overlaps the tensor before it",
                            field=f"{name} offset", offset=offset_at)
        end_of_previous = offset + info.n_bytes
        tensors.append(info)
    return GGUFHeader(version, kvs, tensors, alignment, data_offset, header_end, file_size)


def parse_header(data: bytes, file_size: int | None = None) -> GGUFHeader:
    """Parse a header from bytes: a whole file, or its first bytes with the full `file_size` given.

    Raises `GGUFError` for a malformed header, or when `data` ends before the header does (then
    `GGUFError.field` is "incomplete" and more bytes are needed).
    """
    size = len(data) if file_size is None else file_size
    try:
        return _parse(data, size)
    except _NeedMore:
        raise GGUFError(f"the first {len(data)} bytes do not hold the whole header", field="incomplete") from None


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(path: str | Path, mode: int) -> GGUFError:
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
    return GGUFError(f"{path} is not a regular file (it is {kind}); give the path of a .gguf model file")


def open_regular(path: str | Path) -> BinaryIO:
    """`path` opened for reading, if it is a regular file; a directory, FIFO, socket or device is
    refused with a GGUFError that says which, before it is opened (a FIFO would block the open, and
    then every read, until some other program wrote to it). The open itself does not block either
    (O_NONBLOCK), in case the path is swapped for a FIFO between the check and the open."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_header(source: str | Path | BinaryIO, first_read: int = 8 << 20) -> GGUFHeader:
    """Read the header of a GGUF file, reading only as much of the file as the header needs: a window
    of `first_read` bytes that moves over the header as it is parsed. From a path, a value larger than
    LARGE_VALUE is not kept in memory but left in the file (`KV.span`), so memory does not grow with a
    huge array; a path that is not a regular file is refused (`open_regular`)."""
    if isinstance(source, (str, Path)):
        with open_regular(source) as opened:
            return _read_opened(opened, first_read, FileStamp.of(str(source), os.fstat(opened.fileno())))
    return _read_opened(source, first_read, None)


def _read_opened(f: BinaryIO, first_read: int, stamp: FileStamp | None) -> GGUFHeader:
    f.seek(0, 2)
    file_size = f.tell()

    def fill(offset: int, n: int) -> bytes:
        f.seek(offset)
        return f.read(n)

    try:
        return _parse(fill(0, min(first_read, file_size)), file_size, fill, stamp)
    except _NeedMore:  # cannot happen: with `fill`, the window moves instead
        raise GGUFError("the header ends past the end of the file", field="header") from None


def _check_architecture(kvs: dict[str, KV]) -> None:
    """The architecture names the model's keys (`ARCH.block_count`) and is shown to people: bytes that
    are not UTF-8 are refused here, said in words, instead of turning into a key no file has."""
    kv = kvs.get("general.architecture")
    if kv is None or kv.type != ValueType.STRING:
        return
    raw = kv.raw[8:]
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        shown = repr(raw[:60]) + ("..." if len(raw) > 60 else "")
        raise GGUFError(f"the header's architecture name (general.architecture) is not valid UTF-8: {shown}",
                        field="general.architecture", offset=kv.offset) from None


# ----------------------------------------------------------------------------- writing


def _encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def encode_value(vtype: ValueType, value: Any, array_type: ValueType | None = None) -> bytes:
    if vtype in _SCALAR:
        return struct.pack(_SCALAR[vtype], value)
    if vtype == ValueType.STRING:
        return _encode_string(value)
    if vtype == ValueType.ARRAY:
        if array_type is None:
            raise ValueError("an array needs its element type")
        head = struct.pack("<IQ", int(array_type), len(value))
        if array_type in _NUMPY:
            import numpy as np

            return head + np.asarray(value, dtype=_NUMPY[array_type]).tobytes()
        return head + b"".join(encode_value(array_type, v) for v in value)
    raise ValueError(f"unknown value type {vtype}")


def header_pieces(version: int, kvs: Iterable[KV], tensors: list[TensorInfo],
                  alignment: int) -> list[bytes | FileSpan]:
    """The header as pieces to write in order: bytes, and the large values left in their files
    (copied from there, never held in memory), with the padding up to the data section."""
    kvs = list(kvs)
    pieces: list[bytes | FileSpan] = []
    small = [MAGIC, struct.pack("<IQQ", version, len(tensors), len(kvs))]
    for kv in kvs:
        small.append(_encode_string(kv.key))
        small.append(struct.pack("<I", int(kv.type)))
        if kv.span is not None and not kv.data:  # not read into memory: copied from its file
            pieces.append(b"".join(small))
            pieces.append(kv.span)
            small = []
        else:
            small.append(kv.data)
    for t in tensors:
        small.append(_encode_string(t.name))
        small.append(struct.pack(f"<I{len(t.shape)}q", len(t.shape), *t.shape))
        small.append(struct.pack("<IQ", t.ggml_type, t.offset))
    pieces.append(b"".join(small))
    if tensors:
        pieces.append(b"\0" * (-pieces_length(pieces) % alignment))
    return [p for p in pieces if not isinstance(p, bytes) or p]


def pieces_length(pieces: Iterable[bytes | FileSpan]) -> int:
    return sum(p.length if isinstance(p, FileSpan) else len(p) for p in pieces)


def encode_header(version: int, kvs: Iterable[KV], tensors: list[TensorInfo], alignment: int) -> bytes:
    """Header bytes including the padding up to the start of the data section (values left in their
    files are read; `header_pieces` copies them instead)."""
    return b"".join(p.read() if isinstance(p, FileSpan) else p
                    for p in header_pieces(version, kvs, tensors, alignment))


def string_at(kv: KV, index: int) -> str | None:
    """Element `index` of a string-array KV, decoding only what lies before it; None if out of range."""
    if kv.type != ValueType.ARRAY or kv.array_type != ValueType.STRING:
        raise TypeError(f"{kv.key} is not an array of strings")
    if not 0 <= index < kv.count:
        return None
    raw = kv.raw
    pos = _string_starts(raw, kv.count)[index]
    n = _U64.unpack_from(raw, pos)[0]
    return raw[pos + 8:pos + 8 + n].decode("utf-8", "replace")
