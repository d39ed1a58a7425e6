"""The bundled llama.cpp (through llama-cpp-python): loading its backends, and facts about them. No Qt.

The set-up builds llama.cpp with ggml's backends as loadable modules (`GGML_BACKEND_DL`): one CPU
backend per instruction-set level (`libggml-cpu-haswell.so`, `-zen4`, ...) and, in the CUDA build,
`libggml-cuda.so`, all beside libllama. llama.cpp would look for them beside the Python executable
and in the working folder, so `llama()` loads them from the package's own folder first: ggml keeps
the best CPU variant for this CPU (each module scores itself), and the CUDA backend where it loads,
that is where an NVIDIA driver is installed and the GPU runtime (cuBLAS, app/machine/gpu_runtime.py) was
found. Everything in the app reaches llama-cpp-python through `llama()` (a test enforces it), so no
code path can use llama.cpp before its backends are there.

`build_info()` says what was loaded and why: the registered backends, the CPU variant chosen, and
for a CUDA build whose backend did not load, the reason (no driver, no GPU runtime, ...).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

_LOAD_LOCK = threading.Lock()


@dataclass(frozen=True)
class BackendDevice:
    name: str
    description: str
    kind: str  # "cpu", "gpu", "igpu", "accel"
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class BackendLoad:
    """What happened when the backends were loaded."""

    dynamic: bool  # backends are loadable modules (GGML_BACKEND_DL); False: linked in
    cpu_variant: str | None  # e.g. "zen4": the CPU module ggml chose for this CPU (dynamic builds)
    cpu_variants: tuple[str, ...]  # every CPU module shipped
    cuda_module: bool  # libggml-cuda is shipped (CUDA compiled in)
    cuda_error: str | None  # why the CUDA module did not load, in words; None if it loaded or is absent
    runtime: tuple[str, ...] = field(default_factory=tuple)  # GPU runtime libraries preloaded


@dataclass(frozen=True)
class LlamaBuild:
    version: str
    system_info: str  # llama_print_system_info(), verbatim
    backends: tuple[str, ...]  # registered backend names, e.g. ("CUDA", "CPU")
    gpu_offload: bool  # llama_supports_gpu_offload()
    devices: tuple[BackendDevice, ...]
    setup: dict  # what packaging/bootstrap.py recorded about the build (flavor, CMAKE_ARGS, why)
    load: BackendLoad | None = None

    @property
    def cuda(self) -> bool:
        """CUDA compiled in (the module is shipped), whether or not it could load here."""
        return "CUDA" in self.backends or bool(self.load and self.load.cuda_module)

    @property
    def cuda_loaded(self) -> bool:
        return "CUDA" in self.backends

    @property
    def gpu_devices(self) -> tuple[BackendDevice, ...]:
        return tuple(d for d in self.devices if d.kind in ("gpu", "igpu"))

    def backend_choice(self) -> str:
        """Which backend inference will use, and why, in one line (doctor, --self-test, welcome card)."""
        variant = f" ({self.load.cpu_variant} variant)" if self.load and self.load.cpu_variant else ""
        if self.cuda_loaded and self.gpu_devices:
            names = ", ".join(d.description for d in self.gpu_devices)
            return f"CUDA on {names}; CPU{variant} for what stays in system RAM"
        if self.cuda_loaded:
            return f"CPU{variant}: the CUDA backend loaded but found no usable GPU"
        if self.cuda:
            reason = self.load.cuda_error if self.load and self.load.cuda_error else "it did not load"
            return f"CPU{variant}: CUDA compiled in, but no CUDA device: {reason}"
        return f"CPU{variant}: this llama.cpp is a CPU-only build"


_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


def lib_dir() -> Path:
    """llama-cpp-python's folder of shared libraries (libllama, libggml*, the backend modules)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.origin:
        raise ImportError("llama-cpp-python is not installed")
    return Path(spec.origin).parent / "lib"


def _lib_name(base: str) -> str:
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
    return versioned[0] if versioned else folder / _lib_name(base)


def _ggml() -> ctypes.CDLL:
    """The ggml library libllama uses (the backend registry lives there)."""
    lib = ctypes.CDLL(str(lib_file("ggml")))
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_reg_get.restype = ctypes.c_void_p
    lib.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_name.restype = ctypes.c_char_p
    lib.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_load_all_from_path.restype = None
    return lib


def registered_backends() -> tuple[str, ...]:
    lib = _ggml()
    return tuple((lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)) or b"").decode()
                 for i in range(lib.ggml_backend_reg_count()))


def _cpu_modules() -> list[Path]:
    prefix = "ggml-cpu-" if sys.platform == "win32" else "libggml-cpu-"
    return sorted(p for p in lib_dir().iterdir() if p.name.startswith(prefix) and p.suffix in (".so", ".dll", ".dylib"))


def _variant(path: Path) -> str:
    return path.stem.split("ggml-cpu-", 1)[1]


def _loaded_cpu_variant(modules: list[Path]) -> str | None:
    """The CPU module ggml kept: read from the process's mappings where the OS shows them, else
    by asking each module for its score for this CPU, as ggml itself chose."""
    maps = Path("/proc/self/maps")
    if maps.exists():
        text = maps.read_text(errors="replace")
        for m in modules:
            if str(m) in text or m.name in text:
                return _variant(m)
    best, best_score = None, 0
    for m in modules:
        try:
            score_fn = ctypes.CDLL(str(m)).ggml_backend_score
        except (OSError, AttributeError):
            continue
        score_fn.restype = ctypes.c_int
        score = score_fn()
        if score > best_score:
            best, best_score = _variant(m), score
    return best


