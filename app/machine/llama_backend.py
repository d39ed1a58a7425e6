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
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from app.machine.llama_libs import lib_dir, lib_file, variant_of
from app.machine.llama_libs import lib_name as _lib_name

T = TypeVar("T")

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
    cpu_skipped: tuple[tuple[str, str], ...] = ()  # (variant, why) ruled out here by the probe, best first
    cpu_probe_s: float = 0.0  # seconds the probe took in this process (0: its verdicts were known)
    cpu_forced: bool = False  # CLOVER_CPU_VARIANT chose the variant


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
        """Which backend inference will use, and why, in one line (doctor, --self-test, welcome card);
        a CPU variant ruled out by the probe is named after it ("... (sapphirerapids skipped, SIGILL)")."""
        load = self.load
        variant = f" ({load.cpu_variant} variant{', forced' if load.cpu_forced else ''})" \
            if load and load.cpu_variant else ""
        skipped = f" ({', '.join(f'{v} skipped, {why}' for v, why in load.cpu_skipped)})" \
            if load and load.cpu_skipped and not load.cpu_forced else ""
        if self.cuda_loaded and self.gpu_devices:
            names = ", ".join(d.description for d in self.gpu_devices)
            return f"CUDA on {names}; CPU{variant} for what stays in system RAM{skipped}"
        if self.cuda_loaded:
            return f"CPU{variant}: the CUDA backend loaded but found no usable GPU{skipped}"
        if self.cuda:
            reason = load.cuda_error if load and load.cuda_error else "it did not load"
            return f"CPU{variant}: CUDA compiled in, but no CUDA device: {reason}{skipped}"
        return f"CPU{variant}: this llama.cpp is a CPU-only build{skipped}"


_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


def _ggml() -> ctypes.CDLL:
    """The ggml library libllama uses (the backend registry lives there)."""
    lib = ctypes.CDLL(str(lib_file("ggml")))
    lib.ggml_backend_reg_count.restype = ctypes.c_size_t
    lib.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_reg_get.restype = ctypes.c_void_p
    lib.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_name.restype = ctypes.c_char_p
    lib.ggml_backend_load.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_load.restype = ctypes.c_void_p
    return lib


def registered_backends() -> tuple[str, ...]:
    lib = _ggml()
    return tuple((lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)) or b"").decode()
                 for i in range(lib.ggml_backend_reg_count()))


def _cpu_modules() -> list[Path]:
    prefix = "ggml-cpu-" if sys.platform == "win32" else "libggml-cpu-"
    return sorted(p for p in lib_dir().iterdir() if p.name.startswith(prefix) and p.suffix in (".so", ".dll", ".dylib"))


def _score(module: Path) -> int:
    """A CPU module's own score for this CPU (0: it cannot run here), as ggml's loader asks it: opened,
    asked, closed."""
    import _ctypes

    try:
        lib = ctypes.CDLL(str(module))
    except OSError:
        return 0
    try:
        fn = lib.ggml_backend_score
        fn.restype = ctypes.c_int
        return int(fn())
    except AttributeError:
        return 0
    finally:
        with contextlib.suppress(OSError):
            _ctypes.dlclose(lib._handle)


def ranked_cpu_modules(modules: list[Path]) -> list[Path]:
    """The CPU modules that can run on this CPU by their own score, best first (ggml's choice first)."""
    scored = [(s, m) for m in modules if (s := _score(m)) > 0]
    return [m for _, m in sorted(scored, key=lambda sm: (-sm[0], sm[1].name))]


