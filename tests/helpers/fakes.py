"""Fakes for the outside world: an NVML module with chosen GPUs or failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

GiB = 1024**3


class FakeNVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(FakeNVMLError):  # same class name as pynvml's
    pass


@dataclass
class FakeGpu:
    name: str
    total_gib: float
    used_gib: float = 0.5
    cc: tuple[int, int] = (8, 9)
    mig: int | None = 0
    processes: list[tuple[int, int, str]] = field(default_factory=list)


class FakeNVML:
    """Stands in for the pynvml module: the calls app.gpu makes, answering from FakeGpu entries."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *, init_error: Exception | None = None,
                 driver: str = "580.95.05", cuda: int = 13000):
        self.gpus = gpus or []
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.shutdowns = 0

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetName(self, g):
        return g.name.encode()

    def nvmlDeviceGetUUID(self, g):
        return f"GPU-{abs(hash(g.name)) % 10**8:08d}"

    def nvmlDeviceGetMemoryInfo(self, g):
        total = int(g.total_gib * GiB)
        used = int(g.used_gib * GiB)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCudaComputeCapability(self, g):
        return g.cc

    def nvmlDeviceGetMigMode(self, g):
        if g.mig is None:
            raise FakeNVMLError("Not Supported")
        return (g.mig, g.mig)

    def nvmlDeviceGetComputeRunningProcesses(self, g):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used, _ in g.processes]

    def nvmlSystemGetProcessName(self, pid):
        for g in self.gpus:
            for p, _, name in g.processes:
                if p == pid:
                    return name.encode()
        raise FakeNVMLError("Not Found")


def rtx_4090() -> FakeGpu:
    return FakeGpu("NVIDIA GeForce RTX 4090", 23.99, used_gib=0.4)
