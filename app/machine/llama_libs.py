"""Where llama.cpp's shared libraries lie: llama-cpp-python's library folder, a library's file as
libllama loaded it, and a CPU module's variant name. No Qt, and nothing loaded: a plain file lookup
that the backend loader (llama_backend), the CPU probe (cpu_probe) and the GPU runtime (gpu_runtime)
all ask, so that none of them needs another."""

from __future__ import annotations

import re
import sys
from pathlib import Path


def lib_dir() -> Path:
    """llama-cpp-python's folder of shared libraries (libllama, libggml*, the backend modules)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        raise ImportError("llama-cpp-python is not installed")
    return Path(spec.origin).parent / "lib"


def lib_name(base: str) -> str:
    if sys.platform == "win32":
        return f"{base}.dll"
    return f"lib{base}.dylib" if sys.platform == "darwin" else f"lib{base}.so"


def lib_file(base: str) -> Path:
    """The file of a ggml/llama library *as libllama loaded it*. A wheel cannot hold symlinks, so
    `libggml.so`, `libggml.so.0` and `libggml.so.0.25.3` are three copies; libllama links the
    soname (`libggml.so.0`), and opening another copy by path would load a second, separate ggml
    with its own backend registry and its own CPU buffer type."""
    folder = lib_dir()
    if sys.platform == "win32":
        return folder / f"{base}.dll"
    if sys.platform == "darwin":
        versioned = sorted(folder.glob(f"lib{base}.[0-9]*.dylib"), key=lambda p: len(p.name))
    else:
        pattern = rf"lib{re.escape(base)}\.so\.\d+"
        versioned = [p for p in folder.glob(f"lib{base}.so.*") if re.fullmatch(pattern, p.name)]
    return versioned[0] if versioned else folder / lib_name(base)


def variant_of(path: Path) -> str:
    """A CPU module's variant: `libggml-cpu-zen4.so` -> `zen4`."""
    return path.stem.split("ggml-cpu-", 1)[1]
