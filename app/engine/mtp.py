"""Drafting with the model's own multi-token-prediction head (llama.cpp's `draft-mtp`). No Qt.

Files whose header says `{arch}.nextn_predict_layers > 0` (the public Qwen3.6 MTP files) carry a head
that predicts the token after next from the model's last hidden state. llama.cpp runs it in a second
context on the same model; this module drives it as llama.cpp's `common_speculative_impl_draft_mtp`
does: the head follows every decode of the target (`MtpHead`), and `MtpDrafter` is the slots'
`Drafter` that proposes its guesses, one draft context shared by every slot, a sequence each.

How the head follows, drafts and is rolled back, and what it measured: docs/architecture/drafting.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.engine.drafting import PRIOR, BatchCosts, DraftStats, best_length, count_check
from app.machine.llama_backend import llama, llama_ext

PROBE_EVERY = 8  # while drafting does not pay: the first guess after this many tokens, checked for free
PROBE_MAX = 128  # ... and the interval doubles after each such guess, up to this
CATCH_UP = 8  # positions the head catches up on before such a guess (the older ones it skips)
H_KEPT = 64  # hidden states kept of the last positions (where the cache may be cut back to, or caught up on)


def has_head(llm: Any) -> bool:
    """The loaded model carries a multi-token-prediction head (`nextn_predict_layers > 0`)."""
    return int(llama().llama_model_n_layer_nextn(llm.model)) > 0


def drafter(llm: Any, speculative: str) -> str:
    """What drafts for this model under the setting: "mtp", "ngram" or "" (nothing). auto: the MTP head
    where the file has one, else n-grams; mtp: the head only (a file without one drafts nothing)."""
    if speculative == "off":
        return ""
    if speculative in ("auto", "mtp") and has_head(llm):
        return "mtp"
    return "ngram" if speculative in ("auto", "ngram") else ""


class HeadContext:
    """The head's draft context (one for every slot: a sequence each, as llama-server's draft-mtp holds
    one per slot), its batch, and whether the target hands out its hidden states (while any slot's head
    wants them). Used from the scheduler's thread only."""

    def __init__(self, llm: Any, n_seq: int = 1) -> None:
        lc, ext = llama(), llama_ext()
        if not has_head(llm):
            raise ValueError("the model has no multi-token-prediction head")
        self.lc, self.ext, self.target = lc, ext, llm.ctx
        self.n_vocab = llm.n_vocab()
        self.n_embd = int(lc.llama_model_n_embd_out(llm.model))
        tp = llm.context_params
        cp = lc.llama_context_default_params()
        cp.ctx_type = lc.LLAMA_CONTEXT_TYPE_MTP
        cp.n_ctx = lc.llama_n_ctx(llm.ctx)  # as many positions as the target (as llama-server sizes it)
        cp.n_batch, cp.n_ubatch = lc.llama_n_batch(llm.ctx), lc.llama_n_ubatch(llm.ctx)
        # a draft step wants one row of logits; llama.cpp reserves one a sequence at least (llama_context's
        # constructor: output_reserve(n_seq_max), which asserts n_outputs_max covers it)
        cp.n_seq_max = cp.n_outputs_max = max(n_seq, 1)
        cp.n_rs_seq = 0
        cp.kv_unified = tp.kv_unified if n_seq > 1 else cp.kv_unified  # the slots' pool, shared as the target's
        cp.n_threads, cp.n_threads_batch = tp.n_threads, tp.n_threads_batch
        cp.flash_attn_type, cp.type_k, cp.type_v = tp.flash_attn_type, tp.type_k, tp.type_v
        cp.no_perf = True
        cp.ctx_other = llm.ctx
        self.ctx = lc.llama_init_from_model(llm.model, cp)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create the MTP head's draft context")
        self.mem = lc.llama_get_memory(self.ctx)
        self.n_batch = int(lc.llama_n_batch(self.ctx))
        # the target hands out every position's hidden state; the head only its output rows'
        ext.llama_set_embeddings_nextn(self.target, True, False)
        ext.llama_set_embeddings_nextn(self.ctx, True, True)
        self.extracting = True
        self.wanting: set[int] = set()  # the sequences whose heads want the target's hidden states
        self.batch = lc.llama_batch_init(self.n_batch, self.n_embd, 1)  # embd rows; tokens beside them
        self._tokens = (lc.llama_token * self.n_batch)()
        self.batch.token = self._tokens
        self.rows = np.ctypeslib.as_array(self.batch.embd, shape=(self.n_batch, self.n_embd))

    def want(self, seq: int, want: bool) -> None:
        """Sequence `seq`'s head wants the target's hidden states (or not): the target hands them out
        while any head does."""
        (self.wanting.add if want else self.wanting.discard)(seq)
        extract = bool(self.wanting)
        if extract != self.extracting:
            self.ext.llama_set_embeddings_nextn(self.target, extract, False)
            self.extracting = extract

    def close(self) -> None:
        if self.ctx:
            self.ext.llama_set_embeddings_nextn(self.target, False, False)
            self.extracting = False
            self.batch.token = None  # ours, not llama_batch_init's: it must not free it
            self.lc.llama_batch_free(self.batch)
            self.lc.llama_free(self.ctx)
            self.ctx = None


