"""The decode loop: the replies of one llama.cpp context, one slot each, one slot or several at once
(continuous batching). Every reply the engine writes goes through it. No Qt.

The context holds `n` sequences in one pool of KV cells (llama.cpp's unified cache); any slot may use
the whole context. One scheduler thread owns every decode: each step puts into one `llama_batch` the
pending token (and draft) of every reply being written and, in the room left, the next pieces of the
prompts being read, first come first served; one `llama_decode`; then each reply's sampler chain picks
its token from its own rows. A request goes to the free slot whose sequence shares the longest prefix
with its prompt and reads only the rest. Where the pool has no room, the step is tried again with less.

The pool and the slots' sequences: slot_pool.py; a step's rows and drafts: slot_step.py. The design,
llama.cpp's part in it and what was measured: docs/architecture/decode-loop.md and drafting.md.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.checkpoints import Checkpoints
from app.engine.contract import APP
from app.engine.drafting import BatchCosts, Drafter, DraftStats, NgramDrafter
from app.engine.mtp import MtpDrafter, MtpHead
from app.engine.prompt_cache import PromptCache, keep_until
from app.engine.read_plan import ReadPlan, turn_start_ids
from app.engine.sampler import Picker, ReplyChain, prefill_chunk
from app.engine.slot_pool import shared_prefix
from app.engine.slot_step import StepRows
from app.machine.llama_backend import llama

log = logging.getLogger(__name__)

_END = object()  # a job's last item: the reply is over


@dataclass
class Job:
    """One reply in a slot: its prompt, its chain, and what it has produced so far."""

    prompt: list[int]
    chain: ReplyChain  # closed by the scheduler when the job leaves
    max_new: int  # tokens after which the scheduler stops sampling (the reply's limit)
    eog: Callable[[int], bool]  # an end-of-generation token ends the job after it is handed out
    marks: tuple[int, ...] = ()  # prompt positions worth a checkpoint (hybrid models)
    client: str = APP
    on_token: Callable[[int, int], Any] | None = None  # (token, batch row) in the scheduler's thread
    resume: bool = False  # the prompt goes on from the slot's last reply (a forced end of thinking): reuse it all
    keep: bool = False  # the prompt cache keeps its entries longer (a client's mark)
    draft: bool = False  # speculative decoding (n-grams) where the scheduler can and it pays
    held: bool = False  # its prompt pieces wait for room in the pool (for its whole prompt)
    out: queue.SimpleQueue[Any] = field(default_factory=lambda: outbox())  # looked up each time (tests patch it)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # filled by the scheduler
    slot: int = -1
    pos: int = 0  # tokens of the prompt in the sequence so far
    reused: int = 0  # of the prompt, tokens the slot's cache (or the prompt cache) already held
    restored: int = 0  # of those, tokens that came from the prompt cache
    exact: bool = False  # its prompt is being read as a cold read reads it (from the slot's exact part)
    bounds: Any = None  # the prompt's bounds (app.engine.read_plan): where its read stops
    saves: tuple[int, ...] = ()  # prompt positions where the read keeps a checkpoint
    stores: tuple[int, ...] = ()  # and where it stores a prompt cache entry
    started: float = field(default_factory=time.perf_counter)
    prompt_seconds: float = 0.0
    generated: int = 0
    pending: int | None = None  # the last sampled token, decoded in the next step
    drafts: DraftStats = field(default_factory=DraftStats)  # what drafting did: its slot's drafter's stats

    @property
    def prefilling(self) -> bool:
        return self.pending is None


@dataclass
class Slot:
    seq: int
    tokens: list[int] = field(default_factory=list)  # what the sequence holds, in order
    checkpoints: Checkpoints | None = None
    exact: int = 0  # of those, the first ones computed as a cold read computes them (a bound of theirs)
    job: Job | None = None
    used_at: float = 0.0
    drafter: Drafter | None = None  # what guesses for its replies (None: the scheduler drafts nothing)


class Scheduler(StepRows):
    """The slots of one loaded `llama_cpp.Llama` (made with n_seq_max = n) and the thread that
    decodes for them. `reserve_app`: slot 0 is kept for the app's own requests (the window's chat is
    never starved by clients of the local server); they may also take any other free slot."""

    def __init__(self, llm: Any, n: int, *, checkpoints: int = 0, reserve_app: bool = False,
                 draft_max: int = 0, reproducible: bool = False) -> None:
        self.llm = llm
        self.lc = llama()
        self.ctx = llm.ctx
        self.n_ctx_seq = int(self.lc.llama_n_ctx_seq(self.ctx))
        self.n_batch = int(llm.n_batch)
        # a prompt is read in chunks that leave room in the batch for every other slot's pending token
        self.chunk = max(prefill_chunk(llm) - (n - 1), 1)
        self.plan = ReadPlan(self.chunk, turn_start_ids(llm))
        self.cache: PromptCache | None = None  # the engine's prompt cache, attached by the engine
        self.picker = Picker(llm)
        self.mem = self.lc.llama_get_memory(self.ctx)
        cut_back = not (llm._is_recurrent or llm._is_hybrid)  # noqa: SLF001 (llama-cpp-python's own flags)
        self.slots = [Slot(i, checkpoints=None if cut_back else Checkpoints(self.ctx, checkpoints, seq=i))
                      for i in range(n)]
        self.reserve_app = reserve_app and n > 1
        self.waiting: list[Job] = []
        self._calls: list[tuple[Callable[[], Any], Future[Any]]] = []  # `call`'s work for this thread
        self._cond = threading.Condition()
        self._closed = False
        self._batch = self.lc.llama_batch_init(self.n_batch, 0, 1)
        # a step's rows of logits: llama.cpp aborts a batch that asks for more (n_outputs_max, 0: n_batch)
        self.outputs = min(int(getattr(llm.context_params, "n_outputs_max", 0) or self.n_batch), self.n_batch)
        # a draft is at most what a step can check beside the pending token and, where the cache cannot
        # be cut, what llama.cpp can roll back in each sequence
        limit = self.n_ctx_seq if cut_back else int(self.lc.llama_n_rs_seq(self.ctx))
        self.draft_max = max(0, min(draft_max, limit, self.n_batch - 1, self.outputs - 1))
        self.apart = reproducible  # a prompt piece in a step of its own, and no drafts (`_apart`)
        self.draft_max = 0 if reproducible else self.draft_max
        self.costs = BatchCosts()  # measured by the engine at load (drafting.measure_costs), up to cost_rows
        self.cost_rows = max(1, min(n * (self.draft_max + 1), self.outputs, self.n_batch))
        # how llama.cpp cuts a step into micro-batches (drafting.micro_batches): equal rows per sequence
        # with a KV stream per sequence (a partitioned cache) or a recurrent state
        unified = bool(getattr(llm.context_params, "kv_unified", False)) or n == 1
        # the KV cells every sequence shares (llama_load's unified cache); None: each its own (n_ctx_seq)
        self.pool: int | None = int(self.lc.llama_n_ctx(self.ctx)) if unified and n > 1 else None
        self.n_ubatch = int(self.lc.llama_n_ubatch(self.ctx))
        self.equal_split = not unified or not cut_back
        self.sequential = not unified or bool(llm._is_recurrent)  # noqa: SLF001
        for slot in self.slots:
            slot.drafter = NgramDrafter(self.n_ctx_seq) if self.draft_max else None
        self.head: MtpHead | None = None  # the first slot's MTP head (its draft context is every slot's)
        n_rs = int(self.lc.llama_n_rs_seq(self.ctx)) if not cut_back else 0
        self.keep_tail = n_rs + 1 if n_rs else 0
        if draft_max > 0:
            if self.draft_max:
                log.info("slots: drafts of up to %d tokens a reply", self.draft_max)
            elif not cut_back and limit == 0:
                log.info("parallel slots do not draft on this model: its recurrent state has no rollback "
                         "snapshots in this context (n_rs_seq = 0)")
            else:
                log.info("parallel slots do not draft: the context keeps logits for %d rows a step",
                         self.outputs)
        self.steps = 0  # decodes made (for the tests and benches: proof that replies shared batches)
        self.shared_steps = 0  # of those, decodes that carried more than one sequence
        # the pool running short: decodes llama.cpp found no room for, idle slots' sequences evicted, jobs
        # held back (their prompt pieces), jobs sent back to wait, replies ended for replies being written
        self.full_steps = self.evictions = self.held_back = self.requeued = self.cut = 0
        self._thread = threading.Thread(target=self._run, name="slots", daemon=True)
        self._thread.start()

    def draft_with_head(self, head: MtpHead) -> None:
        """The model's MTP head drafts for every slot (at the scheduler's costs, which count its steps:
        `mtp.with_steps`): `head` follows the first slot's sequence, and a head sharing its draft context
        each other slot's. Before any request."""
        self.head = head
        for slot in self.slots:
            follows = head if slot.seq == head.seq else MtpHead(self.llm, share=head, seq=slot.seq)
            slot.drafter = MtpDrafter(follows, self.costs, self.n_ctx_seq, self.draft_max)

    # ------------------------------------------------------------------ clients' side

    def submit(self, job: Job) -> Job:
        if len(job.prompt) >= self.n_ctx_seq:
            whose = "the context's" if self.pool is not None else "a slot's"
            raise ValueError(f"the prompt is {len(job.prompt):,} tokens, more than {whose} {self.n_ctx_seq:,}")
        with self._cond:
            if self._closed:
                raise RuntimeError("the model was unloaded")
            self.waiting.append(job)
            self._cond.notify_all()
        return job

    def stream(self, job: Job) -> Generator[Any, None, None]:
        """The job's items as the scheduler makes them; closing it (or leaving the loop) cancels the
        job, which frees its slot at the next step."""
        try:
            while True:
                item = job.out.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.cancel(job)

    def cancel(self, job: Job) -> None:
        job.cancelled.set()
        with self._cond:
            self._cond.notify_all()

    def busy(self) -> int:
        with self._cond:
            return sum(s.job is not None for s in self.slots) + len(self.waiting)

    def forget(self, timeout: float = 30.0) -> None:
        """Every slot's sequence emptied (its tokens, checkpoints and drafter's view): the next read is
        a cold one. A reply that has just handed out its last token leaves its slot at the scheduler's
        next step, so this first waits, up to `timeout` seconds, for every slot to be idle and no
        request to wait; the scheduler's thread does not decode while none is busy and this holds its
        lock."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.waiting or any(s.job for s in self.slots):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"the slots are still busy after {timeout:.0f} s")
                self._cond.wait(min(left, 0.05))
            for slot in self.slots:
                self._clear(slot)

    def close(self, wait: bool = False) -> None:
        """Stop the thread and free the batch (the model is being unloaded): after the replies being
        written end (`wait`), else cancelling them."""
        with self._cond:
            while wait and (self.waiting or any(s.job for s in self.slots)):
                self._cond.wait(0.1)
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        if self._batch is not None:
            self.lc.llama_batch_free(self._batch)
            self._batch = None
        if self.head is not None:
            self.head.close()
            self.head = None

    def call(self, work: Callable[[], Any]) -> Any:
        """`work()` run on the scheduler's thread, between steps; its result (or its exception). Every
        decode of a loaded model belongs on this one thread (`llama_backend.on_a_thread_of_its_own` says
        why): timing decodes at load made on the loading thread cost every later reply 30 % here."""
        done: Future[Any] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the model was unloaded")
            self._calls.append((work, done))
            self._cond.notify_all()
        return done.result()

    # ------------------------------------------------------------------ the scheduler's thread

    def _run_calls(self) -> None:
        if not self._calls:  # the common case, read without the lock: the wait below checks it under it
            return
        with self._cond:
            calls, self._calls = self._calls, []
        for work, done in calls:
            try:
                done.set_result(work())
            except BaseException as exc:  # noqa: BLE001 (handed to the caller, who raises it)
                done.set_exception(exc)

    def _run(self) -> None:
        while True:
            self._run_calls()
            with self._cond:
                while not self._closed and not self.waiting and not self._calls \
                        and not any(s.job for s in self.slots):
                    self._cond.wait()
                if self._closed:
                    break
                if self._calls:
                    continue
                self._drop_cancelled()
                self._assign()
            decoded = False
            if any(s.job for s in self.slots):
                try:
                    decoded = self._step()
                except Exception as exc:  # a failed decode ends every reply in it, with the error
                    log.exception("parallel decode failed")
                    for slot in self.slots:
                        if slot.job is not None:
                            self._finish(slot, RuntimeError(f"decoding failed: {exc}"))
                            self._clear(slot)
            if not decoded:
                with self._cond:  # the waiting jobs wait for a slot or room, the busy ones for room: a change
                    if (self.waiting or any(s.job for s in self.slots)) and not self._closed:
                        self._cond.wait(0.05)
        with self._cond:
            jobs = [s.job for s in self.slots if s.job is not None] + self.waiting
            self.waiting = []
            calls, self._calls = self._calls, []
        for _, done in calls:
            done.set_exception(RuntimeError("the model was unloaded"))
        for slot in self.slots:
            if slot.job is not None:
                self._finish(slot, RuntimeError("the model was unloaded"))
        for job in jobs:
            if job.slot < 0:
                job.chain.close()
                job.out.put(RuntimeError("the model was unloaded"))

    def _drop_cancelled(self) -> None:
        for job in [j for j in self.waiting if j.cancelled.is_set()]:
            self.waiting.remove(job)
            job.chain.close()
            job.out.put(_END)
        for slot in self.slots:
            if slot.job is not None and slot.job.cancelled.is_set():
                self._finish(slot, None)

    def _free_for(self, job: Job) -> list[Slot]:
        free = [s for s in self.slots if s.job is None]
        if self.reserve_app and job.client != APP:
            free = [s for s in free if s.seq != 0]
        return free

    def _assign(self) -> None:
        """First come, first served: each waiting job, in order, takes a free slot; a job that finds
        none waits, and so do the ones behind it of the same kind. In a shared pool a job also waits
        until there is room for its whole prompt (`_spare`), and so do the ones behind it of the same
        side (the app's or the clients')."""
        still: list[Job] = []
        short: set[bool] = set()  # sides whose earlier job waits for room
        for job in self.waiting:
            free = self._free_for(job)
            if not free or (still and any(j.client == job.client for j in still)):
                still.append(job)
                continue
            if (job.client == APP) in short or len(job.prompt) + 1 > self._spare():
                short.add(job.client == APP)
                still.append(job)
                continue
            self._start(_pick(free, job.prompt), job)
        self.waiting = still

    # ------------------------------------------------------------------ jobs into slots and out

    def _requeue(self, slot: Slot) -> None:
        """The job being read in this slot gives its cells back and waits again as a new request
        (it has handed out nothing, so its reply will be the one it would have been)."""
        job = slot.job
        assert job is not None and job.pending is None
        log.info("parallel slots: the KV pool is full of replies being written; a %d-token prompt waits "
                 "for room again", len(job.prompt))
        self._clear(slot)
        slot.job = None
        job.slot, job.pos, job.reused, job.restored, job.exact = -1, 0, 0, 0, False
        job.bounds, job.saves, job.stores, job.held = None, (), (), False
        self.requeued += 1
        with self._cond:
            at = next((i for i, j in enumerate(self.waiting) if j.started > job.started), len(self.waiting))
            self.waiting.insert(at, job)

    def _start(self, slot: Slot, job: Job) -> None:
        slot.job, job.slot = job, slot.seq
        if slot.drafter is not None:  # before the slot's sequence is cut for the prompt: it follows the cut
            slot.drafter.start(job.prompt, job.draft and self.draft_max > 0)
            job.drafts = slot.drafter.stats
        job.bounds = self.plan.bounds(job.prompt)
        keep = self._keep(slot, job)
        slot.exact = min(slot.exact, keep)
        job.pos = job.reused = keep
        job.exact = keep == slot.exact
        if not job.exact:
            return
        saves, stores = self.plan.read_stops(job.prompt, job.bounds, keep, job.marks)
        if slot.checkpoints is not None and slot.checkpoints.limit:
            job.saves = tuple(sorted(saves))
        if self.cache is not None and self.cache.enabled:
            job.stores = tuple(sorted(stores))

    def _step(self) -> bool:
        """One decode for every busy slot: pending tokens (each followed by its reply's draft, if any),
        then prompt pieces in arrival order; the drafts take only the room the pieces leave. Where the
        pool has no room for it, the step is tried again with less (docs/architecture/decode-loop.md).
        Whether anything was decoded."""
        started = time.perf_counter()
        busy = [s for s in self.slots if s.job is not None]
        writers: list[Slot] = []  # slots whose reply has a pending token
        for slot in busy:
            job = slot.job
            assert job is not None
            if job.pending is not None:
                if len(slot.tokens) >= self.n_ctx_seq:
                    self._finish(slot, RuntimeError(f"the context is full ({self.n_ctx_seq} tokens)"))
                    continue
                writers.append(slot)
        pieces = self._pieces(busy, 0 if self.apart else len(writers))
        if self.apart:
            writers, pieces = self._apart(writers, pieces)
        used = len(writers) + sum(upto - first for _, first, upto in pieces)  # rows in the batch so far
        outputs = len(writers) + sum(upto == len(s.job.prompt) for s, _, upto in pieces if s.job)  # rows of logits
        guesses = {slot.seq: guess for slot in writers if (guess := self._guess(slot))}
        lengths = self._lengths(writers, pieces, guesses,
                                min(self.n_batch - used, self.outputs - outputs, self._free() - used))
        while True:
            rows, piece_rows, n = self._fill(writers, pieces, guesses, lengths)
            if n == 0:
                return False
            rc = self.lc.llama_decode(self.ctx, self._batch)
            if rc == 0:
                break
            if rc != 1 or self.pool is None:
                raise RuntimeError(f"llama_decode returned {rc}")
            # no room in the KV pool (llama.cpp changed nothing): try again with less
            self.full_steps += 1
            if self._evict(n, at_least_one=True):
                continue
            if lengths:
                lengths = {}
                continue
            if pieces:
                newest = max((s for s, _, _ in pieces), key=lambda s: s.job.started if s.job else 0.0)
                assert newest.job is not None
                newest.job.held = True
                self.held_back += 1
                pieces = [p for p in pieces if p[0] is not newest]
                continue
            readers = [s for s in busy if s.job is not None and s.job.prefilling and s.tokens]
            if readers:
                self._requeue(max(readers, key=lambda s: s.job.started if s.job else 0.0))
                continue
            newest = max(writers, key=lambda s: s.job.started if s.job else 0.0)
            log.warning("parallel slots: the KV pool (%d cells) is full of %d replies being written; the "
                        "newest ends", self.pool, len(writers))
            self._finish(newest, RuntimeError(f"the context is full: its {self.pool:,} tokens are shared by "
                                              f"{len(writers)} replies being written, this one the newest"))
            self._clear(newest)
            self.cut += 1
            writers.remove(newest)
        self.steps += 1
        batch = self._batch
        if len({batch.seq_id[i][0] for i in range(n)}) > 1:
            self.shared_steps += 1
        checkpoint_at: list[Slot] = []
        for slot, _, draft in rows:  # what the sequences hold now
            job = slot.job
            assert job is not None
            if job.pending is not None:
                slot.tokens.append(job.pending)
                slot.tokens.extend(draft)
        for (slot, first, upto), row in zip(pieces, piece_rows, strict=True):
            job = slot.job
            assert job is not None
            slot.tokens.extend(job.prompt[first:upto])
            if slot.drafter is not None:
                slot.drafter.kept(job.prompt[first:upto], first, row)
            job.pos = upto
            if job.exact:
                slot.exact = self.plan.floor(job.bounds, upto)
            if upto in job.saves or upto in job.stores:
                checkpoint_at.append(slot)
        for slot in checkpoint_at:
            job = slot.job
            assert job is not None
            if job.pos in job.saves and slot.checkpoints is not None and slot.checkpoints.at(job.pos) is None:
                slot.checkpoints.save(job.pos)
            if job.pos in job.stores and self.cache is not None:
                self.cache.store(self.ctx, slot.seq, np.asarray(slot.tokens, dtype=np.int32), keep_until(job.keep))
        # a step of replies only in one micro-batch: its time (drafting and sampling in) is the cost of its rows
        timed = self.draft_max > 0 and not pieces and any(s.job is not None and s.job.draft for s in writers) \
            and len(self._split([(s.seq, 1 + lengths.get(s.seq, 0)) for s in writers])) == 1
        now = time.perf_counter()
        # every reply samples before any reader is handed its tokens: a reader woken earlier would take
        # the GIL at the next llama.cpp call of this loop and hold the step up while it handles its token
        handed: list[tuple[Job, Any]] = []
        ended: list[Slot] = []
        for slot, first, draft in rows:
            job = slot.job
            assert job is not None
            if job.pending is None:
                job.prompt_seconds = now - job.started
            base = len(slot.tokens) - 1 - len(draft)  # where a writer's pending token went
            samples = self._verify(slot, job, first, draft)
            if samples is None:
                continue
            if slot.drafter is not None and job.pending is not None:
                slot.drafter.kept(slot.tokens[base:], base, first)  # the pending token and the accepted draft
                if not draft and slot.seq in guesses:  # not drafted, yet checked for free
                    slot.drafter.checked(guesses[slot.seq], samples, False)
            for i, token in enumerate(samples):
                handed.append((job, job.on_token(token, first + i) if job.on_token is not None else token))
                job.generated += 1
                job.pending = token
                if job.eog(token) or job.generated >= job.max_new:
                    ended.append(slot)
                    break
        for job, item in handed:
            job.out.put(item)
        for slot in ended:
            self._finish(slot, None)
        if timed:
            self.costs.observe(n, time.perf_counter() - started)
        return True

    def _verify(self, slot: Slot, job: Job, first: int, draft: list[int]) -> list[int] | None:
        """The reply's tokens from its rows (from batch row `first`): with a draft, the samples while
        they agree with it and the model's own next token, the rejected tail cut from the slot's
        sequence; None when llama.cpp could not cut it (the reply ends with the error)."""
        samples: list[int] = []
        for i in range(len(draft) + 1):
            token = self.picker.sample(job.chain, first + i)
            samples.append(token)
            if i == len(draft):
                break
            if token != draft[i] or job.eog(token):  # an end of generation ends the reply: nothing after it
                break
        if not draft:
            return samples
        assert slot.drafter is not None  # a draft is its drafter's
        slot.drafter.checked(draft, samples, True)
        keep = len(slot.tokens) - len(draft) + len(samples) - 1  # the pending token and the accepted draft
        if keep < len(slot.tokens):
            if not self.lc.llama_memory_seq_rm(self.mem, slot.seq, keep, -1):
                self._finish(slot, RuntimeError(f"llama.cpp could not take back {len(slot.tokens) - keep} "
                                                "rejected draft tokens"))
                self._clear(slot)
                return None
            del slot.tokens[keep:]
        return samples

    def _finish(self, slot: Slot, error: BaseException | None) -> None:
        """The job leaves its slot; the slot keeps what its sequence holds for the next prompt."""
        job = slot.job
        if job is None:
            return
        slot.job, slot.used_at = None, time.monotonic()
        job.chain.close()
        job.out.put(error if error is not None else _END)
        with self._cond:
            self._cond.notify_all()


def _pick(free: list[Slot], prompt: list[int]) -> Slot:
    """The slot that holds this prompt's conversation: the longest shared prefix among the slots it
    would keep at least half of (a follow-up shares all but the last reply's end); else the least
    recently used one, so that an unrelated request (which shares little more than the template's
    first tokens with every slot) does not overwrite a conversation that is still going on."""
    shared = {s.seq: shared_prefix(s.tokens, prompt) for s in free}
    kept = [s for s in free if s.tokens and 2 * shared[s.seq] >= len(s.tokens)]
    if kept:
        return max(kept, key=lambda s: (shared[s.seq], -s.used_at))
    return min(free, key=lambda s: (bool(s.tokens), s.used_at))


def outbox() -> queue.SimpleQueue[Any]:
    """A reply's tokens on their way from the scheduler's thread to its reader: a C queue, whose `put`
    (every token of every reply, on the thread the decode waits for) costs a fifteenth of
    `queue.Queue`'s, whose Python condition variable the scheduler held the GIL in (with 4 slots
    behind the server, 40 % of its Python time)."""
    return queue.SimpleQueue()


__all__ = ["Job", "Scheduler", "Slot", "outbox", "shared_prefix"]
