"""The decode loop: the replies of one llama.cpp context, one slot each, one slot or several at once
(continuous batching). Every reply the engine writes goes through it. No Qt.

The context holds `n` sequences (`n_seq_max`) in one pool of KV cells (llama.cpp's unified cache,
`kv_unified`, as llama-server has them since late 2025: llama_load makes it), each sequence with, on a
hybrid model such as Clover, its own recurrent state. Any slot may use the whole context: a lone
conversation keeps all of it. One scheduler thread owns every decode: each step it
puts into one `llama_batch` the pending token of every reply being written and, in what room is left
(`n_batch`), the next pieces of prompts being read, first come first served; one `llama_decode`; then
each reply's own sampler chain picks its token from its own row of logits. A request joins at the
next step and leaves the step it ends, is cancelled or its reader goes away: its slot is free at once.

Each slot keeps the tokens its sequence holds after its last reply, so a request goes to the free
slot whose cache shares the longest prefix with its prompt (llama-server's slot similarity) and
evaluates only the rest: from the last bound of its prompt within what it
shares that the slot computed as a read from token 0 does (`app.engine.read_plan`: turn starts and
chunks from each), in the same pieces from there, so that a reply does not depend on what the slot
held; a longer prefix in the prompt cache (`app.engine.prompt_cache`, which every slot's reads fill)
is restored into the slot instead. The KV cache is cut there; on a hybrid model, whose recurrent
state cannot be cut, the slot goes back to its latest context checkpoint at or before it
(`app.engine.checkpoints`, one set per slot, all on bounds) or starts the sequence again. A chunk is
n_batch less one token for each other slot, so that a batch always holds a whole piece beside every
other reply's pending token: a prompt read while others write keeps its bounds (a second prompt read
at the same time waits for room for its whole next piece).

The pool (`pool` cells) is shared, and counted: a waiting request starts only where the cells busy
slots hold or will take for the rest of their prompts leave room for its whole prompt (idle slots'
cells count as room), else it waits, and so do the requests behind it (first come, first served).
When `llama_decode` finds no room (it returns 1, having changed nothing), the step is tried again with
less: first the sequences of idle slots are evicted, least recently used first (the whole sequence,
its tokens and checkpoints: the prompt cache may still hold its prefix), as many as the step's rows
need by count and at least one; then the step's drafts are left out; then the prompt pieces of the
newest job being read are held back (it waits, in its slot, until there is room for all of its
prompt); then the newest job being read gives its cells back and waits again as a new request (it
has handed out nothing: read again later, its reply is the one it would have been). A reply being
written is never cut for another's prompt; only where replies being written fill the pool by
themselves does the newest of them end, with "the context is full". No reply's own sequence is touched
by any of this, so its tokens do not depend on an eviction beyond rounding: where its cells lie and how
many cells the pool has in use do change how llama.cpp's attention sums them (it visits cells in
order, and picks its CPU kernel by the cells in use), which can flip a near-tie on a quantized model
(LoadSettings.kv_unified False gives each sequence its own cells, for bit-for-bit comparisons). A
prompt cache entry is restored only into room made for it the same way (llama.cpp needs free cells
for it).

Speculative decoding, per slot (`Job.draft`): a reply with a pending token and a guess worth checking
(its slot's `app.engine.drafting.Drafter`, n-gram lookup, which follows what the slot's sequence holds,
with each reply's own running acceptance rate, so a reply whose guesses keep failing stops drafting)
puts it after its pending token, logits on every row, in the room the step's prompt pieces leave (a
piece still fits whole) and within the context's rows of logits (`n_outputs_max`, which llama.cpp
enforces by aborting) and in the pool's free cells (a draft never evicts anything). How much of each
guess goes in is chosen for the step as a whole (`_lengths`): the measured batch costs of the micro-batches llama.cpp
cuts the step into, where a sequence with more rows than the others gets micro-batches of its own.
After the decode the reply's chain samples row by row while the samples agree with the guess; the
rejected tail is removed from its own sequence only, and every token is handed out in order as one is
otherwise. Where the cache cannot be cut (a hybrid model such as Clover) the tail is rolled back by
llama.cpp's per-sequence snapshots (`n_rs_seq`, set at context creation), exact within the batch just
decoded, which is the one being cut: llama.cpp keeps a rollback index per sequence and the last
n_rs_seq + 1 tokens of each sequence in one micro-batch (llama-memory-recurrent.cpp, `seq_rm`,
`init_batch`; llama-batch.cpp, `split_equal`'s n_keep_tail), as llama-server's slots rely on; a context
made without them (n_rs_seq = 0) drafts nothing on such a model. A model with an MTP head drafts
with it in every slot (`app.engine.mtp.MtpDrafter`: one draft context, a sequence a slot, as
llama-server's draft-mtp).

Exactness: a reply's tokens are sampled from its own sequence's logits with its own chain, so at
temperature 0 it is the reply it makes alone, up to the numerics of batched kernels (a row
of a matrix product may be summed in another order when the batch holds other rows, and the chunk is
not a lone slot's); the tests show both, against a same-batch reference, and that the same traffic
with drafts gives the replies it gives without (tests/engine/test_slot_drafting.py). A request read and
written with no other traffic gives the same reply every time, whatever its slot held; traffic, now or
when the prefix it reuses was read, can move a near-tie, and in the shared pool so can what the other
sequences hold (above; SmolLM2 measured: replies beside others part from lone ones at near-ties of
0.002 to 0.13 logits in up to 3 of 8, none with each sequence its own cells; drafted and plain replies
in 7 of 12, logits within 0.64; the F32 hybrid's logits within 5e-3). On a CPU the largest part is
llama.cpp's flash attention: a step of one token whose attention spans 512 cells or more (more than 256
cached) splits the cells across threads and adds the parts, a step of several rows does not, and both
accumulate an F16 cache's values in F16 (ggml-cpu ops.cpp, `use_split_kv_path`): SmolLM2's logits of the
same positions, one at a time or in one batch, measured 0.5 to 1.1 apart at 311 tokens, identical at 30
(with a q8_0 cache neither path is taken, and they are identical; tests/bench/speculative.py `--kv`).
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
from app.engine.drafting import BatchCosts, Drafter, DraftStats, NgramDrafter, expected_tokens, micro_batches
from app.engine.mtp import MtpDrafter, MtpHead
from app.engine.prompt_cache import PromptCache, keep_until
from app.engine.read_plan import ReadPlan, turn_start_ids
from app.engine.sampler import Picker, ReplyChain, prefill_chunk
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


class Scheduler:
    """The slots of one loaded `llama_cpp.Llama` (made with n_seq_max = n) and the thread that
    decodes for them. `reserve_app`: slot 0 is kept for the app's own requests (the window's chat is
    never starved by clients of the local server); they may also take any other free slot."""

    def __init__(self, llm: Any, n: int, *, checkpoints: int = 0, reserve_app: bool = False,
                 draft_max: int = 0) -> None:
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

    # ------------------------------------------------------------------ the shared pool

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

    def _step(self) -> bool:
        """One decode for every busy slot: pending tokens (each followed by its reply's draft, if any),
        then prompt pieces in arrival order; the drafts take only the room the pieces leave. Where the
        pool has no room for it, the step is tried again with less (the module's docstring). Whether
        anything was decoded."""
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
        pieces = self._pieces(busy, len(writers))
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


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens two token lists share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
