"""The batch-cost step's Clover shape routes tokens as real text does: data only where routing needs it."""

from __future__ import annotations

import numpy as np

from app.gguf.gguf_file import read_header
from tests.bench.batch_costs import EMBEDDED, Q4_K_BLOCK, write_routed_clover


def test_the_routed_clover_has_routers_norms_and_embeddings_and_nothing_else(tmp_path):
    path = write_routed_clover(tmp_path / "routed.gguf", n_ctx=4096, n_blocks=4)
    header = read_header(path)
    infos = {t.name: t for t in header.tensors}
    assert "blk.4.nextn.eh_proj.weight" in infos  # the MTP block, for the head's step

    def data(name: str, n: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(header.data_offset + infos[name].offset)
            return f.read(n)

    routers = np.frombuffer(data("blk.0.ffn_gate_inp.weight", 4096), dtype=np.float32)
    assert 0.02 < routers.std() < 0.08 and len(set(routers.tolist())) > 1000  # random: tokens pick different experts
    assert set(np.frombuffer(data("blk.0.attn_norm.weight", 64), dtype=np.float32).tolist()) == {1.0}
    row = infos["token_embd.weight"].shape[0] // 256 * Q4_K_BLOCK  # one token's Q4_K row
    embedded = data("token_embd.weight", EMBEDDED * row + row)
    assert np.frombuffer(embedded[:2], dtype=np.float16)[0] == np.float16(0.02)
    assert any(embedded[4:row]) and not any(embedded[EMBEDDED * row:])  # the rows after EMBEDDED: zero
    assert not any(data("blk.0.ffn_up_exps.weight", 1 << 16))  # experts stay a sparse hole
