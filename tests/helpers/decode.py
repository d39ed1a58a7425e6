"""Greedy decoding with llama.cpp's own eval, one token at a time, for comparing models exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
