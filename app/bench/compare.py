"""Compare mode: the same prompt, or the scenario suite, on two engines, side by side. No Qt.

An engine is a local GGUF (loaded as planned for this machine) or a remote endpoint. Engines run
one after the other, each unloaded before the next loads, so two local models never share the GPU.
Results are saved as Markdown in `<data>/bench/`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.base.paths import app_dirs
from app.bench.scenarios import Result, Scenario, run_all
from app.engine.contract import ChatEngine, ChatRequest, EngineError, SamplingParams
from app.engine.planned_load import load_as_planned
from app.engine.remote import Endpoint, RemoteEngine
from app.machine.snapshot import Machine


@dataclass(frozen=True)
class EngineSpec:
    label: str
    path: str | None = None  # a local GGUF
    endpoint: Endpoint | None = None  # or a remote server
    n_ctx: int | None = None

    @property
    def kind(self) -> str:
        return "remote" if self.endpoint else "local"


@dataclass
class Side:
    label: str
    kind: str
    model: str = ""
    answer: str = ""
    reasoning: str = ""
    generated_tokens: int = 0
    tps: float = 0.0
    ttft: float = 0.0
    seconds: float = 0.0
    error: str = ""
    results: list[Result] = field(default_factory=list)  # scenario mode


def open_engine(spec: EngineSpec, machine: Machine, reproducible: bool = False) -> tuple[ChatEngine, str]:
    """A loaded engine for the spec (local ones as planned, and tuned, for this machine) and its plan
    in words ("" for an endpoint); `reproducible`: loaded for reproducible replies (nothing drafts, a
    prompt read in steps of its own), the same tokens for the same request whatever came before."""
    if spec.endpoint is not None:
        remote = RemoteEngine(spec.endpoint)
        remote.load()
        return remote, ""
    from app.engine.local import Engine  # numpy and llama.cpp: the window's Engines page imports this module at start
    from app.model.plan import PlanRequest, plan_for_file

    if spec.path is None:
        raise ValueError(f"{spec.label}: neither a model file nor an endpoint")
    planned = plan_for_file(spec.path, machine.refreshed(), PlanRequest(n_ctx=spec.n_ctx, reproducible=reproducible))
    engine = Engine()
    load_as_planned(engine, spec.path, planned)
    return engine, planned.plan.reason + (f" ({planned.tuned})" if planned.tuned else "")


def compare(specs: list[EngineSpec], *, messages: list[dict[str, Any]] | None = None,
            scenarios: list[Scenario] | None = None, sampling: SamplingParams | None = None,
            enable_thinking: bool = True, progress: Callable[[str], None] | None = None,
            should_stop: Callable[[], bool] | None = None, machine: Machine | None = None) -> list[Side]:
    """Run each engine in turn; local files are planned against `machine` (read here when not given)."""
    if (messages is None) == (scenarios is None):
        raise ValueError("compare a prompt or the scenario suite")
    machine = machine or Machine.read()
    sides = []
    for spec in specs:
        side = Side(spec.label, spec.kind)
        sides.append(side)
        if should_stop is not None and should_stop():
            side.error = "stopped"
            continue
        if progress:
            progress(f"loading {spec.label}")
        start = time.perf_counter()
        try:
            engine, _plan = open_engine(spec, machine)
        except (EngineError, OSError, ValueError) as exc:
            side.error = str(exc)
            continue
        try:
            side.model = engine.info.name if engine.info else spec.label
            if progress:
                progress(f"running {spec.label}")
            if messages is not None:
                reply = engine.generate(ChatRequest(messages, enable_thinking=enable_thinking,
                                                    sampling=sampling or SamplingParams()), should_stop=should_stop)
                s = reply.stats
                side.answer, side.reasoning = reply.text, reply.reasoning
                side.generated_tokens, side.tps, side.ttft = s.generated_tokens, s.generation_tps, s.ttft_seconds
            else:
                side.results = run_all(engine, scenarios, should_stop=should_stop)
                done = [r for r in side.results if r.generated_tokens]
                side.tps = sum(r.generation_tps for r in done) / len(done) if done else 0.0
                side.ttft = sum(r.ttft_seconds for r in done) / len(done) if done else 0.0
        except EngineError as exc:
            side.error = str(exc)
        finally:
            engine.unload()  # before the next one loads: one GPU, one model at a time
        side.seconds = time.perf_counter() - start
    return sides


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def to_markdown(sides: list[Side], title: str, prompt: str = "") -> str:
    out = [f"# {title}", ""]
    if prompt:
        out += [f"**Prompt:** {_cell(prompt)[:500]}", ""]
    out += ["| | " + " | ".join(_cell(s.label) for s in sides) + " |",
            "|---|" + "---|" * len(sides)]
    out.append("| engine | " + " | ".join(f"{s.kind}: {_cell(s.model) or '?'}" for s in sides) + " |")
    out.append("| tokens/s | " + " | ".join(f"{s.tps:.1f}" + (" (stream)" if s.kind == "remote" else "")
                                            for s in sides) + " |")
    out.append("| first token | " + " | ".join(f"{s.ttft:.2f} s" for s in sides) + " |")
    if any(s.results for s in sides):
        names = [r.title for r in next(s for s in sides if s.results).results]
        for i, name in enumerate(names):
            row = []
            for s in sides:
                r = s.results[i] if i < len(s.results) else None
                row.append(f"{'PASS' if r.passed else 'fail'} ({r.seconds:.1f} s): {_cell(r.detail)}" if r else "-")
            out.append(f"| {_cell(name)} | " + " | ".join(row) + " |")
        out.append("| passed | " + " | ".join(f"{sum(r.passed for r in s.results)} of {len(s.results)}"
                                              for s in sides) + " |")
    else:
        out.append("| tokens | " + " | ".join(str(s.generated_tokens) for s in sides) + " |")
    if any(s.error for s in sides):
        out.append("| error | " + " | ".join(_cell(s.error) or "-" for s in sides) + " |")
    for s in sides:
        if s.answer:
            out += ["", f"## {s.label}", "", s.answer]
    return "\n".join(out) + "\n"


def save_markdown(text: str, folder: Path | None = None) -> Path:
    folder = folder or app_dirs().data / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"compare-{time.strftime('%Y%m%d-%H%M%S')}.md"
    path.write_text(text, encoding="utf-8")
    return path
