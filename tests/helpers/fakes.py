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
    """Stands in for the pynvml module: the calls app.machine.gpu makes, answering from FakeGpu entries."""

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


class ToolCallingEngine:
    """An engine double that asks for the weather in Lisbon and Oslo, then answers from the results.

    Same interface as app.engine.local.Engine; it records every request so tests can read what the
    window sent (tools, tool calls, tool results)."""

    kind = "fake"

    def __init__(self) -> None:
        self.info = None
        self.requests = []

    @property
    def loaded(self) -> bool:
        return self.info is not None

    def load(self, path, settings, progress=None):
        from app.engine.local import ModelInfo

        self.info = ModelInfo(str(path), "tool-double", "fake", settings.n_ctx, True, True, settings)
        return self.info

    def unload(self) -> None:
        self.info = None

    def count_tokens(self, request) -> int:
        return 30

    def generate(self, request, on_event=None, should_stop=None, on_logprob=None):
        from app.engine.local import Reply, ReplyStats
        from app.engine.tool_calls import parse_call, validate_call

        self.requests.append(request)
        stats = ReplyStats(prompt_tokens=30, prompt_evaluated=30, generated_tokens=20, stop_reason="end")
        if request.messages[-1]["role"] == "tool":
            temps = [m["content"] for m in request.messages if m["role"] == "tool"]
            text = f"Lisbon is warmer. Results: {'; '.join(temps)}"
            if on_event:
                on_event("answer", text)
            return Reply(text, "", text, "", stats)
        calls = [validate_call(parse_call(f'{{"name": "get_weather", "arguments": {{"city": "{c}"}}}}', i),
                               request.tools or []) for i, c in enumerate(("Lisbon", "Oslo"))]
        for c in calls:
            if on_event:
                on_event("tool_call", c.raw)
        return Reply("", "I need both temperatures.", "", "", stats, calls)