class MtpHead:
    """The head following one target sequence (`seq`, a slot's) in the draft context it shares with the
    heads of the other slots (`share`: one of them; else a context of `n_seq` sequences is made). Not
    thread-safe: the scheduler's thread that owns it (through MtpDrafter) is the only one that calls it."""

    def __init__(self, llm: Any, n_seq: int = 1, *, share: MtpHead | None = None, seq: int = 0) -> None:
        self.shared: HeadContext = share.shared if share is not None else HeadContext(llm, n_seq)
        shared = self.shared
        self.lc, self.ext, self.target, self.llm = shared.lc, shared.ext, shared.target, llm
        self.n_vocab, self.n_embd, self.n_batch = shared.n_vocab, shared.n_embd, shared.n_batch
        self.ctx, self.mem, self.batch, self._rows = shared.ctx, shared.mem, shared.batch, shared.rows
        self.seq = seq
        self.n = 0  # positions below this have their row in the head's cache (gaps aside)
        self._h: dict[int, np.ndarray] = {}  # the target's hidden state where batches ended, or kept to catch up
        self._idle = 0  # tokens since the last guess, while drafting does not pay
        self._interval = PROBE_EVERY  # tokens between such guesses
        self.ok = True  # False after a failed decode: the head drafts no more (the target is unaffected)
        self.following = True  # False while drafting does not pay: rows are kept, not decoded
        self._drafting = True  # False in a reply that does not draft: nothing followed or kept
        self._extracting = True  # this head wants the target's hidden states (HeadContext.want)
        shared.want(seq, True)
        self._recheck = False  # a one-token guess was just checked: work out the draft length again
        self.steps = 0  # draft decodes made (each one row of logits)
        self.history: Any = llm.input_ids  # the target sequence's tokens by position (a catch-up reads them)

    def close(self) -> None:
        """Closes the draft context, for every slot's head (the scheduler closes them together)."""
        self._extracting = False
        self.shared.close()

    # ------------------------------------------------------------ following the target's cache

    def resume(self, drafting: bool = True, pays: bool = True) -> None:
        """A new reply. `pays`: drafting pays at the rate the head has kept so far (its MtpDrafter carries
        it from reply to reply): follow the prompt, and guess at the first chance. Otherwise the guesses
        go on where the last reply left them (every PROBE_MAX tokens, for a head that never guesses
        right), with a catch-up each. A reply that does not draft (one that reads logprobs): nothing is
        followed or kept; a later reply catches up on what it needs."""
        self._drafting = drafting
        self.following = drafting and pays
        if self.following:
            self._idle = 0
            self._interval = PROBE_EVERY
        self._extract()

    def reset(self) -> None:
        self.lc.llama_memory_seq_rm(self.mem, self.seq, 0, -1)
        self.n = 0
        self._h.clear()

    def cut(self, n: int) -> None:
        """The target's cache now holds its first n positions."""
        if self.n > n:
            self.lc.llama_memory_seq_rm(self.mem, self.seq, n, -1)
            self.n = n
        for p in [p for p in self._h if p >= n]:
            del self._h[p]

    def follow(self, tokens: Sequence[int], pos: int, row: int = 0) -> None:
        """The target has just decoded a batch with `tokens` at positions pos.. from batch row `row`
        (its hidden states still in its context, one a row in batch order): give the head the same
        positions it does not hold yet, or, while it is not following, keep the latest positions'
        hidden states for a later catch-up."""
        if not tokens:
            return
        m = len(tokens)
        if not self._extracting:
            return  # a token too far from the next guess to be caught up on (or a reply that does not draft)
        rows = np.ctypeslib.as_array(self.ext.llama_get_embeddings_nextn(self.target), shape=(row + m, self.n_embd))
        h = rows[row:]
        if self.ok and self.following:
            first = max(pos, self.n)
            before = self._before(pos) if first == pos else None
            self.batch.n_tokens = 0
            for q in range(first, pos + m):
                hidden = h[q - pos - 1] if q > pos else before
                if hidden is not None:
                    self._add(tokens[q - pos], q, hidden, False)
            self._decode()
            self.n = max(self.n, pos + m)
        elif self.ok:
            for q in range(max(pos, pos + m - CATCH_UP), pos + m - 1):
                self._keep(q, h[q - pos])
        self._keep(pos + m - 1, h[m - 1])

    def _catch_up(self, pos: int) -> None:
        """Decode, in one batch, the positions below `pos` (the target's cache: its tokens are the target's
        own) the head has not followed, for which the target's hidden state before it was kept (the latest
        CATCH_UP; older ones are a gap)."""
        ids = self.history
        self.batch.n_tokens = 0
        for q in range(max(self.n, pos - CATCH_UP), pos):
            row = self._before(q)
            if row is not None:
                self._add(int(ids[q]), q, row, False)
        self._decode()
        self.n = max(self.n, pos)

    def _before(self, pos: int) -> np.ndarray | None:
        """The target's hidden state at pos - 1 (zeros before the first position, as llama.cpp starts)."""
        if pos == 0:
            return np.zeros(self.n_embd, np.float32)
        return self._h.get(pos - 1)

    def _keep(self, pos: int, row: np.ndarray) -> None:
        self._h[pos] = row.copy()
        if len(self._h) > H_KEPT:
            del self._h[min(self._h)]

    # ------------------------------------------------------------ drafting

    def guess(self, token: int, pos: int, room: int, rate: float, costs: BatchCosts) -> tuple[list[int], bool]:
        """(the head's guess after the pending `token` at `pos`, whether to verify it): as long as pays
        at the running acceptance rate and the costs (a verify batch plus the head's steps); when no
        length pays, a one-token guess every PROBE_EVERY tokens, to be checked by plain decoding."""
        if not self.ok or room <= 0:
            return [], False
        guess, worth = self._guess(token, pos, room, rate, costs)
        self._extract()
        return guess, worth

    def _guess(self, token: int, pos: int, room: int, rate: float, costs: BatchCosts) -> tuple[list[int], bool]:
        if not self.following and not self._recheck and self._idle + 1 < self._interval:
            self._idle += 1  # no length paid at the last check, and the rate has not moved since
            return [], False
        self._recheck = False
        k = best_length(rate, costs, room)
        if k == 0:
            self.following = False
            self._idle += 1
            if self._idle < self._interval:
                return [], False
            self._idle = 0
            self._interval = min(2 * self._interval, PROBE_MAX)
            self._recheck = True  # plain decoding checks this guess: the rate moves, so check again next step
            return self.draft(token, pos, 1), False
        self._idle, self._interval = 0, PROBE_EVERY
        guess = self.draft(token, pos, k)
        self.following = True
        return guess, bool(guess)

    def _extract(self) -> None:
        """The target hands out its hidden states only while the head needs them: while it follows, and in
        the CATCH_UP tokens before a guess and the step after one (on the tiny hybrid here, a plain decode
        that hands them out costs 5 % more)."""
        want = self.ok and self._drafting and (self.following or self._recheck
                                              or self._interval - self._idle <= CATCH_UP + 1)
        if want != self._extracting:
            self.shared.want(self.seq, want)
            self._extracting = want

    def draft(self, token: int, pos: int, k: int) -> list[int]:
        """Up to k greedy tokens of the head after the pending `token` at `pos`. Its first row stays in
        the head's cache (the pending token's, as following would add it); the others are cut."""
        if k <= 0 or not self.ok:
            return []
        if self.n < pos:
            self._catch_up(pos)
        h = self._before(pos)
        if h is None:
            return []
        if self.n > pos:
            self.lc.llama_memory_seq_rm(self.mem, self.seq, pos, -1)
        out: list[int] = []
        row = h
        for i in range(k):
            self.batch.n_tokens = 0
            self._add(token if i == 0 else out[-1], pos + i, row, True)
            if not self._decode():
                break
            self.steps += 1
            if i == 0:
                self.n = pos + 1
            logits = np.ctypeslib.as_array(self.lc.llama_get_logits_ith(self.ctx, 0), shape=(self.n_vocab,))
            out.append(int(logits.argmax()))
            if i + 1 < k:
                row = np.ctypeslib.as_array(self.ext.llama_get_embeddings_nextn_ith(self.ctx, 0), shape=(self.n_embd,))
        if k > 1:
            self.lc.llama_memory_seq_rm(self.mem, self.seq, pos + 1, -1)
        return out

    def _add(self, token: int, pos: int, row: np.ndarray, logits: bool) -> None:
        b = self.batch
        i = b.n_tokens
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = self.seq
        b.logits[i] = 1 if logits else 0
        self._rows[i] = row
        b.n_tokens = i + 1

    def _decode(self) -> bool:
        if self.batch.n_tokens == 0:
            return True
        if self.lc.llama_decode(self.ctx, self.batch) != 0:
            self.ok = False  # its cache no longer follows the target's: no more drafts from it
            return False
        return True

    # ------------------------------------------------------------ costs

    def step_cost(self, llm: Any, rounds: int = 3) -> float:
        """A draft step (one row with logits) relative to one plain decode of the target, timed after a
        short context, the fastest of `rounds` each. Leaves both caches empty."""
        lc = self.lc
        base = [1 + (7 * i) % max(self.n_vocab - 2, 1) for i in range(16)]
        one = (lc.llama_token * 1)()
        target = step = float("inf")
        try:
            for _ in range(rounds):
                llm.reset()
                self.reset()
                llm.eval(base)
                self.follow(base, 0)
                lc.llama_synchronize(llm.ctx)
                one[0] = base[0]
                started = time.perf_counter()
                lc.llama_decode(llm.ctx, lc.llama_batch_get_one(one, 1))
                lc.llama_synchronize(llm.ctx)
                target = min(target, time.perf_counter() - started)
                started = time.perf_counter()
                self.draft(base[0], len(base), 1)
                lc.llama_synchronize(self.ctx)
                step = min(step, time.perf_counter() - started)
        finally:
            llm.reset()
            self.reset()
            self.steps = 0
        return step / target if target > 0 and step < float("inf") else 1.0


