"""Context checkpoints: how a model whose cache cannot be cut back reuses a conversation. No Qt.

A hybrid model (Clover: 30 gated-delta-net blocks and 10 attention blocks) keeps, besides the
attention KV cache, a recurrent state that holds the whole sequence in a fixed size. The KV cache can
be cut at any position; the recurrent state cannot: it only exists for the last position. So when a
follow-up, a regenerate or an edit changes the conversation at token N, llama.cpp refuses to cut the
cache there and llama-cpp-python starts again from token 0.

llama-server solves this with context checkpoints (tools/server/server-context.cpp,
`create_checkpoint` and the restore near "restored context checkpoint"), and this module does the same
for the engine's sequences: while a prompt is read, the recurrent part of the state is copied out with
`llama_state_seq_get_data_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)`; when a later prompt may reuse
the first N tokens, the latest checkpoint at or before N is copied back with
`llama_state_seq_set_data_ext`, the attention KV cache is cut at the same position, and only the
tokens after it are evaluated.

Where they are taken: only on the prompt's bounds (`app.engine.read_plan`: turn starts and chunks
from each), because a read may stop only there and still be read as a read from token 0 reads it (a
piece cut elsewhere rounds otherwise, and replies at temperature 0 then depended on what the cache
held): at the last bound before the prompt's last token (a rerun or a regenerate; with turn starts
as bounds, usually the start of the reply's turn, where a follow-up goes on too), the one before its
last END_OFFSET tokens, the end where it is one, and the one at or before the last user message's
start (an edit of it). A checkpoint is only taken by a read that is a cold read's (not after generated
tokens, not by a reply resumed after a forced end of thinking). The prompt cache
(`app.engine.prompt_cache`) keeps whole sequence states at the same kind of bounds, for other
conversations and after a restart.

Why not the other mechanisms the bundled llama.cpp has:
- `n_rs_seq` (a few per-token snapshots of the recurrent state) rolls back correctly only within the
  last decoded batch; rolling back over tokens decoded one call at a time returned true with a wrong
  state (measured: logits off by up to 19). It is for speculative decoding's verify batches.
- `LLAMA_STATE_SEQ_FLAGS_ON_DEVICE` keeps a copy on the GPU, but one per sequence: getting a state
  with it "invalidates all prior states gotten for that seq_id with this flag" (llama.h). A
  conversation needs several checkpoints at once, so they are host copies, as llama-server's are
  (one Clover checkpoint is 62.81 MiB: about 2.5 ms over PCIe 4.0).

Memory is bounded by a count (the plan's, from its RAM budget) and each checkpoint's size is exact
(llama_state_seq_get_size_ext). A restore that llama.cpp refuses leaves the caller to start over.
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
