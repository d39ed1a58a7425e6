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


def greedy_slot(engine, tokens: list[int], n: int, marks: tuple[int, ...] = (), draft: bool = False,
                resume: bool = False):
    """n greedy tokens (fewer at an end-of-generation token, which is the last) of a prompt, straight
    from an engine's scheduler, and the slot's job (reused, restored, drafts). `resume`: go on from
    all the slot holds (a reply that goes on), not only from a bound."""
    from app.engine.slots import Job

    lc = llama()
    llm = engine.llm
    vocab = lc.llama_model_get_vocab(llm.model)
    chain = chain_for(llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0)
    job = engine.slots.submit(Job(list(tokens), chain, max(n, 1), eog=lambda t: bool(lc.llama_vocab_is_eog(vocab, t)),
                                  marks=marks, draft=draft, resume=resume))
    return list(engine.slots.stream(job)), job
