"""What drafting is expected to gain on a GPU: measured batch costs combined with measured acceptance.

A draft's speed splits in two halves measured in different places: how often guesses hold (a property
of the model and the text at temperature 0, the same on any hardware: `tests.bench.ngram_acceptance`
replays the engine's own n-gram lookup on SmolLM2's replies, resources/drafting/) and what a verify
batch costs (a property of the GPU and the model's shape: the GPU check's `batch-costs` step on the
Clover shape). Each result here is an expectation, never a measurement of drafting itself. No Qt;
the machine floor, so that the plan, the engine and the benches all read the same formula.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.base.paths import RESOURCES, app_dirs

if TYPE_CHECKING:
    from app.gguf.model_facts import ModelFacts

PROFILE = RESOURCES / "drafting" / "ngram_acceptance.json"
MTP_RATES = (0.5, 0.6, 0.7, 0.8, 0.9)  # published acceptance of Qwen3.6's head runs from 0.3 to 0.9
MTP_DRAFTS = (1, 2, 3)


def expected_tokens(rate: float, k: int) -> float:
    """Tokens one verify of a k-token draft yields, each draft token accepted with probability `rate`
    while the ones before it were: the accepted run plus the model's own next token."""
    if k <= 0:
        return 1.0
    rate = min(max(rate, 0.0), 0.999)
    return (1 - rate ** (k + 1)) / (1 - rate)


@dataclass(frozen=True)
class VerifyCosts:
    """The time of a decode of n tokens (every row's logits: a verify batch) relative to one token, as
    measured on one GPU for one model shape; `head_step`: the MTP head's draft step relative to one
    token (None: not measured). Sizes between those measured are interpolated, beyond the last the
    last step's slope carries on."""

    sizes: dict[int, float]
    head_step: float | None = None
    source: str = ""  # where and when they were measured, in words

    def cost(self, n: int) -> float:
        if n in self.sizes:
            return self.sizes[n]
        known = sorted(self.sizes)
        below = [m for m in known if m < n]
        above = [m for m in known if m > n]
        if below and above:
            a, b = below[-1], above[0]
            return self.sizes[a] + (self.sizes[b] - self.sizes[a]) * (n - a) / (b - a)
        if len(known) < 2:
            return self.sizes.get(1, 1.0) * n  # nothing measured beyond one token: n tokens, n times
        a, b = known[-2], known[-1]
        return self.sizes[b] + (self.sizes[b] - self.sizes[a]) / (b - a) * (n - b)

    def covers(self, n: int) -> bool:
        """n is within the sizes measured (between them: interpolated); beyond, only extrapolated."""
        return n <= max(self.sizes, default=1)

    def to_dict(self) -> dict[str, Any]:
        return {"sizes": {str(n): round(c, 4) for n, c in sorted(self.sizes.items())},
                "head_step": None if self.head_step is None else round(self.head_step, 4), "source": self.source}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VerifyCosts:
        head = data.get("head_step")
        return cls({int(n): float(c) for n, c in data["sizes"].items()}, None if head is None else float(head),
                   str(data.get("source", "")))


@dataclass(frozen=True)
class FixedLength:
    """The engine's n-gram lookup replayed over one greedy reply, drafting at most k tokens at every step
    where it finds a guess (exact at temperature 0: a verify keeps exactly the model's own tokens)."""

    k: int
    tokens: int  # reply tokens the replay walked
    plain_steps: int  # steps where the lookup found nothing: one token at the cost of one
    verifies: dict[int, int]  # drafted length -> verify steps that drafted that many
    drafted: int
    accepted: int

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def speedup(self, costs: VerifyCosts) -> float:
        """Tokens per unit of plain-step time against plain decoding, at these costs."""
        time = self.plain_steps + sum(count * costs.cost(d + 1) for d, count in self.verifies.items())
        return self.tokens / time if time else 1.0


@dataclass(frozen=True)
class Profile:
    """Acceptance by draft length for each prompt (`tests.bench.ngram_acceptance`)."""

    runs: dict[str, dict[int, FixedLength]]
    made: str = ""  # how the file was made, in words
    meta: dict[str, Any] = field(default_factory=dict)

    def best(self, prompt: str, costs: VerifyCosts) -> tuple[int, float]:
        """The draft length with the highest expected speed-up for `prompt` at these costs, and that
        speed-up; (0, 1.0) where no length beats plain decoding."""
        best_k, best = 0, 1.0
        for k, run in sorted(self.runs[prompt].items()):
            if not costs.covers(k + 1):  # a length whose verify batch was not measured is not weighed
                continue
            value = run.speedup(costs)
            if value > best * 1.001:
                best_k, best = k, value
        return best_k, best