def _other_modules(folder: Path) -> list[Path]:
    """The non-CPU backend modules shipped (libggml-cuda): loaded before the CPU one, as ggml does."""
    names = [_lib_name(f"ggml-{b}") for b in ("blas", "cuda", "hip", "vulkan", "opencl", "musa", "rpc")]
    return [folder / n for n in names if (folder / n).exists()]


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
        choice = None
        if dynamic:
            from app.machine.cpu_probe import choose_cpu_module

            # the CPU module: ggml's own choice by score, proved to run here first (cpu_probe.py)
            choice = choose_cpu_module(ranked_cpu_modules(modules))
            if choice.module is None:
                tried = "; ".join(f"{v.variant}: {v.reason}" for v in choice.skipped) or "none can run on this CPU"
                raise RuntimeError(f"no CPU variant of llama.cpp runs on this machine ({tried})")
            if cuda_module:
                from app.machine.gpu_runtime import preload

                runtime = preload()
            with _quiet_log():  # ggml would print "load_backend: loaded CPU backend ..." on stderr
                for other in _other_modules(folder):
                    lib.ggml_backend_load(str(other).encode())
                lib.ggml_backend_load(str(choice.module).encode())
        names = registered_backends()
        cuda_error = None
        if cuda_module and "CUDA" not in names:
            cuda_error = _cuda_error(folder / _lib_name("ggml-cuda"))
        result = BackendLoad(dynamic, variant_of(choice.module) if choice and choice.module else None,
                             tuple(variant_of(m) for m in modules), cuda_module, cuda_error, runtime,
                             cpu_skipped=tuple((v.variant, v.reason) for v in choice.skipped) if choice else (),
                             cpu_probe_s=choice.probed_s if choice else 0.0,
                             cpu_forced=bool(choice and choice.forced))
        if result.cpu_variant:
            from app.base import crash_trail

            crash_trail.note("cpu_variant", result.cpu_variant)
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


def on_a_thread_of_its_own(work: Callable[[], T]) -> T:
    """`work()` on a thread that ends with it: its result, or its exception raised here.

    For decodes made outside an engine's scheduler (app.engine.slots.Scheduler.call is that thread's
    way in). The CPU backend's OpenMP keeps a pool of worker threads for each thread that calls
    llama_decode, as long as that thread lives, and libgomp counts the workers of every living pool
    against the cores: past them, every worker waits for work asleep instead of spinning, and each
    decode pays the wake-ups (SmolLM2 on 2 cores: 100 against 145 tok/s once a second thread had
    decoded). A thread that ends takes its pool with it."""
    out: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as exc:  # noqa: BLE001 (raised again on the caller's thread)
            error.append(exc)

    thread = threading.Thread(target=run, name="decode", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return out[0]


def llama_with_only(module: Path) -> ModuleType:
    """The `llama_cpp` module with `module` as its only backend: the CPU probe's child proving one
    variant (app/machine/cpu_probe.py). Not for a process that also calls `llama()`."""
    import llama_cpp

    if not _ggml().ggml_backend_load(str(module).encode()):
        raise RuntimeError(f"ggml did not load {module}")
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


def _libraries_of_ours() -> list[tuple[Path, int]]:
    """llama.cpp's libraries in the package folder, each with the number of libstdc++ symbols it
    imports (0 when libstdc++ is linked in with its symbols hidden, the set-up's build; gpu_check.py's
    isolation step prints it). Read with the standard library from the ELF dynamic symbol table."""
    out = []
    for p in sorted(lib_dir().iterdir()):
        if ".so" in p.name and not p.name.startswith("libcudart"):
            out.append((p, _elf_libstdcxx_imports(p)))
    return out


_GLIBC_CXA = {"__cxa_atexit", "__cxa_finalize", "__cxa_thread_atexit_impl"}


def _elf_libstdcxx_imports(path: Path) -> int:
    """How many undefined (not weak) dynamic symbols of `path` are libstdc++'s (std::, __cxxabiv1, __cxa_)."""
    import struct

    try:
        data = path.read_bytes()
    except OSError:
        return 0
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit ELF only
        return 0
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    count = 0
    for sh in sections:
        if sh[1] != 11:  # SHT_DYNSYM
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], 24):
            name_off, info, other, shndx = struct.unpack_from("<IBBH", data, off)
            if shndx != 0 or not name_off or info >> 4 != 1:  # defined, or a weak reference (null if absent)
                continue
            start = strtab[4] + name_off
            name = data[start:data.index(b"\0", start)].decode(errors="replace")
            if name in _GLIBC_CXA:  # the C library's, not libstdc++'s
                continue
            if name.startswith(("_ZNSt", "_ZNKSt", "_ZSt", "_ZTISt", "_ZTVSt", "_ZNSo", "_ZNSi", "_ZNKSo",
                                "_ZTVN10__cxxabiv", "_ZTIN10__cxxabiv", "__cxa_", "_ZdlPv", "_Znwm")):
                count += 1
    return count
