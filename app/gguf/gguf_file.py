"""GGUF header reading and writing, fast and defensive. No Qt.

A GGUF file is: magic "GGUF", version, tensor count, KV count, the KV pairs, the tensor infos (name,
dims, ggml type, data offset), padding to `general.alignment`, then the data section. This module
reads and writes everything before the data section; the data stays on disk and is copied by the
kernel (`app.model.patch`). Every count, length and offset is checked against the bytes that remain
before anything is allocated, so a malformed file gives a `GGUFError` naming the field and offset.

Design points (the moving read window, what is kept raw): docs/architecture/files.md.
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
