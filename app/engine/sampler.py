"""Sampling a reply's tokens: its seeded sampler chain, made in one place, and the picker that takes a
token from a batch row's logits through the chain, with fewer candidates where that changes nothing.
Every decode loop (one sequence or parallel slots) takes both from here. No Qt.

Without a grammar or a logit bias it is exactly `Llama._init_sampler`'s chain, so greedy output is
unchanged; a logit bias goes first and a grammar after the penalties, as llama.cpp puts them. The
seed is the reply's (`SamplingParams.seed`, else llama.cpp's random default).

The order of the chain, the seeds and the picker's shortcut: docs/architecture/decode-loop.md.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.engine.contract import SamplingParams
from app.engine.grammars import Grammar, GrammarError
from app.machine.llama_backend import llama

_MARGIN = 8.0  # logits this far below the largest are where top-k's candidates are looked for first

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


def prefill_chunk(llm: Any) -> int:
    """The chunk a prompt is read in: llama-cpp-python's `eval` and the slots' scheduler decode a prompt
    in batches of n_batch tokens, and a read plan's chunks count from each turn start. (Micro-batch
    boundaries are not enough: on the hybrid, cutting a read at a multiple of n_ubatch inside a batch
    moved logits.)"""
    return max(int(llm.n_batch), 1)


def grammar_sampler(lc: Any, vocab: Any, grammar: Any) -> Any:
    """llama.cpp's grammar sampler (lazy when the grammar has triggers) on `vocab`; the caller owns it."""
    gbnf = grammar.gbnf if isinstance(grammar, Grammar) else grammar._grammar  # noqa: SLF001 (LlamaGrammar's text)
    triggers = grammar.triggers if isinstance(grammar, Grammar) else ()
    if triggers:
        patterns = (ctypes.c_char_p * len(triggers))(*(t.encode("utf-8") for t in triggers))
        no_tokens = (lc.llama_token * 1)()
        smpl = lc.llama_sampler_init_grammar_lazy_patterns(vocab, gbnf.encode("utf-8"), b"root", patterns,
                                                           len(triggers), no_tokens, 0)
    else:
        smpl = lc.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    if not smpl:
        raise GrammarError("llama.cpp could not parse the grammar for this request")
    return smpl


def build_sampler(llm: Any, *, temperature: float, top_k: int, top_p: float, min_p: float,
                  repeat_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                  grammar: Any = None, logit_bias: Iterable[tuple[int, float]] | None = None) -> Any:
    """A `llama_cpp._internals.LlamaSampler` for `llm` (a `llama_cpp.Llama`; its seed is the chain's).
    `grammar`: a `Grammar` or a `LlamaGrammar`; `logit_bias`: (token id, bias added to its logit)."""
    lc = llama()
    sampler = lc._internals.LlamaSampler()  # noqa: SLF001 (llama-cpp-python's chain wrapper, freed by close)
    try:
        bias = dict(logit_bias or ())
        if bias:
            sampler.add_logit_bias(llm.n_vocab(), bias)
        sampler.add_penalties(n_vocab=llm.n_vocab(), penalty_last_n=llm.last_n_tokens_size,
                              penalty_repeat=repeat_penalty, penalty_freq=frequency_penalty,
                              penalty_present=presence_penalty)
        if grammar is not None:
            lc.llama_sampler_chain_add(sampler.sampler, grammar_sampler(lc, llm._model.vocab, grammar))  # noqa: SLF001
        if temperature < 0.0:
            sampler.add_dist(llm._seed)  # noqa: SLF001
        elif temperature == 0.0:
            sampler.add_greedy()
        else:
            sampler.add_top_k(top_k)
            sampler.add_typical(1.0, 1)
            sampler.add_top_p(top_p, 1)
            sampler.add_min_p(min_p, 1)
            sampler.add_temp(temperature)
            sampler.add_dist(llm._seed)  # noqa: SLF001
    except BaseException:
        sampler.close()
        raise
    return sampler


@dataclass
class ReplyChain:
    """A reply's sampler chain (llama-cpp-python's `LlamaSampler`, freed by `close`) and how the
    picker may shortcut it (`sampling_shortcut`)."""

    sampler: Any
    shortcut: str | None
    top_k: int

    def close(self) -> None:
        self.sampler.close()


def chain_for(llm: Any, *, temperature: float, top_k: int, top_p: float, min_p: float,
              repeat_penalty: float = 1.0, frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
              grammar: Any = None, logit_bias: tuple[tuple[int, float], ...] = ()) -> ReplyChain:
    """The chain and its shortcut for these settings, with the seed the model holds now."""
    sampler = build_sampler(llm, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                            presence_penalty=presence_penalty, grammar=grammar, logit_bias=logit_bias)
    shortcut = sampling_shortcut(temperature=temperature, top_k=top_k, repeat_penalty=repeat_penalty,
                                 frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                                 grammar=grammar, n_vocab=llm.n_vocab(), logit_bias=logit_bias)
    return ReplyChain(sampler, shortcut, top_k)


