"""Ask the bundled llama.cpp whether it needs a metadata key to read a file. No Qt.

A rule marked `only_if_llama_cpp_requires` applies only where llama.cpp's no-alloc load (the
header only) names the missing key, so an upstream file that loads as it is stays as it is.
"""

from __future__ import annotations

import functools
from pathlib import Path

from app.model.patch_profile import Requires


def llama_requires_key(path: str | Path) -> Requires:
    """Whether the bundled llama.cpp needs a metadata key to read the file at `path`: its no-alloc
    load (the header only) either succeeds (not needed), names the missing key (needed), or fails
    otherwise, e.g. on an architecture it does not know (None: unknown, the profile decides)."""
    @functools.cache
    def load_error() -> str | None:
        from app.machine.llama_load import LoadSettings, simulate

        try:
            simulate(path, LoadSettings(n_ctx=256, n_gpu_layers=0, n_batch=256, n_ubatch=256))
        except RuntimeError as exc:
            return str(exc)
        return None

    def requires(key: str) -> bool | None:
        error = load_error()
        if error is None:
            return False  # it loads as it is
        return True if f"key not found in model: {key}" in error else None

    return requires


def requires_for_header(head: bytes, file_size: int) -> Requires:
    """`llama_requires_key` for a file known only by its header (a download not made yet): on first
    use, the header goes into a sparse file of the file's size, which llama.cpp's no-alloc load reads."""
    import shutil
    import tempfile

    @functools.cache
    def answer(key: str) -> bool | None:
        folder = Path(tempfile.mkdtemp(prefix="clover-probe-"))
        try:
            probe = folder / "probe.gguf"
            with open(probe, "wb") as f:
                f.write(head)
                f.truncate(file_size)
            return llama_requires_key(probe)(key)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return answer
