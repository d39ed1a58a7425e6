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
- A file that ends before its header or its data does (an interrupted download) is said to be cut
  short, with its size and the size the header implies (`GGUFTruncated`), not by the field that ran
  past the end.
- Little-endian GGUF v2 and v3 only; a big-endian file is recognised and refused clearly.

The code lives in three modules, re-exported here: the data model and value codec
(`app.gguf.gguf_types`), reading (`app.gguf.gguf_read`) and writing (`app.gguf.gguf_write`).
"""

from __future__ import annotations

from app.gguf.gguf_read import Fill, parse_header, read_header
from app.gguf.gguf_types import (
    DEFAULT_ALIGNMENT,
    GGML_TYPES,
    KV,
    LARGE_VALUE,
    MAGIC,
    MAX_ARRAY_NESTING,
    MAX_DIMS,
    MAX_KEY,
    MAX_NAME,
    SUPPORTED_VERSIONS,
    FileSpan,
    FileStamp,
    GGUFError,
    GGUFHeader,
    GGUFTruncated,
    TensorInfo,
    ValueType,
    decode_value,
    encode_string,
    encode_value,
    find_string,
    open_regular,
    string_at,
)
from app.gguf.gguf_write import encode_header, header_pieces, pieces_length

__all__ = [
    "DEFAULT_ALIGNMENT", "GGML_TYPES", "KV", "LARGE_VALUE", "MAGIC", "MAX_ARRAY_NESTING", "MAX_DIMS", "MAX_KEY",
    "MAX_NAME", "SUPPORTED_VERSIONS", "FileSpan", "FileStamp", "Fill", "GGUFError", "GGUFHeader", "GGUFTruncated",
    "TensorInfo", "ValueType", "decode_value", "encode_header", "encode_string", "encode_value", "find_string",
    "header_pieces", "open_regular", "parse_header", "pieces_length", "read_header", "string_at",
]
