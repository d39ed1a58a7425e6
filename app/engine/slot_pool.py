"""The slots' sequences in the shared KV pool: the cells they hold and have room for, idle ones
evicted least recently used first, and a slot's sequence cut back (or returned to a checkpoint, or
filled from the prompt cache) to the prefix a new prompt may keep. A base of the decode loop's
Scheduler (app/engine/slots.py); it runs on the scheduler's thread. No Qt.

Why the pool is counted this way: docs/architecture/decode-loop.md.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from app.engine.prompt_cache import PromptCache
from app.engine.read_plan import ReadPlan

if TYPE_CHECKING:
    from app.engine.slots import Job, Slot

log = logging.getLogger("app.engine.slots")  # the decode loop's one logger, as its messages always were


class SlotPool:
    """The pool's cells and each slot's sequence in them (the attributes the Scheduler sets)."""

    slots: list[Slot]
    pool: int | None  # the KV cells every sequence shares; None: each its own
    lc: Any  # the llama_cpp module
    mem: Any  # the context's memory (llama_get_memory)
    ctx: Any
    plan: ReadPlan
    cache: PromptCache | None
    evictions: int

    def _held(self) -> int:
        """The pool's cells that all slots' sequences hold (idle ones too), by count."""
        return sum(len(s.tokens) for s in self.slots)

    def _free(self) -> int:
        """The pool's cells no sequence holds (without a shared pool: as good as unlimited)."""
        return self.pool - self._held() if self.pool is not None else 1 << 30

    def _spare(self, without: Job | None = None) -> int:
        """The pool's cells that no busy slot holds or will take for the rest of its prompt, less one
        for each busy slot's next token (`without`: not counting that job): room for a new prompt. Idle
        slots' cells count as spare: they are evicted when needed."""
        if self.pool is None:
            return 1 << 30
        taken = 0
        for slot in self.slots:
            job = slot.job
            if job is not None and job is not without:
                taken += len(slot.tokens) + len(job.prompt) - job.pos + 1
        return self.pool - taken

    def _evict(self, need: int, *, but: Slot | None = None, at_least_one: bool = False) -> bool:
        """Idle slots' sequences removed from the pool, least recently used first, until it has `need`
        free cells by count (`at_least_one`: and one removed, where llama.cpp found less room than the
        count says); `but`: a slot to keep. Whether the pool has that room now (`at_least_one`: whether
        any was removed)."""
        if self.pool is None:
            return False
        evicted = False
        for slot in sorted((s for s in self.slots if s.job is None and s.tokens and s is not but),
                           key=lambda s: s.used_at):
            if self._free() >= need and (evicted or not at_least_one):
                break
            log.info("parallel slots: the KV pool is short; slot %d's idle sequence (%d tokens) evicted",
                     slot.seq, len(slot.tokens))
            self._clear(slot)
            self.evictions += 1
            evicted = True
        return evicted if at_least_one else self._free() >= need

    def _keep(self, slot: Slot, job: Job) -> int:
        """Cut the slot's sequence to the prefix it may keep for the job's prompt (`ReadPlan.reuse`, or
        with `resume` all it shares, but at least one prompt token is left to evaluate, for its
        logits), or restore a longer prefix from the prompt cache; return that length."""
        prompt = job.prompt
        shared = shared_prefix(slot.tokens, prompt)
        if job.resume:
            n = min(shared, len(prompt) - 1)
        else:
            n = self.plan.reuse(job.bounds, len(prompt), shared, slot.exact, slot.tokens)
        n = self._cut(slot, n)
        if not job.resume:
            restored = self._restore(slot, job, n)
            if restored:
                return restored
        return n if 0 < n <= len(slot.tokens) else self._clear(slot)  # a failed restore empties the slot

    def _cut(self, slot: Slot, n: int) -> int:
        """The slot's sequence cut to at most its first n tokens; how many it keeps (0: cleared)."""
        if n <= 0:
            return self._clear(slot)
        if n == len(slot.tokens):
            return n  # the prompt goes on where the sequence ends
        if slot.checkpoints is None:
            if self.lc.llama_memory_seq_rm(self.mem, slot.seq, n, -1):
                del slot.tokens[n:]
                if slot.drafter is not None:
                    slot.drafter.cut(n)
                return n
            return self._clear(slot)
        checkpoint = slot.checkpoints.latest_at_or_before(n)
        if checkpoint is None or not slot.checkpoints.restore(checkpoint):
            return self._clear(slot)
        slot.checkpoints.drop_after(checkpoint.n_tokens)
        del slot.tokens[checkpoint.n_tokens:]
        if slot.drafter is not None:
            slot.drafter.cut(checkpoint.n_tokens)
        return checkpoint.n_tokens

    def _restore(self, slot: Slot, job: Job, keep: int) -> int:
        """The longest prompt cache entry that is a prefix of the job's prompt at one of its bounds,
        longer than `keep`, put into the slot's sequence: its length (0: none, the slot as it was, or
        cleared when llama.cpp refused the entry)."""
        cache = self.cache
        if cache is None or not cache.enabled or len(job.prompt) < 2:
            return 0
        if self.pool is not None:  # llama.cpp puts an entry into free cells (and refuses it without)
            ok = set(job.bounds.tolist()).__contains__
            entry = cache.find(np.asarray(job.prompt, dtype=np.int32), keep, len(job.prompt) - 1, ok)
            if entry is None or not self._evict(len(entry) - len(slot.tokens), but=slot):
                return 0
        entry, tried = cache.restore_longest(self.ctx, slot.seq, job.prompt, job.bounds, keep)
        if not tried:
            return 0
        if entry is None:  # the sequence was cleared for an entry that could not be used
            self._clear(slot)
            return 0
        if slot.checkpoints is not None:  # they were the sequence's it held before
            slot.checkpoints.clear()
        if slot.drafter is not None:  # it has nothing of the entry's decodes: it follows from here
            slot.drafter.reset()
        slot.tokens = entry.tokens.tolist()
        slot.exact = len(entry)
        job.restored = len(entry)
        return len(entry)

    def _clear(self, slot: Slot) -> int:
        self.lc.llama_memory_seq_rm(self.mem, slot.seq, -1, -1)
        slot.tokens = []
        slot.exact = 0
        if slot.checkpoints is not None:
            slot.checkpoints.clear()
        if slot.drafter is not None:
            slot.drafter.reset()
        return 0


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens two token lists share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
