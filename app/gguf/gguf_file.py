"""GGUF header reading and writing, fast and defensive. No Qt.

A GGUF file is: magic "GGUF", version (u32), tensor count (u64), KV count (u64), the KV pairs,
the tensor infos (name, dims, ggml type, offset relative to the data section), padding to
`general.alignment` (default 32), then the data section. This module reads and writes everything
before the data section; the data is left on disk and copied by the kernel (see `app.model.patch`).

Design points:
- Every count, length and offset is checked against the bytes that remain before anything is
  allocated, so a malformed or hostile file gives a `GGUFError` that names the field and the byte
  offset, never a crash or unbounded memory use.
- Each KV keeps its value's original bytes (`KV.raw`); values are decoded only when asked for,
  and numeric arrays are decoded with numpy in one call. A 250K-entry string array (a tokenizer)
  is walked once to find its end, then decoded only if someone reads it.
- Writing re-emits untouched KVs byte for byte, so a header round-trips exactly.
- Little-endian GGUF v2 and v3 only; a big-endian file is recognised and refused clearly.
"""

from __future__ import annotations

import array
import bisect
import functools
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_NAME = 64  # GGML_MAX_NAME: tensor names must be shorter
MAX_ARRAY_NESTING = 8


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


@dataclass
class KV:
    key: str
    type: ValueType
    raw: bytes  # the value as stored: for arrays, element type + count + elements
    array_type: ValueType | None = None
    count: int = 1  # elements, for arrays
    offset: int = 0  # where the KV pair starts in the file (0 for new ones)
    _value: Any = field(default=None, repr=False)
    _decoded: bool = field(default=False, repr=False)

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
        return self.type == other.type and self.raw == other.raw


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
        return kv.value if kv is not None and kv.type == ValueType.STRING else None

    @property
    def data_size(self) -> int:
        return self.file_size - self.data_offset

    def get(self, key: str, default: Any = None) -> Any:
        kv = self.kvs.get(key)
        return default if kv is None else kv.value


# ----------------------------------------------------------------------------- reading


class _NeedMore(Exception):
    """The buffer ended before the header did; the caller reads more of the file and retries."""


