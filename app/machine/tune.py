"""Tune: the fastest settings that fit, found by measuring on this machine. No Qt.

The planner decides what fits by arithmetic; how fast a setting runs depends on this CPU, this GPU and
this build, so it is measured: short runs over the settings that matter (threads, experts in RAM,
flash attention, the KV cache type, n_ubatch, drafting), within the memory the plan allows, reading
llama.cpp's own counters. The result is kept per model, GPU and build and applied to later loads
(`apply_cached`).

What is tried, in what order, and how a winner is chosen: docs/architecture/memory-plan.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.base.paths import app_dirs
from app.machine.llama_load import LoadSettings, default_threads

if TYPE_CHECKING:
    from app.machine.gpu import GpuProbe
    from app.machine.llama_backend import LlamaBuild

GOALS = ("fastest", "longest-context", "balanced")
GEN_TOKENS = 48  # per measurement at least, timed by llama.cpp's own counters (the time inside its decodes)
GEN_SECONDS = 0.5  # and at least this long: 48 tokens of a fast model take 0.2 s, too short to measure
PROMPT_TOKENS = 512
UBATCHES = (256, 512, 1024, 2048)

Report = Callable[[str, float | None, str], None]


class Replies(Protocol):
    """SPEC_REQUEST's reply generated through the engine, loaded with the given settings."""

    def __call__(self, settings: LoadSettings) -> SpecRun: ...

    def close(self) -> None: ...


class TuneCancelled(Exception):
    pass


@dataclass
class SpecRun:
    """One reply generated through the engine with speculative decoding set to `speculative`."""

    speculative: str  # "auto", "mtp", "ngram" or "off"
    tps: float = 0.0  # tokens per second of output (first to last token, as the chat shows it)
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    error: str | None = None


@dataclass
class Trial:
    settings: dict[str, Any]  # what differs from LoadSettings' defaults: threads, n_ubatch, flash_attn, ...
    gen_tps: float = 0.0
    prompt_tps: float = 0.0
    error: str | None = None
    repeat: bool = False  # a second measurement of a leading setting

    def label(self) -> str:
        s = self.settings
        parts = [f"{s['n_threads']} thr", f"ub {s['n_ubatch']}", "FA" if s["flash_attn"] else "no FA",
                 f"KV {s['type_k']}"]
        if s.get("n_cpu_moe"):
            parts.append(f"{s['n_cpu_moe']} blk in RAM")
        return " · ".join(parts)


@dataclass
class TuneResult:
    key: str
    model: str
    goal: str
    trials: list[Trial] = field(default_factory=list)
    best: dict[str, Any] | None = None
    baseline_tps: float = 0.0  # llama-cpp-python's own defaults (half the logical CPUs), for the ratio
    baseline: dict[str, Any] | None = None  # those default settings, as the trials name them
    seconds: float = 0.0
    speculative: str = ""  # the speculative decoding setting measured faster ("": not measured)
    spec_runs: list[SpecRun] = field(default_factory=list)  # its runs on and off, in turns

    def spec_tps(self, speculative: str) -> tuple[float, int]:
        """A speculative setting's mean tok/s over its runs, and how many runs that is."""
        values = [r.tps for r in self.spec_runs if r.error is None and r.speculative == speculative]
        return (sum(values) / len(values), len(values)) if values else (0.0, 0)

    def best_trial(self) -> Trial | None:
        ok = [t for t in self.trials if t.error is None and t.settings == self.best]
        return max(ok, key=lambda t: t.gen_tps) if ok else None

    def mean_tps(self, settings: dict[str, Any] | None) -> tuple[float, int]:
        """A setting's generation tok/s as the mean of its runs (not its luckiest), and how many runs
        that is; (0.0, 0) for a setting never measured."""
        values = [t.gen_tps for t in self.trials if t.error is None and t.settings == settings]
        return (sum(values) / len(values), len(values)) if values else (0.0, 0)

    def chosen_tps(self) -> tuple[float, int]:
        return self.mean_tps(self.best)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> TuneResult:
        data = json.loads(text)
        data["trials"] = [Trial(**t) for t in data["trials"]]
        data["spec_runs"] = [SpecRun(**r) for r in data.get("spec_runs", [])]
        return cls(**data)


def _settings_dict(s: LoadSettings) -> dict[str, Any]:
    return {"n_threads": s.n_threads, "n_ubatch": s.n_ubatch, "flash_attn": s.flash_attn, "type_k": s.type_k,
            "n_cpu_moe": len(s.cpu_moe_blocks)}