class MtpDrafter:
    """The head as a slot's `app.engine.drafting.Drafter`: it follows every decode of the slot's
    sequence (`kept`, at the slot's batch rows) and drafts from the pending token. How often it guesses
    right is the model's, not the text's: its rate carries from reply to reply. Its costs are the
    target's batches plus its own steps (`with_steps`); it drafts at most `k_max` tokens."""

    def __init__(self, head: MtpHead, costs: BatchCosts, n_ctx: int, k_max: int) -> None:
        self.head = head
        self.costs = costs
        self.k_max = k_max
        self.history = np.zeros(n_ctx + 1, dtype=np.int32)  # the sequence's tokens (the head's catch-ups read them)
        head.history = self.history
        self.n = 0  # the sequence's length
        self.stats = DraftStats(mtp=True, rate=PRIOR)
        self.draft = False

    def close(self) -> None:
        self.head.close()

    def start(self, prompt: Sequence[int], draft: bool) -> None:
        self.draft = draft
        self.stats = DraftStats(mtp=True, rate=self.stats.rate)
        self.history[:len(prompt)] = prompt
        self.head.resume(draft, best_length(self.stats.rate, self.costs, self.k_max) > 0)

    def propose(self, pending: int, k: int) -> list[int]:
        """The head's guess, as long as pays at the running rate; while none pays, a one-token guess now
        and then that plain decoding checks for free (MtpHead.guess)."""
        if not self.draft:
            return []
        guess, _ = self.head.guess(pending, self.n, k, self.stats.rate, self.costs)
        return guess

    def checked(self, guess: list[int], samples: list[int], drafted: bool) -> None:
        count_check(self.stats, guess, samples, drafted)

    def kept(self, tokens: Sequence[int], pos: int, row: int) -> None:
        self.history[pos:pos + len(tokens)] = tokens
        self.n = pos + len(tokens)
        self.head.follow(tokens, pos, row)

    def cut(self, n: int) -> None:
        self.n = min(self.n, n)
        self.head.cut(n)

    def reset(self) -> None:
        self.n = 0
        self.head.reset()


def with_steps(costs: BatchCosts, step: float) -> BatchCosts:
    """A verify batch of n tokens plus the n - 1 head steps that drafted them, relative to one decode."""
    return BatchCosts([c + i * step for i, c in enumerate(costs.relative)])
