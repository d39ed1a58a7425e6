"""Where a prompt's read stops: the pieces a cold read decodes it in, so that a read that starts from
a cached prefix computes what a read from token 0 computes. No Qt.

llama.cpp rounds a batch otherwise than another batch of the same tokens cut elsewhere, so a prompt
is read in pieces that depend on its own tokens alone: a piece starts at token 0, at every turn start
(a template's control token that opens a message) and every `chunk` tokens after a piece's start.
These positions are the prompt's bounds; checkpoints and prompt cache entries are taken only there,
and a read that reuses a prefix starts again at a bound.

Why, and what was measured: docs/architecture/cache.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from app.engine.checkpoints import END_OFFSET
from app.machine.llama_backend import llama

# control tokens that open a message, in the chat templates llama.cpp knows (ChatML and Qwen, Llama 3,
# Gemma, gpt-oss's harmony, DeepSeek, Phi and Zephyr-style): those the vocabulary has as one special token
TURN_STARTS = ("<|im_start|>", "<|start_header_id|>", "<start_of_turn>", "<|start|>", "<｜User｜>",
               "<｜Assistant｜>", "<|user|>", "<|assistant|>", "<|system|>", "[INST]")


def turn_start_ids(llm: Any) -> frozenset[int]:
    """The model's turn-start tokens: each of TURN_STARTS its vocabulary holds as one special token
    (tokenized as text it is several, or the vocabulary marks it control or user-defined: gpt-oss's
    harmony markers are user-defined, one token even in plain text)."""
    ids = set()
    for text in TURN_STARTS:
        raw = text.encode("utf-8")
        try:
            special = llm.tokenize(raw, add_bos=False, special=True)
            plain = llm.tokenize(raw, add_bos=False, special=False)
        except (RuntimeError, ValueError):
            continue
        if len(special) == 1 and (len(plain) > 1 or _marked_special(llm, int(special[0]))):
            ids.add(int(special[0]))
    return frozenset(ids)


def _marked_special(llm: Any, token: int) -> bool:
    lc = llama().llama_cpp
    attr = lc.llama_vocab_get_attr(llm._model.vocab, token)  # noqa: SLF001 (llama-cpp-python's own handle)
    return bool(attr & (lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_USER_DEFINED))


class ReadPlan:
    """The bounds of prompts for one reader: its chunk (the tokens a batch reads at most) and the
    model's turn-start tokens."""

    def __init__(self, chunk: int, turn_ids: Iterable[int] = ()) -> None:
        self.chunk = max(int(chunk), 1)
        self.turn_ids = np.array(sorted(set(turn_ids)), dtype=np.int64)

    def key(self) -> str:
        """What makes two plans read alike (part of a prompt cache entry's identity)."""
        return f"chunk={self.chunk};turns={','.join(str(int(t)) for t in self.turn_ids)}"

    def turn_starts(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """Positions after 0 whose token opens a turn."""
        arr = np.asarray(tokens, dtype=np.int64)
        if not len(self.turn_ids) or not len(arr):
            return np.zeros(0, dtype=np.int64)
        at = np.flatnonzero(np.isin(arr, self.turn_ids))
        return at[at > 0]

    def bounds(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """Every bound of `tokens`, ascending: the positions p, 0 < p <= len, where a cold read ends a
        batch (a turn start before len, or a chunk's end within a piece; len itself only where a chunk
        ends there)."""
        n = len(tokens)
        starts = [0, *self.turn_starts(tokens).tolist(), n]
        out: list[np.ndarray] = []
        for i in range(len(starts) - 1):
            s, e = starts[i], starts[i + 1]
            last = i == len(starts) - 2
            out.append(np.arange(s, e + 1 if last else e, self.chunk, dtype=np.int64))
        b = np.unique(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)
        return b[b > 0]

    def is_bound(self, tokens: Sequence[int] | np.ndarray, p: int) -> bool:
        """Whether position p (0 < p <= len) is a bound of `tokens`."""
        if p <= 0 or p > len(tokens):
            return False
        arr = np.asarray(tokens[:p + 1], dtype=np.int64)
        if p < len(tokens) and len(self.turn_ids) and bool(np.isin(arr[p], self.turn_ids)):
            return True
        before = self.turn_starts(arr[:p])
        start = int(before[-1]) if len(before) else 0
        return (p - start) % self.chunk == 0

    @staticmethod
    def floor(bounds: np.ndarray, n: int) -> int:
        """The largest bound at or below n (0: none)."""
        i = int(np.searchsorted(bounds, n, side="right"))
        return int(bounds[i - 1]) if i > 0 else 0

    @staticmethod
    def after(bounds: np.ndarray, pos: int, end: int) -> int:
        """The first bound past pos, at most end: where a read from pos stops next."""
        i = int(np.searchsorted(bounds, pos, side="right"))
        return min(int(bounds[i]), end) if i < len(bounds) else end

    def reuse(self, bounds: np.ndarray, n_prompt: int, shared: int, exact: int,
              cached: Sequence[int] | np.ndarray) -> int:
        """How many tokens of a cache holding `cached` a prompt (its `bounds`, `n_prompt` tokens that
        share `shared` with it) may keep and still be read as a cold read reads it: the largest bound of
        both within what they share, before the prompt's last token (whose logits are needed) and
        within the `exact` tokens the cache computed as a cold read does."""
        n = self.floor(bounds, min(shared, n_prompt - 1, exact))
        while n > 0 and n == shared and n < len(cached) and not self.is_bound(cached, n):
            n = self.floor(bounds, n - 1)  # the cache's read did not stop where the two part
        return n

    def read_stops(self, tokens: Sequence[int] | np.ndarray, bounds: np.ndarray, start: int,
                   marks: Iterable[int]) -> tuple[set[int], set[int]]:
        """Where a cold read of `tokens` from `start` keeps (context checkpoints, prompt cache entries):
        the bounds where a later prompt parts from this one. Checkpoints: a rerun (the bound before
        the last token), a follow-up (the one before the last END_OFFSET tokens), an edit (`marks`) and
        the end where it is a bound; entries: a rerun or follow-up, another conversation with the same
        first message (the first turn start), an edit, never the end (no prompt reuses all of itself)."""
        end = len(tokens)
        checkpoints = set(self.stops(bounds, start, end, [end - 1, end - END_OFFSET, *marks]))
        first = self.turn_starts(tokens)[:1].tolist()
        stores = {p for p in self.stops(bounds, start, end, [end - 1, *first, *marks]) if p < end}
        return checkpoints, stores

    def stops(self, bounds: np.ndarray, start: int, end: int, points: Iterable[int]) -> list[int]:
        """The bounds at or below each of `points` (a rerun, a follow-up, an edit: where a later prompt
        parts from this one), and `end` where it is a bound, within (start, end], ascending."""
        out = {self.floor(bounds, p) for p in points if p > 0}
        if len(bounds) and int(bounds[-1]) == end:
            out.add(end)
        return sorted(p for p in out if start < p <= end)
