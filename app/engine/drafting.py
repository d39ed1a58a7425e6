"""Guess, then check: what speculative decoding drafts, and how long a draft is worth. No Qt.

The decode loop (app/engine/slots.py) evaluates a reply's pending token plus a draft in one batch and
keeps the draft while the reply's own sampler agrees, so the tokens are the model's own. Here: the
`Drafter` protocol (one per slot; `NgramDrafter`, prompt lookup of the longest repeated n-gram; the
MTP head's is app/engine/mtp.py), each reply's running acceptance rate (`DraftStats`), the batch costs
measured at load and refined by the loop's own steps (`BatchCosts`, `measure_costs`), the expected
tokens of a draft, and the micro-batches llama.cpp cuts a step into (`micro_batches`).

Why the longest n-gram, why costs are measured, and the figures: docs/architecture/drafting.md.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from app.machine.drafting_gain import VerifyCosts, load_profile
from app.machine.drafting_gain import expected_tokens as expected_tokens  # with the other expectations

N_MIN, N_MAX = 2, 16  # n-gram lengths looked up: the longest match of at most N_MAX tokens
PRIOR = 0.8  # acceptance assumed before a reply has checked a guess (a repeated n-gram is a good bet)
RATE_WEIGHT = 0.15  # each checked guess moves the running rate this far towards its outcome
STEPS_SEEN = 3  # steps of one size timed in the loop before their time replaces the load figure
STEPS_KEPT = 9  # the latest steps of each size kept: their median is the size's time
STEPS_REFRESH = 8  # the measured relative costs are worked out again after this many steps (medians cost time)
STEPS_STALE = 512  # a size not timed for this many steps goes back to its load figure (a busy minute passes)


def lookup(history: np.ndarray, k: int) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the longest n-gram (N_MAX down to
    N_MIN tokens) ending at the history's last token; empty when none occurred before."""
    n = len(history)
    if k <= 0 or n < N_MIN + 1:
        return []
    idx = np.flatnonzero(history[:-1] == history[-1])  # earlier ends of a 1-gram match
    best = None
    for j in range(1, N_MAX):
        if j >= n:
            break
        idx = idx[idx >= j]
        idx = idx[history[idx - j] == history[-1 - j]]
        if len(idx) == 0:
            break
        if j + 1 >= N_MIN:
            best = int(idx[-1])
    if best is None:
        return []
    return [int(t) for t in history[best + 1: best + 1 + k]]


@dataclass
class BatchCosts:
    """The time of a decode of n tokens relative to one token, for n = 1 .. len(relative): measured at
    load, then from the loop's own steps (`observe`) where it has timed enough of a size."""

    relative: list[float] = field(default_factory=lambda: [1.0])
    learn: bool = True  # False: these costs stand (given, not measured), whatever the steps take
    seen: dict[int, deque[float]] = field(default_factory=dict)  # size -> the latest steps' seconds
    measured: dict[int, float] = field(default_factory=dict)  # size -> cost from `seen`, where enough was seen
    _fresh: int = field(default=0, init=False)  # steps observed since `measured` was worked out
    _steps: int = field(default=0, init=False)  # steps observed
    _last: dict[int, int] = field(default_factory=dict, init=False)  # size -> the step it was last timed at

    def observe(self, n: int, seconds: float) -> None:
        """A step that decoded n tokens (1: a plain step) took `seconds`, its drafting and sampling in.
        A size not timed for STEPS_STALE steps is forgotten: drafts that stopped because a busy moment
        made them look dear are tried again at the load figure, and timed again."""
        if not self.learn:
            return
        self.seen.setdefault(n, deque(maxlen=STEPS_KEPT)).append(seconds)
        self._steps += 1
        self._last[n] = self._steps
        self._fresh += 1
        if self._fresh >= STEPS_REFRESH or (n > 1 and n not in self.measured):
            self._fresh = 0
            for size in [size for size, last in self._last.items() if size > 1 and last < self._steps - STEPS_STALE]:
                del self.seen[size], self._last[size]
            one = self.seen.get(1)
            if one and len(one) >= STEPS_SEEN:
                plain = statistics.median(one)
                self.measured = {size: max(statistics.median(steps) / plain, 1.0)
                                 for size, steps in self.seen.items() if size > 1 and len(steps) >= STEPS_SEEN}

    def cost(self, n: int) -> float:
        if n in self.measured:
            return self.measured[n]
        if n <= len(self.relative):
            return self.relative[n - 1]
        # past what was measured: the last step's slope
        last = self.relative[-1]
        slope = last - self.relative[-2] if len(self.relative) > 1 else 1.0
        return last + slope * (n - len(self.relative))


