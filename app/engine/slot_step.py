"""One step's batch of the decode loop: the prompt pieces it reads, each reply's pending token and
how much of its drafter's guess goes in beside it (the lengths that give the most expected tokens
per unit of the step's measured cost), and the micro-batches llama.cpp will cut it into. A base of
the Scheduler (app/engine/slots.py), on its thread. No Qt.

Why drafts are sized for the step as a whole: docs/architecture/drafting.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.engine.drafting import BatchCosts, expected_tokens, micro_batches
from app.engine.slot_pool import SlotPool

if TYPE_CHECKING:
    from app.engine.slots import Slot


class StepRows(SlotPool):
    """The rows of a step (the attributes the Scheduler sets)."""

    n_batch: int
    n_ctx_seq: int
    n_ubatch: int
    draft_max: int
    costs: BatchCosts
    equal_split: bool
    sequential: bool
    keep_tail: int
    _batch: Any  # the llama_batch the step is built in
    apart: bool  # reproducible replies: a prompt piece in a step of its own
    _piece_turn: bool = False  # under `apart`, whether the last step read a piece
    turns = 0  # under `apart`, steps where pieces and pending tokens took turns (for the tests)

    def _apart(self, writers: list[Slot], pieces: list[tuple[Slot, int, int]]
               ) -> tuple[list[Slot], list[tuple[Slot, int, int]]]:
        """Reproducible replies: a step decodes every pending token or one prompt piece, never both,
        taking turns. llama.cpp cuts a batch of several sequences into micro-batches with as many rows
        of each (`split_equal`), so a piece beside pending tokens would be read in other micro-batches,
        and by other attention kernels (64 rows or more take the tiled one), than the same piece alone."""
        if not writers or not pieces:
            return writers, pieces[:1]
        self._piece_turn = not self._piece_turn
        self.turns += 1
        return ([], pieces[:1]) if self._piece_turn else (writers, [])

    def _pieces(self, busy: list[Slot], writers: int) -> list[tuple[Slot, int, int]]:
        """The prompt pieces this step reads (slot, from, to), first come first served, in the room the
        batch has beside `writers` pending tokens; a job held back for the pool's room reads again once
        there is room for all of its prompt."""
        used = writers
        pieces: list[tuple[Slot, int, int]] = []
        for slot in sorted((s for s in busy if s.job is not None and s.job.prefilling),
                           key=lambda s: s.job.started if s.job else 0.0):
            job = slot.job
            assert job is not None
            if job.held:
                if self._spare(without=job) < len(job.prompt) + 1:
                    continue
                job.held = False
            room = self.n_batch - used
            if room <= 0:
                break
            end = len(job.prompt)
            if job.exact:  # a cold read's piece, whole (the first job read always has room for one)
                upto = self.plan.after(job.bounds, job.pos, end)
                if upto - job.pos > room:
                    continue
            else:
                upto = min(end, job.pos + room)
            pieces.append((slot, job.pos, upto))
            used += upto - job.pos
        return pieces

    def _fill(self, writers: list[Slot], pieces: list[tuple[Slot, int, int]], guesses: dict[int, list[int]],
              lengths: dict[int, int]) -> tuple[list[tuple[Slot, int, list[int]]], list[int], int]:
        """The step's batch: each writer's pending token and the part of its guess `lengths` keeps, then
        the prompt pieces. (each reply's slot, its first row of logits and its draft; each piece's first
        row; the rows)"""
        batch, n = self._batch, 0

        def add(seq: int, token: int, pos: int, logits: bool) -> None:
            nonlocal n
            batch.token[n], batch.pos[n] = token, pos
            batch.n_seq_id[n] = 1
            batch.seq_id[n][0] = seq
            batch.logits[n] = int(logits)
            n += 1

        rows: list[tuple[Slot, int, list[int]]] = []
        for slot in writers:
            job = slot.job
            assert job is not None and job.pending is not None
            draft = guesses[slot.seq][:lengths[slot.seq]] if slot.seq in lengths else []
            rows.append((slot, n, draft))
            for i, token in enumerate([job.pending, *draft]):
                add(slot.seq, token, len(slot.tokens) + i, True)
        piece_rows: list[int] = []
        for slot, first, upto in pieces:
            job = slot.job
            assert job is not None
            end = len(job.prompt)
            piece_rows.append(n)
            for pos in range(first, upto):
                add(slot.seq, job.prompt[pos], pos, pos == end - 1)
            if upto == end:
                rows.append((slot, n - 1, []))
        batch.n_tokens = n
        return rows, piece_rows, n

    def _guess(self, slot: Slot) -> list[int]:
        """The slot's drafter's guess after the reply's pending token: at most what its limit and its
        slot's context leave, and what a draft may hold."""
        job = slot.job
        assert job is not None and job.pending is not None
        if not job.draft or not self.draft_max or slot.drafter is None:
            return []
        k = min(self.draft_max, self.n_ctx_seq - len(slot.tokens) - 1, job.max_new - job.generated - 1)
        return slot.drafter.propose(job.pending, k) if k > 0 else []

    def _lengths(self, writers: list[Slot], pieces: list[tuple[Slot, int, int]], guesses: dict[int, list[int]],
                 room: int) -> dict[int, int]:
        """How much of each guess to decode as a draft in this step (seq -> length; none: no draft):
        the lengths that give the most expected tokens per unit of the step's cost, at most `room` rows
        in all. A reply's guess is worth its expected tokens at its own running rate (a reply whose
        guesses keep failing expects little more than its one token, and stops drafting); the step
        costs the sum of its micro-batches (`app.engine.drafting.micro_batches`), each as the measured
        batch costs have its rows. Tried: every common length, each with the replies that gain most
        from it; one reply alone in a step of one row chooses as `drafting.best_length`."""
        if not guesses or room <= 0:
            return {}
        rows = [(s.seq, 1) for s in writers] + [(s.seq, upto - first) for s, first, upto in pieces]
        rates = {s.seq: s.job.drafts.rate for s in writers if s.job is not None}

        def value(lengths: dict[int, int]) -> float:
            tokens = len(writers) + sum(expected_tokens(rates[seq], k) - 1 for seq, k in lengths.items())
            split = self._split([(seq, n + lengths.get(seq, 0)) for seq, n in rows])
            return tokens / sum(self.costs.cost(size) for size in split)

        best, best_value = {}, value({})
        for common in range(1, max(len(g) for g in guesses.values()) + 1):
            gains = sorted(guesses, key=lambda seq: -expected_tokens(rates[seq], min(common, len(guesses[seq]))))
            lengths: dict[int, int] = {}
            for seq in gains:
                k = min(common, len(guesses[seq]))
                if sum(lengths.values()) + k > room:
                    break
                lengths[seq] = k
                v = value(lengths)
                if v > best_value * 1.001:
                    best, best_value = dict(lengths), v
        return best

    def _split(self, rows: list[tuple[int, int]]) -> list[int]:
        """The micro-batches llama.cpp decodes a step of these (seq, rows) in (a model, for costs)."""
        return micro_batches(rows, self.n_ubatch, equal=self.equal_split, sequential=self.sequential,
                             keep_tail=self.keep_tail)
