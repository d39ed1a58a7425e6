"""Facts about the bundled llama.cpp (through llama-cpp-python): version, build, compute devices. No Qt.

llama.cpp registers one "backend" per compiled-in compute library (CPU, CUDA, ...);
`llama_print_system_info()` lists each registered backend with its features, so "CUDA" among
them means the CUDA build was loaded. Devices (CPU, each GPU) are read from ggml's device
registry through ctypes, with the free/total memory ggml itself sees.
"""

from __future__ import annotations

import ctypes
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BackendDevice:
    name: str
    description: str
    kind: str  # "cpu", "gpu", "igpu", "accel"
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class LlamaBuild:
    version: str
    system_info: str  # llama_print_system_info(), verbatim
    backends: tuple[str, ...]  # registered backend names, e.g. ("CUDA", "CPU")
    gpu_offload: bool  # llama_supports_gpu_offload()
    devices: tuple[BackendDevice, ...]
    setup: dict  # what packaging/bootstrap.py recorded about the build (flavor, CMAKE_ARGS, why)

    @property
    def cuda(self) -> bool:
        return "CUDA" in self.backends


_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


def _ggml_lib():
    """The ggml shared library that llama-cpp-python loaded (it exports the device registry)."""
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    names = ["ggml.dll"] if sys.platform == "win32" else ["libggml.dylib"] if sys.platform == "darwin" else ["libggml.so"]
    for name in names:
        if (lib_dir / name).exists():
            return ctypes.CDLL(str(lib_dir / name))
    return None


def _devices() -> tuple[BackendDevice, ...]:
    lib = _ggml_lib()
    if lib is None:
        return ()
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for fn in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    lib.ggml_backend_dev_memory.restype = None
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        found.append(BackendDevice(
            name=(lib.ggml_backend_dev_name(dev) or b"").decode(),
            description=(lib.ggml_backend_dev_description(dev) or b"").decode(),
            kind=_DEVICE_KINDS.get(lib.ggml_backend_dev_type(dev), "other"),
            free_bytes=free.value, total_bytes=total.value,
        ))
    return tuple(found)


def setup_record() -> dict:
    """What the set-up script wrote about this environment's llama.cpp build, if it ran."""
    marker = Path(sys.prefix) / "clover-setup.json"
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=1)
def build_info() -> LlamaBuild:
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    backends = tuple(part.split(":", 1)[0].strip() for part in info.split("|")
                     if ":" in part and "=" not in part.split(":", 1)[0])
    return LlamaBuild(
        version=llama_cpp.__version__,
        system_info=info,
        backends=tuple(dict.fromkeys(b for b in backends if b)),
        gpu_offload=bool(llama_cpp.llama_supports_gpu_offload()),
        devices=_devices(),
        setup=setup_record(),
    )
