"""The GGUF data model: value types, KV pairs, tensor infos, headers, and the value codec. No Qt.

A KV keeps its value's bytes as stored and decodes them on first use (`decode_value`); a new one is
encoded once (`encode_value`). A large value read from a file may stay there (`FileSpan`, read only
through a `FileStamp` that checks the file is unchanged). String arrays (a 250K-token vocabulary)
are searched and indexed without decoding them (`find_string`, `string_at`). Reading a header is
`app.gguf.gguf_read`, writing one `app.gguf.gguf_write`; `app.gguf.gguf_file` re-exports all three.
"""

from __future__ import annotations

import array
import bisect
import functools
import os
import stat
import struct
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


# The largest file whose end a header may plausibly point at (4 TiB): a field that reaches past the end of
# the file but not past this is taken for a file cut short (an interrupted download or copy), one that
# reaches further for a corrupt or hostile value (an element count of 2**50).
PLAUSIBLE_FILE_SIZE = 1 << 42


class GGUFTruncated(GGUFError):
    """The file ends before what its header says it holds: it was cut short (an interrupted download or
    copy). `have` is the file's size; `needs` the size its header implies (`exact`), or, when the file
    ends inside its header, the least it would take to hold what was read so far."""

    def __init__(self, have: int, needs: int, *, exact: bool, field: str | None = None,
                 offset: int | None = None) -> None:
        size = f"{have:,} of {needs:,} bytes" if exact else f"{have:,} of at least {needs:,} bytes; it ends inside " \
                                                             "its header"
        ValueError.__init__(self, f"the file is cut short ({size}): download it again")
        self.field, self.offset = field, offset
        self.have, self.needs, self.exact = have, needs, exact


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
            self._value, _ = decode_value(memoryview(self.raw), 0, self.type, self.key, self.offset)
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


# ----------------------------------------------------------------------------- the value codec


def decode_value(mv: memoryview, pos: int, vtype: int, what: str, base: int) -> tuple[Any, int]:
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
            item, pos = decode_value(mv, pos, etype, what, base)
            items.append(item)
        return items, pos
    raise GGUFError(f"{what}: unknown value type {vtype}", field=what, offset=base + pos)


def encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def encode_value(vtype: ValueType, value: Any, array_type: ValueType | None = None) -> bytes:
    if vtype in _SCALAR:
        return struct.pack(_SCALAR[vtype], value)
    if vtype == ValueType.STRING:
        return encode_string(value)
    if vtype == ValueType.ARRAY:
        if array_type is None:
            raise ValueError("an array needs its element type")
        head = struct.pack("<IQ", int(array_type), len(value))
        if array_type in _NUMPY:
            import numpy as np

            return head + np.asarray(value, dtype=_NUMPY[array_type]).tobytes()
        return head + b"".join(encode_value(array_type, v) for v in value)
    raise ValueError(f"unknown value type {vtype}")


# ----------------------------------------------------------------------------- string arrays

_U64 = struct.Struct("<Q")


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


# ----------------------------------------------------------------------------- opening a file


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
