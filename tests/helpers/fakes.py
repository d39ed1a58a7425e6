"""Fakes for the outside world: an NVML module with chosen GPUs or failures, and the engine double
(ScriptedEngine) that stands in for a model."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

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


@dataclass
class Turn:
    """One scripted reply: the events it streams, then what generate() returns (or the error it raises)."""

    answer: str = ""
    reasoning: str = ""
    calls: list = field(default_factory=list)  # ToolCall
    stats: Any = None  # ReplyStats; None: ReplyStats(stop_reason="end")
    stream: list[tuple[str, str]] | None = None  # (kind, text) events; None: the reasoning, then the answer
    error: Exception | None = None  # raised after the stream, as a failure mid-reply

    def events(self) -> list[tuple[str, str]]:
        if self.stream is not None:
            return self.stream
        return [(kind, text) for kind, text in (("reasoning", self.reasoning), ("answer", self.answer)) if text]


class ScriptedEngine:
    """The engine double: same interface as app.engine.local.Engine, its replies read from a script.

    `script` is a Turn (every reply the same), a list of Turns (one per reply, the last one repeated) or
    a function of the request that returns a Turn. Every request is recorded in `requests`.
    - `loaded`: a model is there from the start (the server tests); otherwise load() makes one at once.
    - `gated`: each reply waits for the test's release() (a stop ends the wait), to hold a run mid-way.
    - `rate`: events per second, paced from the reply's start like a model's tokens, with a stop
      poll after each; a reply whose stats leave wall_seconds at 0 reports the time it took. Unpaced,
      it never polls the stop flag (the server reads a poll as a check on the client).
    - `prompt_tokens`: what count_tokens() answers; `count_error`: what it raises instead.
    """

    kind = "fake"

    def __init__(self, script: Any = None, *, loaded: bool = False, gated: bool = False, rate: float | None = None,
                 prompt_tokens: int = 10, count_error: Exception | None = None, name: str = "scripted",
                 arch: str = "fake", tools_in_template: bool = True) -> None:
        self.script = Turn(answer="Sunny.") if script is None else script
        self.rate, self.prompt_tokens, self.count_error = rate, prompt_tokens, count_error
        self.name, self.arch, self.tools_in_template = name, arch, tools_in_template
        self.gate = threading.Semaphore(0) if gated else None
        self.requests: list = []
        self.info = None
        if loaded:
            from app.machine.llama_load import LoadSettings

            self.load("", LoadSettings())

    @property
    def loaded(self) -> bool:
        return self.info is not None

    def load(self, path, settings, progress=None):
        from app.engine.contract import ModelInfo

        self.info = ModelInfo(str(path), self.name, self.arch, settings.n_ctx, True, True, settings,
                              self.tools_in_template)
        return self.info

    def unload(self) -> None:
        self.info = None

    def release(self, replies: int = 1) -> None:
        """Let `replies` gated replies go."""
        assert self.gate is not None, "ScriptedEngine(gated=True) holds its replies"
        self.gate.release(replies)

    def count_tokens(self, request) -> int:
        if self.count_error is not None:
            raise self.count_error
        return self.prompt_tokens

    def turn(self, request) -> Turn:
        script, n = self.script, len(self.requests) - 1
        if isinstance(script, Turn):
            return script
        if isinstance(script, list):
            return script[min(n, len(script) - 1)]
        return script(request)

    def generate(self, request, on_event=None, should_stop=None, on_logprob=None):
        from app.engine.contract import Reply, ReplyStats

        self.requests.append(request)
        turn = self.turn(request)
        if self.gate is not None:
            while not self.gate.acquire(timeout=0.05):
                if should_stop is not None and should_stop():
                    break
        start = time.perf_counter()
        for i, (kind, text) in enumerate(turn.events()):
            if self.rate:
                time.sleep(max(0.0, start + i / self.rate - time.perf_counter()))
            if on_event:
                on_event(kind, text)
            if self.rate and should_stop is not None and should_stop():  # a paced stream can be stopped
                break
        if turn.error is not None:
            raise turn.error
        stats = turn.stats or ReplyStats(stop_reason="end")
        if self.rate and not stats.wall_seconds:
            stats = dataclasses.replace(stats, wall_seconds=time.perf_counter() - start)
        return Reply(turn.answer, turn.reasoning, turn.answer, "", stats, list(turn.calls))


def ask_for_the_weather(request) -> Turn:
    """A script: ask for the weather in Lisbon and Oslo (two tool calls), then answer from the results."""
    from app.engine.contract import ReplyStats
    from app.engine.tool_calls import parse_call, validate_call

    stats = ReplyStats(prompt_tokens=30, prompt_evaluated=30, generated_tokens=20, stop_reason="end")
    if request.messages[-1]["role"] == "tool":
        temps = [m["content"] for m in request.messages if m["role"] == "tool"]
        return Turn(f"Lisbon is warmer. Results: {'; '.join(temps)}", stats=stats)
    calls = [validate_call(parse_call(f'{{"name": "get_weather", "arguments": {{"city": "{c}"}}}}', i),
                           request.tools or []) for i, c in enumerate(("Lisbon", "Oslo"))]
    return Turn("", "I need both temperatures.", calls, stats, stream=[("tool_call", c.raw) for c in calls])


def weather_engine() -> ScriptedEngine:
    """The window's tool-calling double: asks for the weather in two cities, then answers."""
    return ScriptedEngine(ask_for_the_weather, prompt_tokens=30, name="tool-double")
