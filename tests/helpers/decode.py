"""Greedy decoding with llama.cpp's own eval, one token at a time, for comparing models exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.engine.sampler import chain_for
from app.machine.llama_backend import llama

CHAT_PROMPT = "<|im_start|>user\nWhat is the capital of Australia?<|im_end|>\n<|im_start|>assistant\n"


def greedy_with(llm, prompt: str = CHAT_PROMPT, n: int = 16) -> list[int]:
    """n greedy tokens after `prompt` (special tokens parsed), with no stop token. Needs logits_all."""
    llm.reset()
    llm.eval(llm.tokenize(prompt.encode(), add_bos=False, special=True))
    out = []
    for _ in range(n):
        logits = np.asarray(llm.scores[llm.n_tokens - 1])
        if not np.all(np.isfinite(logits)):
            raise AssertionError("llama.cpp produced non-finite logits")
        token = int(np.argmax(logits))
        out.append(token)
        llm.eval([token])
    return out


def greedy_tokens(path: Path | str, prompt: str = CHAT_PROMPT, n: int = 16) -> list[int]:
    llm = llama().Llama(model_path=str(path), n_ctx=256, n_threads=2, logits_all=True, verbose=False)
    try:
        return greedy_with(llm, prompt, n)
    finally:
        llm.close()


def greedy_loop(loop, tokens: list[int], n: int, marks: tuple[int, ...] = (),
                draft: bool = False, resume: bool = False) -> tuple[list[int], int]:
    """n greedy tokens from an engine's TokenLoop (fewer at an end-of-generation token) and the length of
    its trace after the prompt (0 without a trace). `resume`: go on from all the cache holds (the
    loop's reuse for a reply that goes on), not only from a chunk boundary."""
    lc = llama()
    vocab = lc.llama_model_get_vocab(loop.llm.model)
    greedy = chain_for(loop.llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0)
    stream = loop.tokens(tokens, greedy, marks=marks, draft=draft,
                         resume=resume)
    out: list[int] = []
    n_ops = 0
    try:
        for token in stream:
            if not out:
                n_ops = len(loop.trace) if loop.trace is not None else 0
            out.append(token)
            if len(out) >= n or lc.llama_vocab_is_eog(vocab, token):
                break
    finally:
        stream.close()
    return out, n_ops