def micro_batches(counts: list[tuple[int, int]], n_ubatch: int, *, equal: bool, sequential: bool = True,
                  keep_tail: int = 0) -> list[int]:
    """The rows of each micro-batch llama.cpp decodes a batch in, from each sequence's rows (seq, n) in
    batch order (each sequence's rows together): what a step of the parallel slots costs.

    With one KV stream and no recurrent state it cuts the batch every n_ubatch rows (`split_simple`).
    Otherwise (`llama_batch_allocr::split_equal`, llama-batch.cpp) every micro-batch takes the same
    number of rows from each sequence in it (the fewest any has left, at most n_ubatch in all): a
    sequence with more rows than the others (a draft beside plain steps) gets micro-batches of its own;
    `sequential` (one KV stream per sequence, llama_load's partitioned cache) takes only consecutive
    sequence ids into one; `keep_tail` (n_rs_seq + 1 on a recurrent model with rollback snapshots)
    keeps each sequence's last rows in one micro-batch, so a sequence whose rest would be shorter
    waits for a micro-batch of its own. A model of llama.cpp's rule for costs only: decoding never
    depends on it."""
    if not equal:
        total = sum(n for _, n in counts)
        return [min(n_ubatch, total - i) for i in range(0, total, max(n_ubatch, 1))]
    left = [[seq, n] for seq, n in counts if n > 0]
    sizes: list[int] = []
    while left:
        group: list[list[int]] = []
        for item in left:
            if not group or not sequential or item[0] == group[-1][0] + 1:
                group.append(item)
        each = max(1, min(min(n for _, n in group), n_ubatch // len(group)))
        takes = [each] * len(group)
        if keep_tail:
            n_keep = 0
            while n_keep < len(group) and not (0 < group[n_keep][1] - each < keep_tail):
                n_keep += 1
            if n_keep == 0:  # the first sequence alone: to its end, or leaving keep_tail rows
                first = group[0][1]
                takes = [first if first <= n_ubatch else min(each, first - keep_tail)]
                n_keep = 1
            group, takes = group[:n_keep], takes[:n_keep]
        sizes.append(sum(takes))
        for item, take in zip(group, takes, strict=True):
            item[1] -= take
        left = [item for item in left if item[1] > 0]
    return sizes


def best_length(rate: float, costs: BatchCosts, k_max: int) -> int:
    """The draft length with the most expected tokens per unit of cost; 0 when none beats plain decoding."""
    best_k, best_value = 0, 1.0
    for k in range(1, k_max + 1):
        value = expected_tokens(rate, k) / costs.cost(k + 1)
        if value > best_value * 1.001:
            best_k, best_value = k, value
    return best_k


# Speculative decoding "auto" drafts n-grams only where a draft pays at an acceptance rate below this.
# n-gram guesses hold about half the time over a reply, even on copy-heavy work (tests.bench.speculative
# on SmolLM2: 49-53 % on a function rewrite, 33-49 % on a story), and a reply opens at PRIOR before its
# own rate is known: where only a rate above what n-grams reach pays, drafting costs more than it gains.
# Measured on this 2-core CPU (2026-12-06, one engine loaded at a time): a batch of 2 costs 1.80x one
# token, drafts break even at 70 %, and n-grams gave 0.94x plain on the rewrite (53 % accepted); 4 slots
# drafting beside each other gave 0.96x on stories. The limit was 0.70, set while two engines loaded in
# one bench slowed each other's plain decodes and made drafting look cheaper: on this CPU auto then
# drafted or not with the noise of the load's timing. A GPU, where a batch of 9 costs little more than
# one token, breaks even near 10 %.
AUTO_RATE_MAX = 0.55


def break_even_rate(costs: BatchCosts, k_max: int) -> float:
    """The lowest acceptance rate at which some draft length (up to k_max) beats plain decoding at
    these costs; 1.0 when none does."""
    if k_max <= 0 or not best_length(0.999, costs, k_max):
        return 1.0
    low, high = 0.0, 0.999
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (low, mid) if best_length(mid, costs, k_max) else (mid, high)
    return high


def auto_drafting(costs: BatchCosts, k_max: int, measured: VerifyCosts | None = None) -> tuple[bool, str]:
    """Whether "auto" drafts n-grams at these measured costs, and why in words (for the load line and
    doctor's note). `measured`: the batch costs the GPU check or Tune kept for this GPU and model shape
    (`measured_for`: at context depths and with a real router's spread of experts, which the load's
    quick timing lacks): where they exist they decide, with the gain they make of the acceptance
    measured on SmolLM2 (app/machine/drafting_gain.py), and the words say so."""
    source = ""
    if measured is not None and k_max > 0:
        costs = BatchCosts([measured.cost(n) for n in range(1, k_max + 2)], learn=False)
        profile = load_profile()
        gain = "" if profile is None or "copy-heavy" not in profile.runs else (
            f"; expected (not measured) {profile.best('copy-heavy', measured)[1]:.2f}x on copy-heavy work")
        source = f" (from the batch costs {measured.source or 'measured on this GPU'}{gain})"
    rate = break_even_rate(costs, k_max)
    if rate <= AUTO_RATE_MAX:
        return True, f"n-gram drafts pay here from {rate:.0%} of guesses right{source}"
    return False, (f"off on this machine: a batch of 2 tokens costs {costs.cost(2):.2f}x one, so a draft pays only "
                   f"when at least {rate:.0%} of guesses hold (n-grams hold about half){source}; "
                   "speculative ngram drafts anyway")


def measured_for(path: str | Path, main_gpu: int) -> VerifyCosts | None:
    """The batch costs kept for this model's shape on the GPU it loads on (None: none kept, or no GPU).
    Reads the file's header only where some GPU's costs were kept."""
    from app.machine.drafting_gain import load_measured, measured_folder

    try:
        folder = measured_folder()
        if not folder.is_dir() or not any(folder.iterdir()):
            return None
        from app.gguf.gguf_file import read_header
        from app.gguf.model_facts import facts_from_header
        from app.machine.gpu import probe

        gpus = probe()
        named = [g for g in gpus.gpus if g.index == main_gpu] if gpus.has_gpu else []
        return load_measured(named[0].name, facts_from_header(read_header(path))) if named else None
    except (OSError, ValueError):
        return None


@dataclass
class DraftStats:
    """What drafting did in one reply, and the running acceptance rate that sets the draft length."""

    drafted: int = 0  # draft tokens sent to verification
    accepted: int = 0  # of those, kept
    verifies: int = 0  # verify batches decoded
    rate: float = PRIOR  # the chance that a draft token is the model's own next token (moving average)
    mtp: bool = False  # the MTP head drafted (its decodes run beside the target's: the clocks tell the speed)

    def observe(self, hit: bool) -> None:
        """One draft token checked: in a verify batch, or for free, when the lookup's guess was not
        drafted and plain decoding then sampled the next token anyway (so a reply that stopped drafting
        still sees when guessing would pay again)."""
        self.rate += RATE_WEIGHT * ((1.0 if hit else 0.0) - self.rate)


class Drafter(Protocol):
    """What guesses a slot's next tokens. The scheduler that owns the slot calls it, in its one thread:
    `start` for each reply, `propose` before a step, `checked` after it, and `kept`, `cut` and `reset`
    whenever the slot's sequence changes, so that the drafter's view of the sequence is the slot's."""

    stats: DraftStats  # the reply's, from `start`: its running acceptance rate sets the draft length

    def start(self, prompt: Sequence[int], draft: bool) -> None:
        """A new reply in the slot, on `prompt`; `draft` False: it proposes nothing (a reply that reads
        logprobs), and the rate it keeps is left as it was."""

    def propose(self, pending: int, k: int) -> list[int]:
        """Up to k guesses of the tokens after `pending`, the reply's sampled token that the next step
        decodes at the end of the sequence; empty: no guess."""

    def checked(self, guess: list[int], samples: list[int], drafted: bool) -> None:
        """What the chain sampled where `guess` was checked: with `drafted`, the verify rows' samples
        while they agreed (the accepted part, then the model's own token); without, the one token
        plain decoding sampled (a guess checked for free)."""

    def kept(self, tokens: Sequence[int], pos: int, row: int) -> None:
        """The step just decoded put `tokens` into the sequence at positions pos.. from batch row `row`
        (a prompt piece, or the pending token and the accepted part of its draft)."""

    def cut(self, n: int) -> None:
        """The sequence now holds only its first n tokens."""

    def reset(self) -> None:
        """The sequence is empty."""


def count_check(stats: DraftStats, guess: list[int], samples: list[int], drafted: bool) -> None:
    """A check of `guess` against the chain's `samples` (Drafter.checked) in a reply's stats: each
    guess token seen sampled moves the rate; a verify counts its drafted and accepted tokens."""
    if not drafted:
        stats.observe(samples[0] == guess[0])
        return
    for want, got in zip(guess, samples, strict=False):
        stats.observe(want == got)
    stats.drafted += len(guess)
    stats.accepted += len(samples) - 1
    stats.verifies += 1


class NgramDrafter:
    """Prompt lookup (`lookup`) for one slot: its history is the sequence the slot holds (the prompt,
    then the reply), written by position as the steps keep tokens, so a cut needs no copy. What it
    finds depends on the text: each reply starts at the PRIOR rate."""

    def __init__(self, n_ctx: int) -> None:
        self.history = np.zeros(n_ctx + 1, dtype=np.int32)  # a context's tokens and a pending one after them
        self.n = 0  # the history's length: the sequence's tokens
        self.stats = DraftStats()
        self.draft = False

    def start(self, prompt: Sequence[int], draft: bool) -> None:
        self.draft = draft
        self.stats = DraftStats()
        if draft:
            self.history[:len(prompt)] = prompt
            self.n = len(prompt)

    def propose(self, pending: int, k: int) -> list[int]:
        if not self.draft or k <= 0:
            return []
        self.history[self.n] = pending
        return lookup(self.history[:self.n + 1], k)

    def checked(self, guess: list[int], samples: list[int], drafted: bool) -> None:
        count_check(self.stats, guess, samples, drafted)

    def kept(self, tokens: Sequence[int], pos: int, row: int) -> None:
        if self.draft:
            self.history[pos:pos + len(tokens)] = tokens
            self.n = pos + len(tokens)

    def cut(self, n: int) -> None:
        self.n = min(self.n, n)

    def reset(self) -> None:
        self.n = 0


def measure_costs(llm: Any, max_size: int, rounds: int = 2, sizes: tuple[int, ...] = (1, 2, 4)) -> BatchCosts:
    """Times decodes of `sizes` and max_size tokens with every position's logits (a verify batch),
    after a short context, each the fastest of `rounds`; relative to one token, straight lines
    between. Leaves the cache empty. A fraction of a second for SmolLM2 on this CPU."""
    from app.machine.llama_backend import llama

    lc = llama()
    steps = sorted({n for n in (*sizes, max_size) if 1 <= n <= max_size})
    base = [1 + (7 * i) % max(llm.n_vocab() - 2, 1) for i in range(16)]
    times: dict[int, float] = {}
    batch = lc.llama_batch_init(max_size, 0, 1)
    try:
        for _ in range(rounds):
            for n in steps:
                llm.reset()
                llm.eval(base)  # a little context to attend to; a hybrid cannot cut a batch away, so anew
                lc.llama_synchronize(llm.ctx)
                fill_batch(batch, [base[i % len(base)] for i in range(n)], len(base))
                started = time.perf_counter()
                if lc.llama_decode(llm.ctx, batch) != 0:
                    break
                lc.llama_synchronize(llm.ctx)
                elapsed = time.perf_counter() - started
                times[n] = min(times.get(n, elapsed), elapsed)
    finally:
        lc.llama_batch_free(batch)
        llm.reset()
    one = times.get(1)
    if not one:
        return BatchCosts()
    relative = [1.0]
    for n in range(2, max(times) + 1):
        below = max(m for m in times if m <= n)
        above = min(m for m in times if m >= n)
        if below == above:
            t = times[below]
        else:
            t = times[below] + (times[above] - times[below]) * (n - below) / (above - below)
        relative.append(max(t / one, relative[-1]))
    return BatchCosts(relative)


def fill_batch(batch: Any, tokens: list[int], pos: int) -> None:
    """A llama_batch of `tokens` at positions pos.. on sequence 0, every position's logits asked for."""
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = pos + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1