def profile_from_dict(data: dict[str, Any]) -> Profile:
    runs = {prompt: {int(k): FixedLength(int(k), r["tokens"], r["plain_steps"],
                                         {int(d): int(c) for d, c in r["verifies"].items()},
                                         r["drafted"], r["accepted"])
                     for k, r in by_k.items()}
            for prompt, by_k in data["runs"].items()}
    return Profile(runs, str(data.get("made", "")), dict(data.get("meta", {})))


def load_profile(path: Path = PROFILE) -> Profile | None:
    try:
        return profile_from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def mtp_tps(plain_tps: float, rate: float, k: int, costs: VerifyCosts) -> float:
    """Expected tok/s with the MTP head drafting k tokens at acceptance `rate`: k head steps, then one
    verify of k + 1 tokens, yield `expected_tokens(rate, k)` tokens (the engine's own accounting:
    app/engine/mtp.with_steps)."""
    step = costs.head_step if costs.head_step is not None else 0.0
    return plain_tps * expected_tokens(rate, k) / (costs.cost(k + 1) + k * step)


def mtp_table(plain_tps: float, costs: VerifyCosts) -> list[str]:
    """Expected MTP tok/s at each of MTP_RATES for 1 to 3 draft tokens, labelled as expected."""
    head = "" if costs.head_step is None else f", head step {costs.head_step:.2f}x a token"
    out = [f"MTP head, expected (not measured): tok/s from {plain_tps:.1f} tok/s plain{head}"]
    out.append("  acceptance " + "".join(f"{f'{k} draft' + ('s' if k > 1 else ''):>12}" for k in MTP_DRAFTS))
    for rate in MTP_RATES:
        out.append(f"  {rate:>10.1f} " + "".join(
            f"{mtp_tps(plain_tps, rate, k, costs):>12.1f}" if costs.covers(k + 1) else f"{'-':>12}"
            for k in MTP_DRAFTS))
    return out


def ngram_lines(profile: Profile, costs: VerifyCosts) -> list[str]:
    """The expected n-gram speed-up for each measured prompt at these costs, labelled as expected."""
    out = [f"n-gram drafting, expected (not measured): acceptance from {profile.made or 'the profile'}"]
    for prompt, by_k in profile.runs.items():
        k, gain = profile.best(prompt, costs)
        per_k = ", ".join(f"{n}: {run.speedup(costs):.2f}x ({run.rate:.0%})" for n, run in sorted(by_k.items())
                          if costs.covers(n + 1))
        out.append(f"  {prompt:<32} {gain:.2f}x at draft length {k or '- (none pays)'}; by length {per_k}")
    return out


def shape_key(facts: ModelFacts) -> str:
    """What a verify batch's cost relative to one token depends on besides the GPU: the model's shape,
    not its file or quantization (the GPU check times a Clover-shaped file; a real Clover or Qwen3.6
    file of that shape, at Q4_K_M or UD-Q4_K_M, reads the same experts a token)."""
    return f"{facts.arch}/{len(facts.blocks)}x{facts.n_embd}/{facts.n_expert}:{facts.n_expert_used}"


def measured_folder() -> Path:
    return app_dirs().cache / "batch-costs"


def measured_path(gpu: str, facts: ModelFacts) -> Path:
    key = hashlib.sha256(f"{gpu}|{shape_key(facts)}".encode()).hexdigest()[:24]
    return measured_folder() / f"{key}.json"


def save_measured(gpu: str, facts: ModelFacts, costs: VerifyCosts) -> Path:
    """Keep measured costs where `load_measured` finds them, as tune keeps its results (app cache)."""
    path = measured_path(gpu, facts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"gpu": gpu, "shape": shape_key(facts), **costs.to_dict()}, indent=1))
    os.replace(tmp, path)
    return path


def load_measured(gpu: str, facts: ModelFacts) -> VerifyCosts | None:
    """The batch costs measured on this GPU for this shape (the GPU check's or tune's), or None."""
    try:
        return VerifyCosts.from_dict(json.loads(measured_path(gpu, facts).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ngram_gain(profile: Profile, costs: VerifyCosts) -> float:
    """The expected n-gram speed-up the plan weighs: the geometric mean of the best fixed-length speed-ups
    on the copy-heavy reply and the story (the story before its loop, where it loops: a loop would
    flatter prose), each at least 1 (a reply where no length pays is drafted at none)."""
    prose = "nothing to copy, before its loop" if "nothing to copy, before its loop" in profile.runs \
        else "nothing to copy"
    gains = [profile.best(p, costs)[1] for p in ("copy-heavy", prose) if p in profile.runs]
    if not gains:
        return 1.0
    product = 1.0
    for g in gains:
        product *= g
    return float(product ** (1 / len(gains)))
