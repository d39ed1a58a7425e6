"""Context checkpoints: how a model whose cache cannot be cut back reuses a conversation. No Qt.

A hybrid model (Clover: gated-delta-net and attention blocks) keeps a recurrent state that exists only
for the last position, so llama.cpp cannot cut its cache at token N. As llama-server does, while a
prompt is read the recurrent part of a sequence's state is copied out at the prompt's bounds
(`app.engine.read_plan`); when a later prompt may reuse the first N tokens, the latest checkpoint at or
before N is copied back, the attention KV cache cut at the same position, and only the rest evaluated.
Memory is bounded by a count (the plan's); a restore llama.cpp refuses leaves the caller to start over.

Where checkpoints are taken and why not llama.cpp's other mechanisms: docs/architecture/cache.md.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import Any

from app.machine.llama_backend import llama

log = logging.getLogger(__name__)

SEQ = 0  # the engine's one sequence
END_OFFSET = 4  # a checkpoint at the bound at or before this many tokens before the prompt's end
# (llama-server's offset, without the boundary): the next turn's rendering of the previous reply
# differs right after its header (Qwen3.5/3.6 drops the `<think>\n` the generation prompt opened).


@dataclass
class Checkpoint:
    n_tokens: int  # the state after the first n_tokens tokens of the cache
    data: Any  # ctypes uint8 array: llama_state_seq_get_data_ext's bytes
    trace_len: int = 0  # the length of the loop's decode trace when it was taken (for exact replays)

    @property
    def n_bytes(self) -> int:
        return len(self.data)


class Checkpoints:
    """The checkpoints of one context's sequence `seq`, oldest first, at most `limit` of them."""

    def __init__(self, ctx: Any, limit: int, seq: int = SEQ) -> None:
        self.lc = llama()
        self.ctx = ctx
        self.seq = seq
        self.limit = max(limit, 0)
        self.items: list[Checkpoint] = []
        self.flags = self.lc.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY

    @property
    def n_bytes(self) -> int:
        return sum(c.n_bytes for c in self.items)

    def at(self, n_tokens: int) -> Checkpoint | None:
        return next((c for c in self.items if c.n_tokens == n_tokens), None)

    def save(self, n_tokens: int, trace_len: int = 0) -> Checkpoint | None:
        """Copy the recurrent state (the cache holds exactly `n_tokens` tokens); the oldest goes when
        the count is reached. None when checkpoints are off or llama.cpp wrote nothing."""
        if self.limit == 0 or n_tokens <= 0:
            return None
        lc = self.lc
        size = lc.llama_state_seq_get_size_ext(self.ctx, self.seq, self.flags)
        if size <= 0:
            return None
        data = (ctypes.c_uint8 * size)()
        written = lc.llama_state_seq_get_data_ext(self.ctx, data, size, self.seq, self.flags)
        if written != size:
            log.warning("context checkpoint at %d tokens: llama.cpp wrote %d of %d bytes; not kept",
                        n_tokens, written, size)
            return None
        self.items = [c for c in self.items if c.n_tokens != n_tokens]
        while len(self.items) >= self.limit:
            self.items.pop(0)
        checkpoint = Checkpoint(n_tokens, data, trace_len)
        self.items.append(checkpoint)
        return checkpoint

    def latest_at_or_before(self, n_tokens: int) -> Checkpoint | None:
        best = None
        for c in self.items:
            if c.n_tokens <= n_tokens and (best is None or c.n_tokens > best.n_tokens):
                best = c
        return best

    def restore(self, checkpoint: Checkpoint) -> bool:
        """Put the checkpoint's recurrent state back and cut the attention cache at its position: the
        cache then holds exactly its first n_tokens tokens. False: llama.cpp refused, and the caller
        must clear the cache (its state is then undefined)."""
        lc = self.lc
        n = checkpoint.n_tokens
        read = lc.llama_state_seq_set_data_ext(self.ctx, checkpoint.data, checkpoint.n_bytes, self.seq, self.flags)
        if read != checkpoint.n_bytes:
            log.warning("context checkpoint at %d tokens: llama.cpp read %d of %d bytes; starting over",
                        n, read, checkpoint.n_bytes)
            return False
        mem = lc.llama_get_memory(self.ctx)
        if not lc.llama_memory_seq_rm(mem, self.seq, n, -1) or lc.llama_memory_seq_pos_max(mem, self.seq) != n - 1:
            log.warning("context checkpoint at %d tokens: the cache could not be cut there; starting over", n)
            return False
        return True

    def drop_after(self, n_tokens: int) -> None:
        """Forget the checkpoints of tokens past `n_tokens`: the cache now holds other tokens there."""
        self.items = [c for c in self.items if c.n_tokens <= n_tokens]

    def clear(self) -> None:
        self.items = []
