"""Running BFCL's cases on an engine, the way an agent's request goes, and scoring them as BFCL
does. No Qt.

Each case is one request: the case's messages, its tools in the OpenAI format (BFCL's conversion),
the model's chat template, the app's tool-call parser; the calls parsed from the reply are BFCL's
decoded output and its checker gives the verdict (app/bench/bfcl_checker.py). A model whose
template cannot be given tools runs in BFCL's prompt mode instead (app/bench/bfcl_prompting.py), as
the leaderboard runs its "(Prompt)" models; the run says which mode it used. The same code runs on
the local engine and on any OpenAI-compatible endpoint (app/engine/remote.py).

Greedy sampling (temperature 0; BFCL's default is 0.001), so a run can be repeated. A case the
engine could not answer (a prompt longer than the context, a dropped connection) is wrong in every
category, with the engine's words as its reason (BFCL would count it right in the irrelevance ones).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from app.bench.bfcl_cases import IRRELEVANCE, LIVE, NON_LIVE, RELEVANCE, Case, with_python_hint
from app.bench.bfcl_checker import Verdict, check_case
from app.bench.bfcl_prompting import DecodeError, decode, with_system_prompt
from app.engine.contract import ChatEngine, ChatRequest, EngineError, Reply, SamplingParams
from app.engine.tool_calls import ToolCall

MODES = ("auto", "fc", "prompt")
# a call the parser could not read at all (no name, arguments that are not JSON): BFCL's decoder fails too
_UNREADABLE = ("not valid JSON", "arguments are not valid JSON", "arguments must be a JSON object",
               "a tool call needs", "no <function=NAME>")


def default_max_tokens(thinking: bool) -> int:
    """Room for a reasoning model to think before it calls; a call alone needs far less (BFCL's longest
    acceptable answer is about 420 tokens: a reply past 512 without thinking is rambling)."""
    return 8192 if thinking else 512


def choose_mode(engine: ChatEngine, wanted: str = "auto") -> str:
    """FC where the model's template reads tools (and always for an endpoint), else BFCL's prompt mode."""
    if wanted not in MODES:
        raise ValueError(f"unknown mode {wanted!r}: one of {', '.join(MODES)}")
    if wanted != "auto":
        return wanted
    info = engine.info
    return "prompt" if info is not None and engine.kind != "remote" and not info.tools_in_template else "fc"


@dataclass
class CaseRecord:
    """One case's outcome, everything the case page shows (and `--json` writes)."""

    id: str
    category: str
    valid: bool
    reason: str  # the checker's words ("" when valid)
    error_type: str  # BFCL's error type
    raw: str  # what the model wrote, its reasoning apart
    calls: list[dict[str, Any]]  # as parsed: [{"name": ..., "arguments": {...}}]
    reasoning: str = ""
    seconds: float = 0.0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    error: str = ""  # the engine's error, where it could not answer

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseRecord:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def _answer_only(reply: Reply) -> str:
    """The model's text without its reasoning block (the raw text keeps the tool-call tags)."""
    raw = reply.raw
    for close in ("</think>", "</thinking>"):
        if close in raw:
            return raw.split(close, 1)[1].lstrip()
    return raw


def decode_reply(reply: Reply, mode: str) -> tuple[list[dict[str, Any]] | None, str, list[dict[str, Any]]]:
    """(BFCL's decoded calls or None, why they could not be decoded, the calls as shown)."""
    if mode == "prompt":
        try:
            decoded = decode(reply.text)
        except DecodeError as exc:
            return None, str(exc), []
        shown = [{"name": next(iter(d)), "arguments": next(iter(d.values()))} for d in decoded if d]
        return decoded, "", shown
    calls: list[ToolCall] = reply.tool_calls
    shown = [{"name": c.name, "arguments": c.arguments} for c in calls]
    if not calls:
        return None, "The model answered in text, with no tool call.", shown
    for c in calls:
        unreadable = [e for e in c.errors if e.startswith(_UNREADABLE)]
        if not c.name or unreadable:
            return None, f"A tool call could not be read: {'; '.join(unreadable or c.errors)}", shown
    return [{c.name: c.arguments} for c in calls], "", shown


def request_for(case: Case, mode: str, thinking: bool, sampling: SamplingParams) -> ChatRequest:
    if mode == "prompt":
        return ChatRequest(with_system_prompt(case.messages, with_python_hint(case.functions)),
                           enable_thinking=thinking, sampling=sampling)
    return ChatRequest([dict(m) for m in case.messages], enable_thinking=thinking, tools=case.tools(),
                       sampling=sampling)


