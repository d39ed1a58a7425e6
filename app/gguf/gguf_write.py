"""Writing a GGUF header: untouched KVs re-emitted byte for byte, so a header round-trips exactly;
a large value left in its file is a `FileSpan` piece, copied from there by the writer. No Qt."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from app.gguf.gguf_types import KV, MAGIC, FileSpan, TensorInfo, encode_string


def header_pieces(version: int, kvs: Iterable[KV], tensors: list[TensorInfo],
                  alignment: int) -> list[bytes | FileSpan]:
    """The header as pieces to write in order: bytes, and the large values left in their files
    (copied from there, never held in memory), with the padding up to the data section."""
    kvs = list(kvs)
    pieces: list[bytes | FileSpan] = []
    small = [MAGIC, struct.pack("<IQQ", version, len(tensors), len(kvs))]
    for kv in kvs:
        small.append(encode_string(kv.key))
        small.append(struct.pack("<I", int(kv.type)))
        if kv.span is not None and not kv.data:  # not read into memory: copied from its file
            pieces.append(b"".join(small))
            pieces.append(kv.span)
            small = []
        else:
            small.append(kv.data)
    for t in tensors:
        small.append(encode_string(t.name))
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
