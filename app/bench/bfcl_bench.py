"""The BFCL bench as one job, for the command line and the Scenarios place alike: the dataset found
or fetched, the cases chosen, each engine run with thinking on and/or off, every run kept. No Qt.

Engines run one after the other, each unloaded before the next loads (one GPU, one model at a time),
as compare mode does; an engine already loaded (the window's) is run as it is. A file the bench loads
itself is loaded for reproducible replies (the window's setting, on by default there): nothing
drafts and a prompt is read in steps of its own, so a run repeated gives the same replies, token for
token, whatever the prompt cache held (drafting's verify batches round near-ties otherwise).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from app import __version__
from app.bench.bfcl_cases import CATEGORIES, Case, load_cases
from app.bench.bfcl_run import CaseRecord, choose_mode, default_max_tokens, run_cases
from app.bench.bfcl_store import Run, RunInfo, RunWriter
from app.bench.compare import EngineSpec, open_engine
from app.engine.contract import ChatEngine, EngineError, SamplingParams
from app.fetch.bfcl_dataset import ensure_dataset, source
from app.machine.snapshot import Machine


@dataclass(frozen=True)
class BenchOptions:
    quick: bool = True
    categories: tuple[str, ...] = CATEGORIES
    mode: str = "auto"  # "auto", "fc" or "prompt"
    max_tokens: int | None = None  # None: default_max_tokens(thinking)
    data: Path | None = None  # a BFCL data folder to use instead of the kept one


@dataclass(frozen=True)
class Step:
    """Where a bench is, for a progress bar: the run (of how many), its cases done, and time left."""

    run: int
    runs: int
    title: str
    done: int
    total: int
    record: CaseRecord | None  # the case just judged (None: a run starts)
    eta_seconds: float | None


def device_words(machine: Machine, engine: ChatEngine) -> str:
    if engine.kind == "remote":
        return "an endpoint (its own hardware)"
    if machine.gpus.has_gpu:
        return "; ".join(f"{g.name}" for g in machine.gpus.gpus)
    from app.machine.cpu_probe import cpu_identity

    return "CPU: " + cpu_identity().rsplit(" [", 1)[0]


def time_left(spent: float, done: int, total: int, run: int, runs: int) -> float | None:
    """Seconds left in this run and the runs after it, at this run's pace so far (None before a case)."""
    if not done:
        return None
    per_case = spent / done
    return per_case * (total - done) + per_case * total * (runs - run - 1)


def left_words(seconds: float | None) -> str:
    if seconds is None:
        return "time left: after the first case"
    if seconds < 60:
        return "under a minute left"
    if seconds < 3600:
        return f"about {round(seconds / 60)} min left"
    return f"about {seconds / 3600:.1f} h left"


def has_thinking(engine: ChatEngine) -> bool:
    """Whether thinking on differs from off: a local template without the switch thinks neither way (its
    run with thinking "on" would be the same run again, given a reasoning model's token limit)."""
    info = engine.info
    return engine.kind == "remote" or info is None or info.thinking_switch


def cases_for(options: BenchOptions) -> list[Case]:
    folder = options.data or ensure_dataset()
    return load_cases(folder, options.categories, quick=options.quick)


def bench_engine(engine: ChatEngine, cases: list[Case], *, label: str, source_text: str, plan: str, thinking: bool,
                 options: BenchOptions, machine: Machine, folder: Path | None = None,
                 progress: Callable[[int, int, CaseRecord], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> Run:
    """One run of `cases` on a loaded engine, kept as it goes."""
    mode = choose_mode(engine, options.mode)
    thinking = thinking and has_thinking(engine)
    max_tokens = options.max_tokens or default_max_tokens(thinking)
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=0)
    info = engine.info
    settings = asdict(info.settings) if info is not None and engine.kind != "remote" else {}
    run_info = RunInfo(label=label, model=info.name if info else label, source=source_text, kind=engine.kind,
                       thinking=thinking, mode=mode, quick=options.quick, categories=list(options.categories),
                       planned_cases=len(cases), dataset=source().label, device=device_words(machine, engine),
                       plan=plan, settings=settings, max_tokens=max_tokens, temperature=0.0, app_version=__version__)
    writer = RunWriter(run_info, folder)
    records: list[CaseRecord] = []
    stopped = False
    try:
        records = run_cases(engine, cases, mode=mode, thinking=thinking, sampling=sampling, on_record=writer.add,
                            progress=progress, should_stop=should_stop)
        stopped = should_stop is not None and should_stop()
    finally:
        writer.close(stopped=stopped or len(records) < len(cases))
    return Run(run_info, records, writer.path, {"stopped": stopped})


def bench_specs(specs: list[EngineSpec], thinking: tuple[bool, ...], options: BenchOptions, *,
                machine: Machine | None = None, folder: Path | None = None,
                progress: Callable[[Step], None] | None = None, should_stop: Callable[[], bool] | None = None,
                on_error: Callable[[str, str], None] | None = None) -> list[Run]:
    """Each engine with each thinking setting: the runs, side by side. An engine that cannot be opened
    is reported through `on_error(label, words)` and the others still run."""
    machine = machine or Machine.read()
    cases = cases_for(options)
    runs: list[Run] = []
    n_runs = len(specs) * len(thinking)
    index = 0
    for spec in specs:
        if should_stop is not None and should_stop():
            break
        try:
            engine, plan = open_engine(spec, machine, reproducible=True)  # a run repeated is the same run
        except (EngineError, OSError, ValueError) as exc:
            if on_error is not None:
                on_error(spec.label, str(exc))
            index += len(thinking)
            continue
        try:
            settings = list(dict.fromkeys(think and has_thinking(engine) for think in thinking))
            n_runs -= len(thinking) - len(settings)  # one run where on and off are the same
            for think in settings:
                if should_stop is not None and should_stop():
                    break
                title = f"{spec.label}, {'thinking' if think else 'no thinking'}"
                started = time.monotonic()
                run_no = index

                def report(done: int, total: int, record: CaseRecord, run_no: int = run_no, title: str = title,
                           started: float = started, n_runs: int = n_runs) -> None:
                    if progress is None:
                        return
                    eta = time_left(time.monotonic() - started, done, total, run_no, n_runs)
                    progress(Step(run_no, n_runs, title, done, total, record, eta))

                if progress is not None:
                    progress(Step(run_no, n_runs, title, 0, len(cases), None, None))
                source_text = spec.path or (spec.endpoint.url if spec.endpoint else "")
                runs.append(bench_engine(engine, cases, label=spec.label, source_text=source_text, plan=plan,
                                         thinking=think, options=options, machine=machine, folder=folder,
                                         progress=report, should_stop=should_stop))
                index += 1
        finally:
            engine.unload()
    return runs