def judge(case: Case, decoded: list[dict[str, Any]] | None, mode: str, decode_error: str = "") -> Verdict:
    """The case's verdict; a checker that cannot read the case (a function doc without a type) says so
    as the verdict instead of ending the run."""
    try:
        return check_case(case.kind, case.category, case.functions, decoded, case.ground_truth,
                          dots_renamed=mode == "fc", decode_error=decode_error)
    except (KeyError, TypeError, AttributeError, IndexError, StopIteration) as exc:
        return Verdict(False, f"The checker could not judge this case ({type(exc).__name__}: {exc}).",
                       "checker_error")


def run_case(engine: ChatEngine, case: Case, *, mode: str, thinking: bool, sampling: SamplingParams,
             should_stop: Callable[[], bool] | None = None) -> CaseRecord | None:
    """One case, answered and judged; None when the run was stopped during it (nothing to keep)."""
    start = time.perf_counter()
    try:
        reply = engine.generate(request_for(case, mode, thinking, sampling), should_stop=should_stop)
    except EngineError as exc:
        if should_stop is not None and should_stop():
            return None
        return CaseRecord(case.id, case.category, False, f"The engine could not answer: {exc}", "engine_error",
                          "", [], seconds=time.perf_counter() - start, error=str(exc))
    if reply.stats.stop_reason == "stopped" and should_stop is not None and should_stop():
        return None
    decoded, decode_error, shown = decode_reply(reply, mode)
    verdict = judge(case, decoded, mode, decode_error)
    return CaseRecord(case.id, case.category, verdict.valid, verdict.reason, verdict.error_type,
                      _answer_only(reply), shown, reasoning=reply.reasoning, seconds=time.perf_counter() - start,
                      prompt_tokens=reply.stats.prompt_tokens, generated_tokens=reply.stats.generated_tokens)


Progress = Callable[[int, int, CaseRecord], None]  # (done, total, the case just judged)


def run_cases(engine: ChatEngine, cases: list[Case], *, mode: str, thinking: bool, sampling: SamplingParams,
              on_record: Callable[[CaseRecord], None] | None = None, progress: Progress | None = None,
              should_stop: Callable[[], bool] | None = None) -> list[CaseRecord]:
    """Every case in turn; each record goes to `on_record` as it is judged (the run's file keeps it), so
    a stopped or crashed run keeps what it did."""
    records: list[CaseRecord] = []
    for case in cases:
        if should_stop is not None and should_stop():
            break
        record = run_case(engine, case, mode=mode, thinking=thinking, sampling=sampling, should_stop=should_stop)
        if record is None:
            break
        records.append(record)
        if on_record is not None:
            on_record(record)
        if progress is not None:
            progress(len(records), len(cases), record)
        if record.error and not engine.loaded:
            break  # the engine is gone (its process died, the endpoint dropped it): the rest would fail alike
    return records


# ----------------------------------------------------------------------------- scores


@dataclass(frozen=True)
class Score:
    correct: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


@dataclass
class Summary:
    """BFCL's scores of a run: each category's, and the leaderboard's single-turn columns (None where a
    category they take was not run: the leaderboard shows N/A there)."""

    categories: dict[str, Score] = field(default_factory=dict)

    def _all(self, names: tuple[str, ...]) -> list[Score] | None:
        got = [self.categories.get(n) for n in names]
        return None if any(s is None for s in got) else got  # type: ignore[return-value]

    @property
    def non_live(self) -> float | None:
        """The unweighted mean of simple, multiple, parallel and parallel multiple (BFCL's simple is the
        mean of Python, Java and JavaScript; the app runs Python's, and it stands for the three)."""
        got = self._all(NON_LIVE)
        return sum(s.accuracy for s in got) / len(got) if got else None

    @property
    def live(self) -> float | None:
        """The live AST categories weighted by their number of cases."""
        got = self._all(LIVE)
        total = sum(s.total for s in got) if got else 0
        return sum(s.correct for s in got) / total if got and total else None

    @property
    def irrelevance(self) -> float | None:
        got = self._all(IRRELEVANCE)
        return sum(s.accuracy for s in got) / len(got) if got else None

    @property
    def relevance(self) -> float | None:
        got = self._all(RELEVANCE)
        return got[0].accuracy if got else None

    @property
    def correct(self) -> int:
        return sum(s.correct for s in self.categories.values())

    @property
    def total(self) -> int:
        return sum(s.total for s in self.categories.values())

    def columns(self) -> dict[str, float | None]:
        return {"Non-live AST": self.non_live, "Live AST": self.live, "Irrelevance": self.irrelevance,
                "Relevance": self.relevance}


def summarize(records: list[CaseRecord]) -> Summary:
    counts: dict[str, list[int]] = {}
    for r in records:
        c = counts.setdefault(r.category, [0, 0])
        c[0] += int(r.valid)
        c[1] += 1
    return Summary({k: Score(*v) for k, v in counts.items()})