def reply_chain(llm: Any, sampling: SamplingParams, grammar: Any = None) -> ReplyChain:
    """A reply's chain: the model seeded with the reply's seed (llama.cpp's default, a random one, when
    it has none), then the chain made for its sampling parameters and `grammar`. The caller holds the
    engine's lock (the seed is the model's until the chain has taken it)."""
    seed = sampling.seed if sampling.seed is not None else llama().LLAMA_DEFAULT_SEED
    llm.set_seed(seed)
    return chain_for(llm, temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                     min_p=sampling.min_p, repeat_penalty=sampling.repeat_penalty,
                     frequency_penalty=sampling.frequency_penalty, presence_penalty=sampling.presence_penalty,
                     grammar=grammar, logit_bias=sampling.logit_bias)


def sampling_shortcut(*, temperature: float, top_k: int, repeat_penalty: float, frequency_penalty: float,
                      presence_penalty: float, grammar: object | None, n_vocab: int,
                      logit_bias: tuple[tuple[int, float], ...] | None = ()) -> str | None:
    """'greedy' or 'top-k' when the chain can run on fewer candidates than the whole vocabulary with
    the same result; None when it must see every logit (a grammar, lazy or not, a logit bias, penalties)."""
    if grammar is not None or logit_bias or repeat_penalty != 1.0 or frequency_penalty != 0.0 \
            or presence_penalty != 0.0:
        return None
    if temperature == 0.0:
        return "greedy"
    if temperature > 0.0 and 0 < top_k < n_vocab:
        return "top-k"
    return None


def top_k_candidates(logits: np.ndarray, k: int) -> np.ndarray | None:
    """Candidates for top-k, in id order: every logit at least as large as the k-th largest (ties
    included), and at most 4k ids in all unless ties make more; None when the logits are so flat that
    finding them costs more than the chain on all of them.

    One pass finds the logits within a margin of the largest (widened until k are in it; in a real
    model the 40th largest is 3-11 below the largest, and 150-400 tokens of SmolLM2's 49,152 are
    within 8), then a partition of those few finds the k-th exactly."""
    top = float(logits.max())
    if not np.isfinite(top):  # nothing to rank (NaN or infinite logits): the chain decides, as always
        return None
    margin = _MARGIN
    while True:
        ids = np.flatnonzero(logits >= top - margin)
        if len(ids) >= k:
            break
        margin *= 2.0
    if len(ids) > len(logits) // 4:
        return None
    if len(ids) > 4 * k:
        values = logits[ids]
        kth = np.partition(values, len(values) - k)[len(values) - k]
        ids = ids[values >= kth]
    return ids


class Picker:
    """Samples a reply chain's token from one batch row's logits of a context, through the shortcut
    where it applies."""

    def __init__(self, llm: Any) -> None:
        self.lc = llama()
        self.ctx = llm.ctx
        self.n_vocab = llm.n_vocab()
        self._cand = np.zeros(256, _TOKEN_DATA)

    def sample(self, chain: ReplyChain, idx: int = -1) -> int:
        """The chain's token from the logits of batch row `idx` (-1: the last)."""
        lc, ctx, smpl = self.lc, self.ctx, chain.sampler.sampler
        if chain.shortcut is None:
            return int(lc.llama_sampler_sample(smpl, ctx, idx))
        logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, idx), shape=(self.n_vocab,))
        if chain.shortcut == "greedy":  # the greedy sampler's choice: the first largest logit
            token = int(logits.argmax())
            if not np.isfinite(logits[token]):  # NaN or infinite logits: the chain decides, as always
                return int(lc.llama_sampler_sample(smpl, ctx, idx))
        else:
            ids = top_k_candidates(logits, chain.top_k)
            if ids is None:
                return int(lc.llama_sampler_sample(smpl, ctx, idx))
            if len(ids) > len(self._cand):
                self._cand = np.zeros(max(len(ids), 2 * len(self._cand)), _TOKEN_DATA)
            cand = self._cand[:len(ids)]
            cand["id"] = ids
            cand["logit"] = logits[ids]
            cand["p"] = 0.0
            cur = lc.llama_token_data_array(cand.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)), len(ids), -1,
                                            False)
            lc.llama_sampler_apply(smpl, ctypes.byref(cur))
            token = int(cur.data[cur.selected].id)  # the chain sorts and cuts the array it was given
        lc.llama_sampler_accept(smpl, token)  # as llama_sampler_sample does after choosing
        return token