class _Reader:
    def __init__(self, buf: bytes, file_size: int) -> None:
        self.buf = buf
        self.mv = memoryview(buf)
        self.pos = 0
        self.file_size = file_size

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.file_size:
            raise GGUFError(f"{what} needs {n} bytes but only {self.file_size - self.pos} remain in the file",
                            field=what, offset=self.pos)
        if self.pos + n > len(self.buf):
            raise _NeedMore()

    def unpack(self, fmt: str, size: int, what: str) -> Any:
        self.need(size, what)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        return self.unpack("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", 8, what)

    def string(self, what: str) -> str:
        start = self.pos
        n = self.u64(f"{what} length")
        self.need(n, what)
        try:
            text = str(self.mv[self.pos:self.pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(f"{what} is not valid UTF-8: {exc}", field=what, offset=start) from None
        self.pos += n
        return text

    def skip_value(self, vtype: int, what: str, depth: int = 0) -> tuple[int | None, int]:
        """Move past one value; return (array element type, count) for arrays."""
        if vtype in _SCALAR:
            self.need(struct.calcsize(_SCALAR[vtype]), what)
            self.pos += struct.calcsize(_SCALAR[vtype])
            return None, 1
        if vtype == ValueType.STRING:
            n = self.u64(f"{what} length")
            self.need(n, what)
            self.pos += n
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
                self.need(count * size, what)
                self.pos += count * size
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

    The hot loop (250K-entry tokenizers) does one unpack per string and no checks; if it runs off
    the buffer or the file, a careful second walk finds out which string and why. The same large
    array met again (same count, same bytes) is not walked again (`_WALKED`).
    """
    import hashlib

    buf, pos = r.buf, r.pos
    key = (count, bytes(buf[pos:pos + 64])) if count >= _WALK_MEMO_MIN else None
    with _WALKED_LOCK:
        known = _WALKED.get(key) if key is not None else None
    if known is not None:
        length, digest = known
        end = pos + length
        if end <= len(buf) and end <= r.file_size and hashlib.sha256(buf[pos:end]).digest() == digest:
            return end
    unpack = _U64.unpack_from
    try:
        for _ in range(count):
            pos += 8 + unpack(buf, pos)[0]
    except (struct.error, OverflowError):
        pos = len(buf) + 1  # ran off the buffer: let the careful walk decide
    if pos <= len(buf) and pos <= r.file_size:
        if key is not None:
            walked = (pos - r.pos, hashlib.sha256(buf[r.pos:pos]).digest())
            with _WALKED_LOCK:
                if len(_WALKED) >= 8:  # the oldest goes
                    _WALKED.pop(next(iter(_WALKED)))
                _WALKED[key] = walked
        return pos
    pos, end = r.pos, r.file_size
    for i in range(count):
        if pos + 8 > end:
            r.pos = pos
            r.need(8, f"{what}[{i}] length")
        if pos + 8 > len(buf):
            raise _NeedMore()
        n = unpack(buf, pos)[0]
        pos += 8
        if n > end - pos:
            raise GGUFError(f"{what}[{i}]: string of {n} bytes runs past the end of the file",
                            field=what, offset=pos - 8)
        pos += n
        if pos > len(buf):
            raise _NeedMore()
    return pos


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


def _parse(buf: bytes, file_size: int) -> GGUFHeader:
    r = _Reader(buf, file_size)
    r.need(4, "magic")
    magic = bytes(r.mv[0:4])
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
        key = r.string(f"KV[{i}] key")
        if not key:
            raise GGUFError(f"KV[{i}] has an empty key", field=f"KV[{i}] key", offset=start)
        if key in kvs:
            raise GGUFError(f"duplicate key {key!r}", field=f"KV[{i}] key", offset=start)
        type_at = r.pos
        vtype = r.u32(f"{key} type")
        if vtype not in ValueType._value2member_map_:
            raise GGUFError(f"key {key!r} has unknown value type {vtype}", field=f"{key} type", offset=type_at)
        value_at = r.pos
        array_type, count = r.skip_value(vtype, key)
        kvs[key] = KV(key, ValueType(vtype), bytes(r.mv[value_at:r.pos]),
                      None if array_type is None else ValueType(array_type), count, start)

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
        name = r.string(f"tensor[{i}] name")
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
        shape = struct.unpack_from(f"<{n_dims}q", r.buf, r.pos)
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


def read_header(source: str | Path | BinaryIO, first_read: int = 8 << 20) -> GGUFHeader:
    """Read the header of a GGUF file, reading only as much of the file as the header needs."""
    if isinstance(source, (str, Path)):
        with open(source, "rb") as opened:
            return read_header(opened, first_read)
    f = source
    f.seek(0, 2)
    file_size = f.tell()
    amount = min(first_read, file_size)
    while True:
        f.seek(0)
        buf = f.read(amount)
        if len(buf) != amount:
            raise GGUFError(f"could not read {amount} bytes (got {len(buf)}); the file changed while reading?")
        try:
            return _parse(buf, file_size)
        except _NeedMore:
            if amount >= file_size:  # cannot happen: need() checks the file size first
                raise GGUFError("header ends past the end of the file", field="header", offset=amount) from None
            amount = min(file_size, amount * 4)


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


def encode_header(version: int, kvs: Iterable[KV], tensors: list[TensorInfo], alignment: int) -> bytes:
    """Header bytes including the padding up to the start of the data section."""
    kvs = list(kvs)
    parts = [MAGIC, struct.pack("<IQQ", version, len(tensors), len(kvs))]
    for kv in kvs:
        parts.append(_encode_string(kv.key))
        parts.append(struct.pack("<I", int(kv.type)))
        parts.append(kv.raw)
    for t in tensors:
        parts.append(_encode_string(t.name))
        parts.append(struct.pack(f"<I{len(t.shape)}q", len(t.shape), *t.shape))
        parts.append(struct.pack("<IQ", t.ggml_type, t.offset))
    head = b"".join(parts)
    if tensors:
        head += b"\0" * (-len(head) % alignment)
    return head


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
