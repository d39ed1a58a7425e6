"""NVIDIA GPU probe through NVML (the `pynvml` module of nvidia-ml-py). No Qt.

`probe()` returns one `GpuProbe` describing every NVIDIA GPU, or why there is none (NVML missing,
driver failure, no device); it never raises for a machine without a GPU. The result is cached:
tests replace the whole probe by passing their own `GpuProbe` objects to the code that plans, never
by pretending a GPU exists inside llama.cpp.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MiB = 1024 * 1024

STATUS_OK = "ok"
STATUS_NO_NVML = "nvml-missing"  # the NVML library (driver part) or the pynvml module is absent
STATUS_DRIVER_ERROR = "driver-error"  # NVML present but failed (driver/library mismatch, permissions)
STATUS_NO_GPU = "no-gpu"  # NVML works but lists no device


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    total_bytes: int
    free_bytes: int
    used_bytes: int
    compute_capability: tuple[int, int] | None
    mig_enabled: bool | None
    # (pid, bytes used or None, process name) for compute processes holding memory on this GPU
    processes: tuple[tuple[int, int | None, str], ...] = ()

    @property
    def total_gib(self) -> float:
        return self.total_bytes / (1024 * MiB)

    @property
    def free_gib(self) -> float:
        return self.free_bytes / (1024 * MiB)


@dataclass(frozen=True)
class GpuProbe:
    status: str
    message: str
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # e.g. "12.8": the newest CUDA the driver supports
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)

    @property
    def has_gpu(self) -> bool:
        return self.status == STATUS_OK and bool(self.gpus)

    def summary(self) -> str:
        if not self.has_gpu:
            return "CPU mode: no NVIDIA GPU found, models run on the CPU"  # the reason why: `message`
        parts = [f"GPU {g.index}: {g.name}, {g.free_gib:.1f} of {g.total_gib:.1f} GiB free" for g in self.gpus]
        return "; ".join(parts) + f" (driver {self.driver_version}, CUDA {self.cuda_driver_version})"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _optional(fn: Callable[..., Any], *args: Any) -> Any:
    """Call an NVML query that some GPUs or drivers do not support; None when unsupported."""
    try:
        return fn(*args)
    except Exception:  # pynvml raises NVMLError subclasses, one per error code
        return None


def _read_gpu(nvml: Any, index: int) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    cc = _optional(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    mig = _optional(nvml.nvmlDeviceGetMigMode, handle)
    procs = _optional(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    held = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        name = _optional(nvml.nvmlSystemGetProcessName, p.pid)
        held.append((int(p.pid), int(used) if isinstance(used, int) else None, _text(name) if name else "?"))
    return GpuInfo(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(_optional(nvml.nvmlDeviceGetUUID, handle) or ""),
        total_bytes=int(mem.total),
        free_bytes=int(mem.free),
        used_bytes=int(mem.used),
        compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
        mig_enabled=bool(mig[0]) if mig else None,
        processes=tuple(held),
    )


def probe_with(nvml: Any) -> GpuProbe:
    """Probe through a given NVML module (the real pynvml, or a fake in tests)."""
    try:
        nvml.nvmlInit()
    except Exception as exc:
        name = type(exc).__name__
        text = _text(exc)
        if "LibraryNotFound" in name or "Library Not Found" in text or "not found" in text.lower():
            return GpuProbe(STATUS_NO_NVML, f"NVML library not found ({text}); no NVIDIA driver installed?")
        return GpuProbe(STATUS_DRIVER_ERROR, f"NVML failed to start: {text}")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _optional(nvml.nvmlSystemGetCudaDriverVersion)
        cuda_text = f"{cuda // 1000}.{(cuda % 1000) // 10}" if isinstance(cuda, int) else None
        count = nvml.nvmlDeviceGetCount()
        gpus = tuple(_read_gpu(nvml, i) for i in range(count))
    except Exception as exc:
        return GpuProbe(STATUS_DRIVER_ERROR, f"NVML query failed: {_text(exc)}")
    finally:
        _optional(nvml.nvmlShutdown)
    if not gpus:
        return GpuProbe(STATUS_NO_GPU, "NVML lists no NVIDIA GPU", driver, cuda_text)
    return GpuProbe(STATUS_OK, f"{len(gpus)} NVIDIA GPU(s)", driver, cuda_text, gpus)


@functools.lru_cache(maxsize=1)
def probe() -> GpuProbe:
    """The machine's GPUs, probed once per process (call `probe.cache_clear()` to re-probe)."""
    try:
        import pynvml
    except ImportError as exc:
        return GpuProbe(STATUS_NO_NVML, f"the pynvml module (nvidia-ml-py) is not installed: {exc}")
    return probe_with(pynvml)
