"""The token loop: the prompt (reusing what the context already holds), then one token at a time,
sampled and decoded. No Qt.

It does what llama-cpp-python's `Llama.generate` does (prefix reuse, the same sampler chain from
`Llama._init_sampler`, `Llama.eval` for the prompt), with three differences:

- the cached prefix is reused only up to a bound of the prompt (`app.engine.read_plan`: a turn start,
  or a prefill chunk's end counted from one) where a cold read of it also stopped, and the rest is read
  bound to bound, so the reply does not depend on what the cache held: llama.cpp's kernels round a
  batch of one token, or a batch cut elsewhere, otherwise than the same tokens in a cold read's batch
  (SmolLM2's Q4_1: up to 0.72 of a logit), and at temperature 0 near-ties flipped between a first
  request and its rerun. The previous reply's tokens, decoded one at a time, are read again as a
  prompt; a longer prefix in the prompt cache (`app.engine.prompt_cache`) is restored instead of read;

- tokens are sampled through `app.engine.sampler`'s picker, which gives the chain fewer candidates
  than the whole vocabulary where that changes nothing;
- each generated token is decoded on a batch made once, not through `Llama.eval`'s per-call set-up.

And two additions:
- on a model whose cache cannot be cut back (hybrid or recurrent, as Clover), where `Llama.generate`
  starts the prompt again from token 0, the loop keeps context checkpoints (`app.engine.checkpoints`)
  at bounds and restarts from the latest one it may reuse;
- speculative decoding (`app.engine.drafting`): the pending token and a draft go into one batch, the
  chain samples every position, and the draft is kept while the samples agree; the rejected tail is
  cut from the cache (on a hybrid model by llama.cpp's `n_rs_seq` rollback, which is exact within the
  last batch only: that batch is the one just decoded). The draft comes from n-grams or, where the
  model has one, from its MTP head (`app.engine.mtp`), which follows every change to the cache.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import numpy as np

from app.engine.checkpoints import Checkpoints
from app.engine.drafting import PRIOR, BatchCosts, DraftStats, best_length, count_check, fill_batch, lookup
from app.engine.prompt_cache import PromptCache, keep_until
from app.engine.read_plan import ReadPlan, turn_start_ids
from app.engine.sampler import Picker, ReplyChain, prefill_chunk
from app.machine.llama_backend import llama


class TokenLoop:
    """Generates from one `llama_cpp.Llama`; the caller holds the engine's lock.

    Reuse (`_prefill`): `exact` counts the tokens at the cache's start that were computed as a read
    from token 0 computes them (bound to bound, never one generated token at a time): a bound of them.
    A prompt keeps at most `ReadPlan.reuse` of the cache (or restores a longer prefix from the prompt
    cache, `cache`) and reads the rest from there in the same pieces, so its state, logits and tokens
    are bit for bit those of a cold read. `resume` (the same reply going on from its own tokens, after a forced end of
    thinking) keeps every shared token instead: what it reads then depends only on the request too.

    `checkpoints`: how many context checkpoints to keep where the cache cannot be cut (0: none, and
    such a model evaluates every prompt from the start). `trace`, when a list, receives every change
    made to the cache, in order: a tuple of tokens evaluated in one call, or an int, the cache cut to
    that many tokens; a fresh context that replays it holds exactly this one's state (the tests'
    like-for-like reference)."""

    def __init__(self, llm: Any, checkpoints: int = 0, trace: list[tuple[int, ...] | int] | None = None,
                 draft_max: int = 0) -> None:
        self.llm = llm
        self.lc = llama()
        self.n_vocab = llm.n_vocab()
        self.picker = Picker(llm)
        self._one = (self.lc.llama_token * 1)()  # the batch of one generated token
        cut_back = not (llm._is_recurrent or llm._is_hybrid)  # noqa: SLF001 (llama-cpp-python's own flags)
        self.checkpoints = None if cut_back else Checkpoints(llm.ctx, checkpoints)
        self.trace = trace
        self.reused = 0  # of the last prompt, tokens the cache already held
        self.chunk = prefill_chunk(llm)
        self.plan = ReadPlan(self.chunk, turn_start_ids(llm))
        self.exact = 0  # cached tokens computed as a cold read computes them (a bound of theirs)
        self.cache: PromptCache | None = None  # the engine's prompt cache, attached by the engine
        self.restored = 0  # of the last prompt, tokens that came from the prompt cache
        self._bounds = np.zeros(0, dtype=np.int64)  # the bounds of the prompt being read
        self._prompt: list[int] = []  # and its tokens
        self.prompt_seconds = 0.0  # the last prompt's evaluation, wall clock
        # a draft is at most what the context keeps logits for (less the pending token) and, where the
        # cache cannot be cut, what llama.cpp can roll back
        limit = self.lc.llama_n_ctx(llm.ctx) if cut_back else self.lc.llama_n_rs_seq(llm.ctx)
        self.draft_max = max(0, min(draft_max, limit, llm.n_batch - 1))
        self.costs = BatchCosts()  # measured by the engine at load (drafting.measure_costs)
        self.drafts = DraftStats()  # of the last reply
        self._batch = self.lc.llama_batch_init(self.draft_max + 1, 0, 1) if self.draft_max else None
        self.mtp: Any = None  # the MTP head's drafter (app.engine.mtp.MtpHead), attached by the engine

    def close(self) -> None:
        if self.mtp is not None:
            self.mtp.close()
            self.mtp = None
        if self._batch is not None:
            self.lc.llama_batch_free(self._batch)
            self._batch = None

    def _prefill(self, tokens: list[int], resume: bool = False) -> list[int]:
        """Keep the part of the cached prefix the prompt may reuse (`ReadPlan.reuse`; with `resume`, all
        of it) and drop the rest of the cache; where it cannot be cut, go back to the latest checkpoint
        in that part, or start again. A longer prefix in the prompt cache is restored instead. Return
        the tokens still to be evaluated (empty: with `resume`, the whole prompt is cached with live
        logits)."""
        llm = self.llm
        keep = 0
        self.restored = 0
        self._prompt = tokens
        self._bounds = self.plan.bounds(tokens)
        if llm.n_tokens > 0:
            cached = np.asarray(llm._input_ids)
            n = min(len(cached), len(tokens))
            diff = np.flatnonzero(cached[:n] != np.asarray(tokens[:n], dtype=cached.dtype))
            longest = int(diff[0]) if len(diff) else n
            consumed = longest == len(tokens)
            if not resume:
                keep = self._cut(self.plan.reuse(self._bounds, len(tokens), longest, self.exact, cached))
            elif consumed and llm.n_tokens == len(tokens) and not llm._requires_eval:
                self.reused = len(tokens)
                return []
            else:
                keep = self._cut(longest - 1 if consumed else longest)  # at least one token to evaluate
        if not resume:
            restored = self._restore(tokens, keep)
            keep = restored or min(keep, llm.n_tokens)  # a failed restore leaves the sequence empty
        if keep == 0:
            self._reset()
        self.reused = keep
        return tokens[keep:]

    def _restore(self, tokens: list[int], keep: int) -> int:
        """Start the prompt from the longest entry of the prompt cache that is a prefix of it at one of
        its bounds, longer than the `keep` tokens the live sequence gives: its length (0: none)."""
        cache = self.cache
        if cache is None or not cache.enabled or self.trace is not None or len(tokens) < 2:
            return 0
        llm = self.llm
        entry, tried = cache.restore_longest(llm.ctx, 0, tokens, self._bounds, keep)
        if not tried:
            return 0
        if entry is None:  # the sequence was cleared for an entry that could not be used
            self._reset()
            return 0
        n = len(entry)
        llm.input_ids[:n] = entry.tokens
        llm.n_tokens = n
        llm._requires_eval = True
        self.exact = n
        self.restored = n
        if self.checkpoints is not None:
            self.checkpoints.clear()
        if self.mtp is not None:  # the head has nothing of this prefix: it follows from here, with a gap
            self.mtp.reset()
        return n

    def _cut(self, n: int) -> int:
        """Cut the cache to at most its first n tokens; return how many it keeps (0: nothing usable)."""
        llm = self.llm
        if n <= 0:
            return 0
        if n == llm.n_tokens:  # the prompt goes on where the cache ends
            self.exact = min(self.exact, n)
            return n
        if self.checkpoints is None:
            if not llm._ctx.kv_cache_seq_rm(-1, n, -1):
                return 0
        else:
            checkpoint = self.checkpoints.latest_at_or_before(n)
            if checkpoint is None:
                return 0
            if not self.checkpoints.restore(checkpoint):
                self.checkpoints.clear()
                return 0
            n = checkpoint.n_tokens
            self.checkpoints.drop_after(n)
            if self.trace is not None:
                del self.trace[checkpoint.trace_len:]
        if self.trace is not None and self.checkpoints is None:
            self.trace.append(n)
        if self.mtp is not None:
            self.mtp.cut(n)
        llm.n_tokens = n
        llm._requires_eval = True
        self.exact = min(self.exact, n)
        return n

    def _reset(self) -> None:
        self.llm.reset()
        self.exact = 0
        if self.mtp is not None:
            self.mtp.reset()
        if self.checkpoints is not None:
            self.checkpoints.clear()
        if self.trace is not None:
            self.trace.clear()

    def _evaluate(self, tokens: list[int], marks: tuple[int, ...], keep: float = 0.0) -> None:
        """Evaluate the prompt's remaining `tokens`. A read from where the exact part of the cache ends
        (a bound) is a cold read's: it decodes bound to bound (`app.engine.read_plan`), keeps context
        checkpoints where the cache cannot be cut and stores prompt cache entries, both at the bounds
        where a later prompt may part from this one (`marks`: positions in the whole prompt). A read
        from elsewhere (`resume`) keeps neither: no later prompt could reuse them."""
        llm = self.llm
        start, end = llm.n_tokens, llm.n_tokens + len(tokens)
        if start != self.exact:
            self._eval(tokens)
            return
        bounds = self._bounds
        checkpoints, saves = self.plan.read_stops(self._prompt, bounds, start, marks)
        if self.checkpoints is None or not self.checkpoints.limit:
            checkpoints = set()
        cache = self.cache if self.cache is not None and self.cache.enabled and self.trace is None else None
        i = int(np.searchsorted(bounds, start, side="right"))
        stops = [*(int(b) for b in bounds[i:] if b < end), end]
        for stop in stops:
            pos = llm.n_tokens
            self._eval(tokens[pos - start:stop - start])
            if stop in checkpoints and self.checkpoints is not None and self.checkpoints.at(stop) is None:
                self.checkpoints.save(stop, len(self.trace) if self.trace is not None else 0)
            if stop in saves and cache is not None:
                cache.store(llm.ctx, 0, np.asarray(llm._input_ids[:stop]), keep)
        self.exact = self.plan.floor(bounds, end)

    def _eval(self, tokens: list[int]) -> None:
        llm = self.llm
        if self.mtp is None:
            llm.eval(tokens)  # in n_batch pieces
        else:  # the same pieces, the MTP head following each while the target's hidden states are there
            for i in range(0, len(tokens), llm.n_batch):
                pos = llm.n_tokens
                llm.eval(tokens[i:i + llm.n_batch])
                self.mtp.follow(tokens[i:i + llm.n_batch], pos)
        if self.trace is not None:
            self.trace.append(tuple(tokens))

    def tokens(self, prompt: list[int], chain: ReplyChain, *, marks: tuple[int, ...] = (), draft: bool = False,
               resume: bool = False, keep: bool = False) -> Generator[int, None, None]:
        """Sampled tokens, one per step, until the caller stops asking (or the context is full: the
        next decode raises). `chain`: the reply's (`app.engine.sampler`), closed when the stream ends.
        `marks`: prompt positions worth a checkpoint (the last user message's start), where the cache
        cannot be cut. `draft`: speculative decoding, where it pays. `resume`: the prompt is the last
        reply's prompt and tokens and more: reuse all the cache holds. `keep`: the prompt cache keeps
        this prompt's entries longer (a client's mark)."""
        llm = self.llm
        drafting = draft and self._batch is not None
        if self.mtp is not None:  # how often the head guesses right is the model's: its rate carries over
            self.drafts = DraftStats(mtp=True, rate=self.drafts.rate if self.drafts.mtp else PRIOR)
            self.mtp.resume(drafting, best_length(self.drafts.rate, self.costs, self.draft_max) > 0)
        else:  # what n-grams find depends on the text: each reply starts afresh
            self.drafts = DraftStats()
        try:
            started = time.perf_counter()
            pending = self._prefill(list(prompt), resume)
            if pending:
                self._evaluate(pending, marks, keep_until(keep))
                self.lc.llama_synchronize(llm.ctx)
            self.prompt_seconds = time.perf_counter() - started
            token = self.picker.sample(chain)
            while True:
                yield token
                step = time.perf_counter()  # the step's own time, not the caller's (costs.observe)
                guess, worth = self._draft(token) if drafting else ([], False)
                if not worth:
                    self._decode_one(token)
                    token = self.picker.sample(chain)
                    if drafting:
                        self.costs.observe(1, time.perf_counter() - step)
                    if guess:  # not drafted, yet checked for free
                        count_check(self.drafts, guess, [token], drafted=False)
                    continue
                accepted, token = self._verify(token, guess, chain)
                self.costs.observe(len(guess) + 1, time.perf_counter() - step)
                yield from accepted
        finally:
            chain.close()

    def _draft(self, token: int) -> tuple[list[int], bool]:
        """(the lookup's guess after `token`, not yet decoded; whether it is worth verifying): the
        guess cut to the length that pays at the running acceptance rate and the measured batch costs."""
        llm = self.llm
        n = llm.n_tokens
        room = min(self.draft_max, llm.n_ctx() - n - 1)
        if room <= 0:
            return [], False
        if self.mtp is not None:
            return self.mtp.guess(token, n, room, self.drafts.rate, self.costs)
        llm.input_ids[n] = token  # the pending token's slot: where it goes when decoded
        guess = lookup(llm.input_ids[:n + 1], room)
        k = best_length(self.drafts.rate, self.costs, len(guess)) if guess else 0
        return (guess[:k], True) if k else (guess, False)

    def _verify(self, token: int, guess: list[int], chain: ReplyChain) -> tuple[list[int], int]:
        """Decode the pending token and the draft in one batch, sample every position with the chain
        while the samples agree with the draft, cut the rest: (accepted draft tokens, the next token)."""
        llm, lc = self.llm, self.lc
        n = llm.n_tokens
        seq = [token, *guess]
        fill_batch(self._batch, seq, n)
        rc = lc.llama_decode(llm.ctx, self._batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        llm.input_ids[n:n + len(seq)] = seq
        samples: list[int] = []
        for i in range(len(seq)):
            sampled = self.picker.sample(chain, i)
            samples.append(sampled)
            if i == len(guess) or sampled != guess[i]:
                break
        keep = n + len(samples)  # the pending token and the accepted draft tokens
        if self.mtp is not None:
            self.mtp.follow(seq[:len(samples)], n)
        if self.trace is not None:
            self.trace.append(tuple(seq))
        if keep < n + len(seq):
            if not lc.llama_memory_seq_rm(lc.llama_get_memory(llm.ctx), 0, keep, -1):
                raise RuntimeError(f"llama.cpp could not take back {n + len(seq) - keep} rejected draft tokens")
            llm._requires_eval = True  # the last logits are a rejected token's
            if self.trace is not None:
                self.trace.append(keep)
        llm.n_tokens = keep
        count_check(self.drafts, guess, samples, drafted=True)
        return samples[:-1], samples[-1]

    def _decode_one(self, token: int) -> None:
        """One generated token, decoded the way `Llama.eval` would (the cache holds exactly n_tokens,
        so nothing needs cutting first), without its per-call batch set-up."""
        llm, lc = self.llm, self.lc
        if llm.n_tokens >= llm.n_ctx():
            raise RuntimeError(f"the context is full ({llm.n_ctx()} tokens)")
        self._one[0] = token
        rc = lc.llama_decode(llm.ctx, lc.llama_batch_get_one(self._one, 1))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        if self.mtp is not None:
            self.mtp.follow([token], llm.n_tokens)
        llm.input_ids[llm.n_tokens] = token
        llm.n_tokens += 1
        if self.trace is not None:
            self.trace.append((token,))
