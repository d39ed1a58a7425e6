"""Ask the bundled llama.cpp whether it needs a metadata key to read a file. No Qt.

A rule marked `only_if_llama_cpp_requires` applies only where llama.cpp's no-alloc load (the
header only) names the missing key, so an upstream file that loads as it is stays as it is.

llama.cpp's header reader holds every value in memory, several times over for an array (a legal
header with a 100-million-element u8 array took `python -m app plan` to 736 MB, six million
one-byte strings to 442 MB). The question needs only the keys llama.cpp reads, none of which is a
large value outside the tokenizer: a header that holds such values is asked about through a sparse
copy of the file whose header leaves them out (`slim_header`).
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from app.gguf.gguf_file import GGUFError, GGUFHeader, encode_header, parse_header, read_header
from app.model.patch_profile import Requires

# A value larger than this, outside the tokenizer's keys, is left out of the header llama.cpp is asked
# about (the architecture's keys are numbers and per-layer lists; a 262K-token vocabulary's arrays are
# a few MB each, and are kept unless they are left in the file as byte ranges, over LARGE_VALUE).
PROBE_VALUE_MAX = 1 << 20


def slim_header(header: GGUFHeader) -> bytes | None:
    """The header's bytes without the values llama.cpp does not need to say which key it requires:
    values left in the file as byte ranges (`KV.span`, over LARGE_VALUE), and values over
    PROBE_VALUE_MAX outside `tokenizer.`; None when there are none (the file is probed as it is).
    The tensor infos are the same, so a file of this header and the same data section size loads
    (or fails to) as the original does."""
    kept = [kv for kv in header.kvs.values()
            if kv.span is None and (kv.size <= PROBE_VALUE_MAX or kv.key.startswith("tokenizer."))]
    if len(kept) == len(header.kvs):
        return None
    return encode_header(header.version, kept, header.tensors, header.alignment)


@contextlib.contextmanager
def _sparse_file(head: bytes, data_size: int) -> Iterator[Path]:
    """A file of `head` and a data section of `data_size` bytes that takes no disk (a hole), for
    llama.cpp's no-alloc load, which reads the header and checks the tensors fit in the file."""
    folder = Path(tempfile.mkdtemp(prefix="clover-probe-"))
    try:
        probe = folder / "probe.gguf"
        with open(probe, "wb") as f:
            f.write(head)
            f.truncate(len(head) + data_size)
        yield probe
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _probe_path(path: str | Path, header: GGUFHeader | None) -> Iterator[Path]:
    """The file llama.cpp is asked about: `path` itself, or a sparse copy with a slim header."""
    slim = None
    try:
        header = header if header is not None else read_header(path)
        slim = slim_header(header)
    except (GGUFError, OSError):
        pass  # llama.cpp says what it makes of the file
    if slim is None or header is None:
        yield Path(path)
        return
    with _sparse_file(slim, header.data_size) as probe:
        yield probe


def _load_error(path: Path) -> str | None:
    """What llama.cpp's no-alloc load of `path` fails with (None: it loads)."""
    from app.machine.llama_load import LoadSettings, simulate

    try:
        simulate(path, LoadSettings(n_ctx=256, n_gpu_layers=0, n_batch=256, n_ubatch=256))
    except RuntimeError as exc:
        return str(exc)
    return None


def _answer(error: str | None, key: str) -> bool | None:
    if error is None:
        return False  # it loads as it is
    return True if f"key not found in model: {key}" in error else None


def llama_requires_key(path: str | Path, header: GGUFHeader | None = None) -> Requires:
    """Whether the bundled llama.cpp needs a metadata key to read the file at `path` (whose header
    is `header`, read here if not given): its no-alloc load (the header only) either succeeds (not
    needed), names the missing key (needed), or fails otherwise, e.g. on an architecture it does
    not know (None: unknown, the profile decides). Asked once, on first use."""
    @functools.cache
    def load_error() -> str | None:
        with _probe_path(path, header) as probe:
            return _load_error(probe)

    def requires(key: str) -> bool | None:
        return _answer(load_error(), key)

    return requires


def requires_for_header(head: bytes, file_size: int) -> Requires:
    """`llama_requires_key` for a file known only by its header (a download not made yet): on first
    use, the header (slimmed as `slim_header` does) goes into a sparse file of the file's size,
    which llama.cpp's no-alloc load reads."""
    @functools.cache
    def load_error() -> str | None:
        slim, data_size = None, file_size - len(head)
        try:
            header = parse_header(head, file_size)
            slim = slim_header(header)
            if slim is not None:
                data_size = header.data_size
        except GGUFError:
            pass  # llama.cpp says what it makes of the bytes
        with _sparse_file(slim if slim is not None else head, data_size) as probe:
            return _load_error(probe)

    def requires(key: str) -> bool | None:
        return _answer(load_error(), key)

    return requires
