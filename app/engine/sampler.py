"""The sampler chain of a reply: one function, so every token loop (one sequence or parallel slots)
builds the same chain. No Qt.

Without a grammar or a logit bias it is exactly `Llama._init_sampler`'s chain (penalties, then greedy,
or top-k, typical, top-p, min-p, temperature and the seeded distribution), so greedy output is
unchanged. A logit bias goes first, as llama.cpp's `common_sampler_init` puts it; a grammar after the
penalties, where `_init_sampler` puts one. A lazy grammar (`Grammar.triggers`) is llama.cpp's
`llama_sampler_init_grammar_lazy_patterns`. A grammar llama.cpp cannot parse is an error here,
where llama-cpp-python would add a null sampler to the chain.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any

from app.engine.grammars import Grammar, GrammarError
from app.machine.llama_backend import llama


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
