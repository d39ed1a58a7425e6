"""Reading a GGUF header, fast and defensive. No Qt.

Every count, length and offset is checked against the bytes that remain before anything is
allocated, so a malformed or hostile file gives a `GGUFError` that names the field and the byte
offset. A file is read through a window that moves over the header as it is parsed (each byte read
and walked once); large string arrays are walked once and remembered (`_WALKED`); a value larger than
LARGE_VALUE read from a file is left there as a `FileSpan`. A field that runs past the end of the
file by a plausible amount means the file was cut short (`GGUFTruncated`: its size and the size the
header implies, or the least it would need), not that the field is wrong.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from app.gguf.gguf_types import (
    _SCALAR,
    _U64,
    DEFAULT_ALIGNMENT,
    GGML_TYPES,
    KV,
    LARGE_VALUE,
    MAGIC,
    MAX_ARRAY_NESTING,
    MAX_DIMS,
    MAX_KEY,
    MAX_NAME,
    PLAUSIBLE_FILE_SIZE,
    SUPPORTED_VERSIONS,
    FileSpan,
    FileStamp,
    GGUFError,
    GGUFHeader,
    GGUFTruncated,
    TensorInfo,
    ValueType,
    open_regular,
)


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

    def past_end(self, end: int, detail: str, what: str, offset: int | None = None) -> NoReturn:
        """Raise for a field (`what`, at `offset`) that needs the file to reach byte `end`, past its end:
        the file was cut short when `end` is a size a file may have, else the field is wrong (`detail`)."""
        at = self.pos if offset is None else offset
        if end <= PLAUSIBLE_FILE_SIZE:
            raise GGUFTruncated(self.file_size, end, exact=False, field=what, offset=at)
        raise GGUFError(detail, field=what, offset=at)

    def need(self, n: int, what: str) -> None:
        if n < 0:
            raise GGUFError(f"{what} has a negative length {n}", field=what, offset=self.pos)
        if self.pos + n > self.file_size:
            self.past_end(self.pos + n, f"{what} needs {n} bytes but only {self.file_size - self.pos} remain in "
                          "the file", what)
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
                self.past_end(self.pos + n, f"{what} needs {n} bytes but only {self.file_size - self.pos} remain "
                              "in the file", what)
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
                    self.past_end(self.pos + count * size, f"{what}: array of {count} elements cannot fit in the "
                                  f"{self.file_size - self.pos} bytes left", what, at_count)
                self.skip(count * size, what)
            elif etype == ValueType.STRING:
                if count > (self.file_size - self.pos) // 8:  # each string needs at least its length
                    self.past_end(self.pos + count * 8, f"{what}: array of {count} strings cannot fit in the "
                                  f"{self.file_size - self.pos} bytes left", what, at_count)
                self.pos = _walk_strings(self, count, what)
            else:  # nested arrays
                if count > (self.file_size - self.pos) // 12:  # each needs at least its type and count
                    self.past_end(self.pos + count * 12, f"{what}: array of {count} arrays cannot fit", what,
                                  at_count)
                for i in range(count):
                    self.skip_value(etype, f"{what}[{i}]", depth + 1)
            return ValueType(etype), count
        raise GGUFError(f"{what}: unknown value type {vtype}", field=what, offset=self.pos)


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
        rest = 8 * (count - j - 1)  # the strings after this one need at least their lengths
        if pos + 8 > r.file_size:
            r.past_end(pos + 8 + rest, f"{what}[{j}]: the strings run past the end of the file", what)
        r.need(8, f"{what}[{j}] length")
        n = _U64.unpack_from(r.buf, pos - r.base)[0]
        if n > r.file_size - pos - 8:
            r.past_end(pos + 8 + n + rest, f"{what}[{j}]: string of {n} bytes runs past the end of the file", what)
        pos += 8 + n
    r.pos = pos
    r.past_end(pos, f"{what}: the strings run past the end of the file", what)


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
    least = r.pos + 13 * n_kv + 24 * n_tensors
    if n_kv > (file_size - r.pos) // 13:
        r.past_end(least, f"KV count {n_kv} cannot fit in a file of {file_size} bytes", "KV count", 16)
    if n_tensors > (file_size - r.pos) // 24 or least > file_size:
        r.past_end(least, f"tensor count {n_tensors} cannot fit in a file of {file_size} bytes", "tensor count", 8)

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
    tensors = []
    end_of_previous = 0
    for name, shape, ggml_type, offset, offset_at in infos:
        info = TensorInfo(name, shape, ggml_type, offset)
        if offset % alignment:
            raise GGUFError(f"tensor {name!r} offset {offset} is not a multiple of the alignment {alignment}",
                            field=f"{name} offset", offset=offset_at)
        if offset < end_of_previous:
            raise GGUFError(f"tensor {name!r} at data offset {offset} overlaps the tensor before it",
                            field=f"{name} offset", offset=offset_at)
        end_of_previous = offset + info.n_bytes
        tensors.append(info)
    implied = data_offset + end_of_previous  # the whole header read: the size the file must have
    if implied > file_size:
        if implied <= PLAUSIBLE_FILE_SIZE:
            raise GGUFTruncated(file_size, implied, exact=True)
        _past_the_data(tensors, infos, data_offset, file_size, header_end)
    return GGUFHeader(version, kvs, tensors, alignment, data_offset, header_end, file_size)


def _past_the_data(tensors: list[TensorInfo], infos: list[tuple[str, tuple[int, ...], int, int, int]],
                   data_offset: int, file_size: int, header_end: int) -> NoReturn:
    """Raise for the tensor infos that place data beyond any plausible file (a corrupt header)."""
    if data_offset > file_size:
        raise GGUFError(f"the data section would start at {data_offset}, past the end of the file ({file_size})",
                        field="data section", offset=header_end)
    data_size = file_size - data_offset
    for info, (_, _, _, _, offset_at) in zip(tensors, infos, strict=True):
        if info.offset > data_size or info.n_bytes > data_size - info.offset:
            raise GGUFError(f"tensor {info.name!r} ({info.n_bytes} bytes at data offset {info.offset}) runs past the "
                            f"end of the file: the data section holds {data_size} bytes",
                            field=f"{info.name} offset", offset=offset_at)
    raise GGUFError("the tensors run past the end of the file", field="data section", offset=header_end)


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