def model_identity(path: str | Path) -> str:
    """What identifies a model file cheaply: name, size and modification time."""
    st = Path(path).stat()
    return f"{Path(path).name}:{st.st_size}:{int(st.st_mtime)}"


def cache_key(path: str | Path, gpu: str, build: str) -> str:
    return hashlib.sha256(f"{model_identity(path)}|{gpu}|{build}".encode()).hexdigest()[:24]


def cache_path(key: str) -> Path:
    return app_dirs().cache / "tune" / f"{key}.json"


def load_cached(key: str) -> TuneResult | None:
    try:
        return TuneResult.from_json(cache_path(key).read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save(result: TuneResult) -> Path:
    path = cache_path(result.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(result.to_json())
    os.replace(tmp, path)
    return path


def apply(settings: LoadSettings, best: dict[str, Any], expert_blocks: list[int]) -> LoadSettings:
    """A plan's settings with a tuned result applied (never fewer experts in RAM than planned)."""
    n_cpu_moe = max(best.get("n_cpu_moe", 0), len(settings.cpu_moe_blocks))
    kv = best.get("type_k", settings.type_k)
    return replace(settings, n_threads=best.get("n_threads") or settings.n_threads,
                   n_threads_batch=best.get("n_threads") or settings.n_threads_batch,
                   n_ubatch=best.get("n_ubatch", settings.n_ubatch), n_batch=max(settings.n_batch,
                                                                                  best.get("n_ubatch", 0)),
                   flash_attn=best.get("flash_attn", settings.flash_attn), type_k=kv, type_v=kv,
                   cpu_moe_blocks=tuple(expert_blocks[:n_cpu_moe]))


def apply_cached(path: str | Path, settings: LoadSettings, expert_blocks: list[int], gpu: str,
                 build: str) -> tuple[LoadSettings, TuneResult | None]:
    cached = load_cached(cache_key(path, gpu, build))
    if cached is None or not cached.best:
        return settings, None
    tuned = apply(settings, cached.best, expert_blocks)
    if cached.speculative:  # measured on and off with these settings: the faster one
        tuned = replace(tuned, speculative=cached.speculative)
    return tuned, cached


# ----------------------------------------------------------------------------- measuring


NOISE = 0.03  # run-to-run spread of one short measurement on a busy desktop
SPEC_TOKENS = 128  # the reply generated per speculative measurement (greedy: the same text on and off)
SPEC_SHARE = 0.15  # of the budget, kept for the speculative check (the sweep stops earlier to leave it)
SPEC_SNIPPET = """def load_settings(path, defaults):
    settings = dict(defaults)
    errors = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                errors.append(f"line {number}: expected key = value")
                continue
            key, _, value = line.partition("=")
            key = key.strip().lower()
            value = value.strip()
            if key not in settings:
                errors.append(f"line {number}: unknown key {key}")
                continue
            if isinstance(settings[key], bool):
                settings[key] = value.lower() in ("1", "true", "yes", "on")
            elif isinstance(settings[key], int):
                try:
                    settings[key] = int(value)
                except ValueError:
                    errors.append(f"line {number}: {key} must be a number")
            else:
                settings[key] = value
    if errors:
        raise ValueError("; ".join(errors))
    return settings"""
# agent-like work that repeats itself: tests/bench/speculative.py's copy-heavy request, a 30-line function
# rewritten (SmolLM2 shortens a shorter one to a few lines: nothing to measure), where drafting pays if
# it ever does; "off" wins only where it cannot pay here
SPEC_REQUEST = ("Rewrite this function with the variable `settings` renamed to `options`. Output only the code.\n\n"
                f"```python\n{SPEC_SNIPPET}\n```")


def _candidates(knob: str, current: dict[str, Any], plan_min_moe: int, n_expert_blocks: int,
                logical: int, on_gpu: bool) -> list[Any]:
    if knob == "n_threads":
        base = default_threads().generation
        return sorted({t for t in (base - 2, base - 1, base, base + 1, base + 2) if 1 <= t <= max(logical, 1)})
    if knob == "n_cpu_moe":
        if not on_gpu or plan_min_moe == 0:
            return [current["n_cpu_moe"]]
        return list(range(plan_min_moe, min(plan_min_moe + 4, n_expert_blocks) + 1))
    # llama.cpp refuses a quantized V cache without flash attention ("quantized V cache was requested,
    # but this requires Flash Attention"): that pair is never a candidate, not a failed trial
    if knob == "flash_attn":
        return [True, False] if current["type_k"] == "f16" else [True]
    if knob == "type_k":
        return ["f16", "q8_0"] if current["flash_attn"] else ["f16"]
    if knob == "n_ubatch":
        return list(UBATCHES)
    raise ValueError(knob)


class Measurer:
    """Loads a model with given settings (reusing the load when only threads change) and measures."""

    def __init__(self, path: str | Path, n_ctx: int) -> None:
        self.path, self.n_ctx = str(path), n_ctx
        self._llm: Any = None  # llama_cpp.Llama
        self._loaded: dict[str, Any] | None = None

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close()
            self._llm, self._loaded = None, None

    def measure(self, settings: LoadSettings) -> tuple[float, float]:
        """(generation tok/s, prompt tok/s) from llama.cpp's counters, decoded on a thread that ends
        with the measurement (`llama_backend.on_a_thread_of_its_own`: no pool of this thread's is left
        to slow an engine's decodes later in the process)."""
        from app.machine.llama_backend import on_a_thread_of_its_own

        return on_a_thread_of_its_own(lambda: self._measure(settings))

    def _measure(self, settings: LoadSettings) -> tuple[float, float]:
        from app.machine.llama_backend import llama
        from app.machine.llama_load import load_llama

        lc = llama()
        shape = {k: v for k, v in _settings_dict(settings).items() if k != "n_threads"}
        if self._loaded != shape:
            self.close()
            self._llm = load_llama(self.path, replace(settings, n_ctx=self.n_ctx, n_batch=max(settings.n_ubatch, 512),
                                                      n_outputs_max=1))
            self._loaded = shape
        llm = self._llm
        lc.llama_set_n_threads(llm.ctx, settings.n_threads or 1, settings.n_threads or 1)
        n_vocab = llm.n_vocab()
        prompt = [(1000 + 7 * i) % n_vocab for i in range(min(PROMPT_TOKENS, self.n_ctx // 2))]
        ctx = llm.ctx
        llm.reset()
        lc.llama_perf_context_reset(ctx)
        started = time.perf_counter()
        llm.eval(prompt)  # one batch of n_ubatch-sized pieces: the prompt speed
        lc.llama_synchronize(ctx)  # llama.cpp adds a decode to its counters when it synchronizes
        wall = time.perf_counter() - started
        perf = lc.llama_perf_context(ctx)
        prompt_tps = _rate(perf.n_p_eval, perf.t_p_eval_ms, len(prompt), wall)
        llm.reset()
        llm.eval(prompt[:16])
        token = prompt[16]
        for _ in range(4):  # warm-up
            llm.eval([token])
        lc.llama_synchronize(ctx)
        room = max(1, llm.n_ctx() - 24)
        lc.llama_perf_context_reset(ctx)
        started = time.perf_counter()
        n = 0
        while n < room and (n < GEN_TOKENS or time.perf_counter() - started < GEN_SECONDS):
            llm.eval([(token + n) % n_vocab])  # one token at a time: the generation speed
            lc.llama_synchronize(ctx)  # each token its own entry in the counters (else they pile up as one batch)
            n += 1
        wall = time.perf_counter() - started
        perf = lc.llama_perf_context(ctx)
        return _rate(perf.n_eval, perf.t_eval_ms, n, wall), prompt_tps


def _first_line(exc: BaseException) -> str:
    """A failed trial's or run's error, as the table shows it: its first line, or its type."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _rate(n_counted: int, ms: float, n: int, wall: float) -> float:
    """Tokens per second from llama.cpp's own counters (time inside its decodes), or from the wall
    clock if the counters are off (a context made with no_perf) or did not count these tokens."""
    if n_counted == n and ms > 0:
        return n_counted / (ms / 1000.0)
    return n / wall


def tune(path: str | Path, plan_settings: LoadSettings, *, expert_blocks: list[int], on_gpu: bool, gpu: str,
         build: str, goal: str = "fastest", budget_s: float = 120.0, report: Report | None = None,
         cancel: Callable[[], bool] | None = None, measurer: Measurer | None = None,
         n_ctx: int = 2048, replies: Replies | None = None,
         on_trial: Callable[[Trial, dict[str, Any] | None], None] | None = None) -> TuneResult:
    """Measure settings around the plan's and keep the fastest (see the module's docstring). `replies`
    generates SPEC_REQUEST's reply through the engine (app.engine.tune_replies.EngineReplies: the
    engine sits above this layer); without it, speculative decoding is not measured. `on_trial` gets
    each trial as it is measured, with the default settings (copies: the window draws them while the
    sweep goes on)."""
    if goal not in GOALS:
        raise ValueError(f"goal must be one of {', '.join(GOALS)}")
    report = report or (lambda step, fraction, text: None)
    started = time.monotonic()
    key = cache_key(path, gpu, build)
    result = TuneResult(key, Path(path).name, goal)
    measurer = measurer or Measurer(path, n_ctx)
    logical = os.cpu_count() or 1
    plan_min = len(plan_settings.cpu_moe_blocks)
    current = _settings_dict(replace(plan_settings, n_threads=plan_settings.n_threads or default_threads().generation))
    knobs = ["n_threads", "n_cpu_moe", "flash_attn", "type_k", "n_ubatch"]
    if goal == "longest-context":
        knobs.remove("type_k")  # the plan's KV type already serves the longest context
    plan: list[tuple[str, Any]] = [(k, v) for k in knobs
                                   for v in _candidates(k, current, plan_min, len(expert_blocks), logical, on_gpu)]
    untuned = dict(current)  # what a load without a tune result uses
    # speculative decoding measured through the engine, when this measurer can generate text and the
    # settings can draft at all (drafts allowed: every slot drafts)
    generate = replies if plan_settings.draft_max > 0 else None
    sweep_s = budget_s * (1 - SPEC_SHARE) if generate is not None else budget_s
    total = len(plan) + 2 + FINAL_ROUNDS * 3 + (len(SPEC_ORDER) if generate is not None else 0)
    tried: dict[str, Trial] = {}

    def run(settings: dict[str, Any], repeat: bool = False) -> Trial:
        if cancel is not None and cancel():
            raise TuneCancelled("cancelled")
        name = json.dumps(settings, sort_keys=True)
        if name in tried and not repeat:
            return tried[name]
        trial = Trial(dict(settings), repeat=repeat)
        try:
            trial.gen_tps, trial.prompt_tps = measurer.measure(apply(plan_settings, settings, expert_blocks))
        except Exception as exc:  # a setting that does not load (memory) is a result, not a failure
            trial.error = _first_line(exc)
        result.trials.append(trial)
        tried.setdefault(name, trial)
        done = len(result.trials)
        if on_trial is not None:
            on_trial(replace(trial, settings=dict(trial.settings)), dict(result.baseline or {}) or None)
        report("tune", min(done / total, 1.0), f"{trial.label()}: " + (
            f"{trial.gen_tps:.1f} tok/s, prompt {trial.prompt_tps:.0f} tok/s" if trial.error is None
            else f"failed: {trial.error}"))
        return trial

    def score(t: Trial, knob: str) -> float:
        if t.error is not None:
            return -1.0
        return t.prompt_tps if knob == "n_ubatch" else t.gen_tps

    try:
        # one run thrown away first: the first load and decode pay for cold caches and page faults,
        # which would make whatever is measured first (the baseline) look slower than it is
        try:
            measurer.measure(apply(plan_settings, current, expert_blocks))
        except Exception:  # noqa: BLE001 - the plan's own setting failing is reported by its trial below
            pass
        baseline = dict(current, n_threads=max(1, logical // 2))  # llama-cpp-python's default threads
        result.baseline = dict(baseline)
        result.baseline_tps = run(baseline).gen_tps
        for knob in knobs:
            if time.monotonic() - started > sweep_s:
                break
            options = _candidates(knob, current, plan_min, len(expert_blocks), logical, on_gpu)
            trials = [run(dict(current, **{knob: v})) for v in options]
            best = max(trials, key=lambda t: score(t, knob))
            mine = next((t for t in trials if t.settings == current and t.error is None), None)
            # a knob moves off the current value only for a gain beyond the noise of one run
            if best.error is None and (mine is None or score(best, knob) > score(mine, knob) * (1 + NOISE)):
                if knob == "n_ubatch":  # of the micro-batches as fast as the best within noise, the
                    # smallest: its compute buffer is the smallest (memory the plan fights for)
                    best = min((t for t in trials if t.error is None
                                and score(t, knob) >= score(best, knob) * (1 - NOISE)),
                               key=lambda t: t.settings["n_ubatch"])
                current = dict(best.settings)
        # the leading two again: noise must not pick the winner
        finals = sorted((t for t in result.trials if t.error is None), key=lambda t: -t.gen_tps)
        seen = []
        for t in finals:
            if t.settings not in seen:
                seen.append(t.settings)
            if len(seen) == 2:
                break
        again = [run(s, repeat=True) for s in seen]

        def mean_tps(s: dict[str, Any]) -> float:
            return result.mean_tps(s)[0]

        chosen = current
        if again:
            # prompt-size settings (n_ubatch) were chosen for prompt speed; keep them on the winner,
            # and measure that combination if the sweep never ran it: the result names only settings
            # that were measured to load and run
            winner = max(seen, key=mean_tps)
            if mean_tps(current) > 0 and mean_tps(winner) <= mean_tps(current) * (1 + NOISE):
                winner = current  # the sweep's choice stays unless beaten beyond the noise
            chosen = dict(winner, n_ubatch=current["n_ubatch"])
            if not any(t.settings == chosen and t.error is None for t in result.trials):
                if run(chosen).error is not None:
                    chosen = winner
        result.best = final_check(chosen, [untuned, baseline], run)
        result.baseline_tps = result.mean_tps(baseline)[0]  # every run of it, as the chosen speed quoted
        if generate is not None and result.best_trial() is not None:
            chosen_settings = apply(plan_settings, result.best, expert_blocks)

            def spec_run(speculative: str) -> SpecRun:
                if cancel is not None and cancel():
                    raise TuneCancelled("cancelled")
                assert generate is not None
                try:
                    run_ = generate(replace(chosen_settings, speculative=speculative))
                except Exception as exc:  # a setting that does not load (the MTP head's memory) is a result
                    run_ = SpecRun(speculative, error=_first_line(exc))
                result.spec_runs.append(run_)
                report("tune", min((len(result.trials) + len(result.spec_runs)) / total, 1.0),
                       f"speculative {speculative}: " + (
                           f"{run_.tps:.1f} tok/s, drafted {run_.drafted}, accepted {run_.accepted}"
                           if run_.error is None else f"failed: {run_.error}"))
                return run_

            on = plan_settings.speculative if plan_settings.speculative != "off" else "auto"
            measurer.close()  # one copy of the model at a time
            result.speculative = speculative_check(on, spec_run, result)
    finally:
        measurer.close()
        if replies is not None:
            replies.close()
    result.seconds = time.monotonic() - started
    save(result)
    return result


FINAL_ROUNDS = 2  # interleaved runs of the choice and the untuned defaults at the end
SPEC_ORDER = ("on", "off", "off", "on")  # speculative on and off in turns (ABBA: drift cancels out)


def speculative_check(on: str, spec_run: Callable[[str], SpecRun], result: TuneResult) -> str:
    """Speculative decoding `on` (the plan's setting, auto by default) and "off", measured in turns on the
    same short reply; `on` stays unless "off" is faster beyond the noise (drafting that accepts nothing
    must not cost: issue 25's 3 %), or `on` does not load or run at all. Returns the setting kept."""
    for side in SPEC_ORDER:
        spec_run(on if side == "on" else "off")
    on_tps, on_runs = result.spec_tps(on)
    off_tps, off_runs = result.spec_tps("off")
    if on_runs == 0:
        return "off" if off_runs else ""
    return "off" if off_runs and off_tps > on_tps * (1 + NOISE) else on


def final_check(chosen: dict[str, Any], defaults: list[dict[str, Any]], run: Callable[..., Trial],
                ) -> dict[str, Any]:
    """Measure the choice against the untuned defaults (the plan's own settings, and llama-cpp-python's
    default threads; both with the chosen micro-batch, picked for prompt speed), in turns, FINAL_ROUNDS
    times, and keep the choice only where it beats the faster default beyond the noise; otherwise that
    default. The sweep's own runs are not counted here: the
    choice is the luckiest of many, and machines drift (another program, the CPU's clock) while it
    runs, so only runs made side by side decide. A tuned result is never one measured slower than
    the settings it replaces."""
    # the micro-batch was chosen for prompt speed (it does not change generation): it stays as chosen
    defaults = [dict(d, n_ubatch=chosen["n_ubatch"]) for d in defaults]
    others = [d for i, d in enumerate(defaults) if d != chosen and d not in defaults[:i]]
    if not others:
        return chosen
    runs: dict[str, list[float]] = {}
    order = [chosen, *others]
    for _ in range(FINAL_ROUNDS):
        for settings in order:
            trial = run(settings, repeat=True)
            runs.setdefault(json.dumps(settings, sort_keys=True), []).append(
                trial.gen_tps if trial.error is None else 0.0)

    def mean(settings: dict[str, Any]) -> float:
        values = runs[json.dumps(settings, sort_keys=True)]
        return sum(values) / len(values)

    fastest_default = max(others, key=mean)
    return chosen if mean(chosen) > mean(fastest_default) * (1 + NOISE) else fastest_default


def machine_identity(gpus: GpuProbe, build: LlamaBuild) -> tuple[str, str]:
    """(GPU, build) strings a tune result is kept for: another card or another llama.cpp measures again."""
    gpu = ", ".join(f"{g.name} {g.total_gib:.0f}G" for g in gpus.gpus) if gpus.has_gpu else "cpu"
    variant = build.load.cpu_variant if build is not None and build.load is not None else ""
    backends = ",".join(build.backends) if build is not None else "?"
    version = build.version if build is not None else "?"
    return gpu, f"{version}/{backends}/{variant}"


def table(result: TuneResult) -> str:
    """The sweep as text: one row per trial, the chosen setting marked."""
    lines = [f"{'':2}{'setting':<52} {'tok/s':>8} {'prompt tok/s':>13}"]
    for t in result.trials:
        mark = "★ " if t.settings == result.best and t.error is None else "  "
        value = f"{t.gen_tps:8.1f} {t.prompt_tps:13.0f}" if t.error is None else f"  failed: {t.error}"
        lines.append(f"{mark}{t.label() + (' (again)' if t.repeat else ''):<52} {value}")
    best = result.best_trial()
    tps, runs = result.chosen_tps()
    if best is not None and result.baseline_tps:
        lines.append(f"chosen: {best.label()}: {tps:.1f} tok/s (mean of {runs} run{'s' if runs > 1 else ''}), "
                     f"{tps / result.baseline_tps:.2f}x llama-cpp-python's default threads "
                     f"({result.baseline_tps:.1f} tok/s); {result.seconds:.0f} s")
    if result.spec_runs:
        sides = []
        for spec in dict.fromkeys(r.speculative for r in result.spec_runs):
            tps, runs = result.spec_tps(spec)
            drafted = sum(r.drafted for r in result.spec_runs if r.speculative == spec and r.error is None)
            accepted = sum(r.accepted for r in result.spec_runs if r.speculative == spec and r.error is None)
            sides.append(f"{spec} {tps:.1f} tok/s" + (f" (drafted {drafted}, accepted {accepted})" if drafted else "")
                         if runs else f"{spec} failed")
        lines.append(f"speculative decoding, a {SPEC_TOKENS}-token code rewrite, mean of {len(SPEC_ORDER) // 2} "
                     f"runs each: {', '.join(sides)}: " + (f"keeps {result.speculative}" if result.speculative
                                                            else "nothing kept"))
    return "\n".join(lines)


@dataclass
class ChartRow:
    """One setting tried, as the tune chart draws it: every run's tok/s (a repeat is a second run)."""

    settings: dict[str, Any]
    label: str
    runs: list[float] = field(default_factory=list)
    failed: str | None = None  # why it did not load or run, when no run of it did
    chosen: bool = False
    default: bool = False  # llama-cpp-python's default threads: the line the others are read against

    @property
    def tps(self) -> float:
        return sum(self.runs) / len(self.runs) if self.runs else 0.0


def chart_rows(trials: list[Trial], baseline: dict[str, Any] | None, best: dict[str, Any] | None) -> list[ChartRow]:
    """The trials grouped by setting, in the order first tried: the mean of its runs is its bar (the
    choice is made on means, never on the luckiest run)."""
    rows: dict[str, ChartRow] = {}
    for t in trials:
        name = json.dumps(t.settings, sort_keys=True)
        row = rows.get(name)
        if row is None:
            row = rows[name] = ChartRow(dict(t.settings), t.label(), chosen=t.settings == best,
                                        default=t.settings == baseline)
        if t.error is None:
            row.runs.append(t.gen_tps)
            row.failed = None
        elif not row.runs:
            row.failed = t.error
    return list(rows.values())


def default_tps(rows: list[ChartRow]) -> float:
    """The default setting's tok/s (0.0 before it is measured)."""
    return next((r.tps for r in rows if r.default and r.runs), 0.0)