def explain_cuda_load_error(text: str) -> str:
    """A dynamic loader's complaint about libggml-cuda, as a user-facing reason."""
    if "libcuda.so" in text or "nvcuda.dll" in text:
        return "no NVIDIA driver (libcuda is not installed)"
    if "cublas" in text.lower():
        return "the GPU runtime (cuBLAS) is not installed: python -m app gpu-runtime install"
    if "cudart" in text.lower():
        return "the CUDA runtime library (libcudart) is missing from this installation"
    return text.strip() or "the CUDA backend did not load"


def _cuda_error(module: Path) -> str:
    """Why the CUDA backend module did not register: the driver first (the most basic need), then what
    loading the module itself says."""
    driver = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    for name in (driver, str(module)):
        try:
            ctypes.CDLL(name)
        except OSError as exc:  # a frozen app's ctypes wraps the loader's message: read the original
            return explain_cuda_load_error(str(exc.__cause__ or exc))
    return "the CUDA backend loaded but registered no device (driver too old for this build, or no GPU)"


_STATE: dict[str, BackendLoad] = {}


@contextlib.contextmanager
def _quiet_log() -> Iterator[None]:
    """llama.cpp's and ggml's log into the `logging` module (the app's log file) for a while."""
    import logging

    import llama_cpp

    log = logging.getLogger("llama.cpp")

    @llama_cpp.llama_log_callback
    def callback(level: int, text: bytes, user_data: object) -> None:
        line = text.decode("utf-8", "replace").rstrip()
        if line:
            log.info(line)

    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
    try:
        yield
    finally:
        llama_cpp.llama_log_set(llama_cpp._logger.llama_log_callback, ctypes.c_void_p(0))


def load_backends() -> BackendLoad:
    """Load ggml's backend modules from llama-cpp-python's folder, once per process."""
    with _LOAD_LOCK:
        if "load" in _STATE:
            return _STATE["load"]
        import llama_cpp  # noqa: F401  (loads libllama and libggml from the package folder)

        folder = lib_dir()
        lib = _ggml()
        modules = _cpu_modules()
        cuda_module = (folder / _lib_name("ggml-cuda")).exists()
        runtime: tuple[str, ...] = ()
        dynamic = lib.ggml_backend_reg_count() == 0 and bool(modules or cuda_module)
        if dynamic:
            if cuda_module:
                from app.machine.gpu_runtime import preload

                runtime = preload()
            with _quiet_log():  # ggml would print "load_backend: loaded CPU backend ..." on stderr
                lib.ggml_backend_load_all_from_path(str(folder).encode())
        names = registered_backends()
        cuda_error = None
        if cuda_module and "CUDA" not in names:
            cuda_error = _cuda_error(folder / _lib_name("ggml-cuda"))
        result = BackendLoad(dynamic, _loaded_cpu_variant(modules) if dynamic else None,
                             tuple(_variant(m) for m in modules), cuda_module, cuda_error, runtime)
        if "CPU" not in names:
            raise RuntimeError(f"llama.cpp loaded no CPU backend from {folder} (found: {', '.join(names) or 'none'}); "
                               "reinstall with `python3 packaging/bootstrap.py setup`")
        _STATE["load"] = result
        return result


def llama() -> ModuleType:
    """The `llama_cpp` module with its backends loaded: the one way into llama-cpp-python."""
    load_backends()
    import llama_cpp

    return llama_cpp


def llama_ext() -> ModuleType:
    """llama-cpp-python's bindings of llama.cpp's staging API (`llama-ext.h`: the MTP head's hidden
    states, `llama_set_embeddings_nextn` / `llama_get_embeddings_nextn_ith`), backends loaded."""
    load_backends()
    import importlib

    return importlib.import_module("llama_cpp.llama_cpp_ext")


def _devices() -> tuple[BackendDevice, ...]:
    lib = _ggml()
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for fn in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    size_p = ctypes.POINTER(ctypes.c_size_t)
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, size_p, size_p]
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
    lc = llama()
    info = lc.llama_print_system_info().decode("utf-8", "replace").strip()
    return LlamaBuild(
        version=lc.__version__,
        system_info=info,
        backends=registered_backends(),
        gpu_offload=bool(lc.llama_supports_gpu_offload()),
        devices=_devices(),
        setup=setup_record(),
        load=load_backends(),
    )


def physical_cores() -> int:
    """CPU cores this process may use, counting each physical core once (llama.cpp's generation
    speed follows physical cores: two threads on one core's hyper-threads compete for its units)."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = set(range(os.cpu_count() or 1))
    cores: set[tuple[str, str]] = set()
    for cpu in allowed:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((base / "physical_package_id").read_text().strip(), (base / "core_id").read_text().strip()))
        except OSError:
            cores = set()
            break
    if cores:
        return len(cores)
    try:
        import psutil

        return min(psutil.cpu_count(logical=False) or len(allowed), len(allowed))
    except ImportError:
        return max(1, len(allowed))
