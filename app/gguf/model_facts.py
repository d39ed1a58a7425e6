"""What a model needs in memory, read from its GGUF header alone. No Qt.

Tensor sizes come straight from the tensor infos, per block and split into the routed experts
(`blk.N.ffn_{up,down,gate,gate_up}_(ch)exps`), the shared expert (`*_shexp`) and the rest
(attention or linear-attention, norms, router). KV-cache bytes per token count only the blocks
that have attention keys; hybrid models' linear-attention (SSM / Gated DeltaNet) blocks hold a
fixed recurrent state instead, sized with llama.cpp's own formulas (`llama_hparams::n_embd_r/s`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.gguf.gguf_file import GGUFHeader

MiB = 1024 * 1024

# llama.cpp's common EXPS regex: routed-expert tensors (what --n-cpu-moe keeps in system RAM)
EXPERT_RE = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.")
SHARED_RE = re.compile(r"^blk\.(\d+)\.ffn_\w+_shexp\.")
BLOCK_RE = re.compile(r"^blk\.(\d+)\.")

# bytes per element of KV cache types (ggml block size / bytes)
KV_TYPES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
            "q4_1": 20 / 32, "q4_0": 18 / 32}
GGML_TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}


@dataclass(frozen=True)
class BlockFacts:
    index: int
    other_bytes: int  # attention / linear attention, norms, router, dense FFN
    expert_bytes: int  # routed experts
    shared_bytes: int  # shared expert
    has_kv: bool  # full attention: grows a KV cache
    recurrent: bool  # linear attention / SSM: fixed state instead

    @property
    def total(self) -> int:
        return self.other_bytes + self.expert_bytes + self.shared_bytes


@dataclass(frozen=True)
class ModelFacts:
    arch: str
    name: str
    file_size: int
    n_layer: int
    n_ctx_train: int
    n_embd: int
    n_head: int
    n_head_kv: tuple[int, ...]  # per block
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    n_expert: int
    n_expert_used: int
    max_wide: int  # widest activation a block produces per token (for the compute estimate)
    recurrent_extra: int  # linear-attention activations per token (conv channels + inner size)
    recurrent_state_per_seq: int  # bytes, f32
    blocks: tuple[BlockFacts, ...]
    input_bytes: int  # token embeddings: llama.cpp keeps them in system RAM
    output_bytes: int  # output norm + output matrix (on the GPU with the last layer)
    extra_blocks: tuple[int, ...] = field(default_factory=tuple)  # e.g. a multi-token-prediction block
    unused_bytes: int = 0  # tensors of those blocks: in the file, loaded only for MTP drafting (load_mtp)
    unused_expert_bytes: int = 0  # of those, routed experts (placed like the last block's)

    def mtp_kv_bytes(self, n_ctx: int, type_k: str = "f16", type_v: str = "f16") -> int:
        """The MTP draft context's KV cache: one attention block's, as many cells as the target's."""
        if not self.extra_blocks:
            return 0
        kv = self.n_head_kv[-1]
        per_token = kv * (self.head_dim_k * KV_TYPES[type_k] + self.head_dim_v * KV_TYPES[type_v])
        return int(round(per_token * kv_cells(n_ctx))) * len(self.extra_blocks)

    @property
    def weights_bytes(self) -> int:
        return self.input_bytes + self.output_bytes + sum(b.total for b in self.blocks)

    @property
    def expert_blocks(self) -> list[int]:
        return [b.index for b in self.blocks if b.expert_bytes]

    @property
    def attention_blocks(self) -> list[int]:
        return [b.index for b in self.blocks if b.has_kv]

    def kv_bytes_per_token(self, type_k: str = "f16", type_v: str = "f16") -> float:
        total = 0.0
        for b in self.blocks:
            if b.has_kv:
                kv = self.n_head_kv[b.index] if b.index < len(self.n_head_kv) else self.n_head_kv[-1]
                total += kv * (self.head_dim_k * KV_TYPES[type_k] + self.head_dim_v * KV_TYPES[type_v])
        return total

    def kv_bytes(self, n_ctx: int, type_k: str = "f16", type_v: str = "f16") -> int:
        return int(round(self.kv_bytes_per_token(type_k, type_v) * kv_cells(n_ctx)))

    def compute_bytes(self, n_ctx: int, *, n_ubatch: int = 512, n_outputs: int = 512, flash_attn: bool = True) -> int:
        """An estimate of llama.cpp's compute buffer (the graph allocator's peak), CPU backend.

        The peak is the larger of two stages of the graph: the output stage (logits for
        `n_outputs` tokens) and a block's stage (the attention scores over the whole KV cache and
        its mask, plus the block's activations). Checked against llama.cpp's own figures in
        tests/model/test_plan_calibration.py.
        """
        n_out = min(n_outputs, n_ubatch)
        logits = self.n_vocab * n_out * 4 + 3 * n_ubatch * self.n_embd * 4
        n_kv = kv_cells(n_ctx)
        attention = 0
        if self.attention_blocks:
            if flash_attn:
                attention = n_kv * n_ubatch * 2  # f16 mask
            else:
                attention = self.n_head * n_kv * n_ubatch * 4 + n_kv * n_ubatch * 4  # scores + f32 mask
        activations = n_ubatch * 4 * (4 * self.n_embd + 2 * self.max_wide + self.recurrent_extra)
        return max(logits, attention + activations)


def kv_cells(n_ctx: int) -> int:
    """llama.cpp pads the KV cache to a multiple of 256 cells."""
    return -(-n_ctx // 256) * 256


class MissingKey(KeyError):
    """A key the model needs is not in its header. Shown as the sentence it is (a KeyError's str()
    would quote it: "'the model has no llama.block_count'")."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "a key is missing"


def _int(header: GGUFHeader, key: str, default: int | None = None) -> int:
    value = header.get(key)
    if value is None:
        if default is None:
            raise MissingKey(f"the model has no {key}")
        return default
    try:
        return int(value)
    except TypeError:  # an array: take its largest entry
        return int(max(value))


def facts_from_header(header: GGUFHeader) -> ModelFacts:
    arch = header.architecture
    if not arch:
        raise ValueError("the file has no general.architecture: not a model")
    a = f"{arch}."
    # llama.cpp's convention (llama_hparams::n_layer(), every architecture): the last
    # `nextn_predict_layers` blocks are multi-token-prediction heads, not loaded unless asked for
    # ("model has unused tensor ... -- ignoring"): they are no weights to place and hold no KV cache.
    n_layer_all = _int(header, a + "block_count")
    n_nextn = _int(header, a + "nextn_predict_layers", 0)
    n_layer = n_layer_all - n_nextn
    n_embd = _int(header, a + "embedding_length")
    n_head = _int(header, a + "attention.head_count")
    kv_value = header.get(a + "attention.head_count_kv", n_head)
    n_head_kv = tuple(int(x) for x in kv_value) if not isinstance(kv_value, int) else (int(kv_value),) * n_layer
    head_k = _int(header, a + "attention.key_length", n_embd // max(n_head, 1))
    head_v = _int(header, a + "attention.value_length", head_k)
    tokens = header.kvs.get("tokenizer.ggml.tokens")
    n_vocab = tokens.count if tokens is not None else _int(header, a + "vocab_size", 0)

    per_block: dict[int, dict[str, int]] = {}
    names_in_block: dict[int, set[str]] = {}
    input_bytes = output_bytes = 0
    max_wide = 0
    for t in header.tensors:
        m = BLOCK_RE.match(t.name)
        if m is None:
            if t.name.startswith("token_embd"):
                input_bytes += t.n_bytes
            else:
                output_bytes += t.n_bytes
            continue
        il = int(m.group(1))
        slot = per_block.setdefault(il, {"other": 0, "experts": 0, "shared": 0})
        names_in_block.setdefault(il, set()).add(t.name[len(m.group(0)):])
        if EXPERT_RE.match(t.name):
            slot["experts"] += t.n_bytes
        elif SHARED_RE.match(t.name):
            slot["shared"] += t.n_bytes
        else:
            slot["other"] += t.n_bytes
            if len(t.shape) == 2 and "gate_inp" not in t.name:
                max_wide = max(max_wide, t.shape[1])
    n_expert = _int(header, a + "expert_count", 0)
    n_used = _int(header, a + "expert_used_count", 0)
    n_ff_exp = _int(header, a + "expert_feed_forward_length", 0)
    max_wide = max(max_wide, n_used * n_ff_exp)

    d_conv = _int(header, a + "ssm.conv_kernel", 0)
    d_inner = _int(header, a + "ssm.inner_size", 0)
    d_state = _int(header, a + "ssm.state_size", 0)
    n_group = _int(header, a + "ssm.group_count", 0)
    r_floats = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    s_floats = d_state * d_inner

    blocks = []
    extra = []
    for il in sorted(per_block):
        names = names_in_block[il]
        recurrent = any(n.startswith("ssm_") for n in names)
        has_kv = (any(n.startswith(("attn_k.", "attn_k_b.", "attn_kv_a_mqa.")) for n in names)
                  or (not recurrent and any(n.startswith("attn_qkv.") for n in names)))
        slot = per_block[il]
        blocks.append(BlockFacts(il, slot["other"], slot["experts"], slot["shared"], has_kv, recurrent))
        if il >= n_layer:
            extra.append(il)
    blocks = [b for b in blocks if b.index < n_layer]
    n_recurrent = sum(1 for b in blocks if b.recurrent)
    unused = sum(slot["other"] + slot["experts"] + slot["shared"] for il, slot in per_block.items() if il >= n_layer)
    return ModelFacts(
        arch=arch, name=str(header.get("general.name", "")), file_size=header.file_size, n_layer=n_layer,
        n_ctx_train=_int(header, a + "context_length", 4096), n_embd=n_embd, n_head=n_head,
        n_head_kv=n_head_kv, head_dim_k=head_k, head_dim_v=head_v, n_vocab=n_vocab, n_expert=n_expert,
        n_expert_used=n_used, max_wide=max_wide,
        recurrent_extra=(d_inner + 2 * n_group * d_state + d_inner) if n_recurrent else 0,
        recurrent_state_per_seq=n_recurrent * (r_floats + s_floats) * 4,
        blocks=tuple(blocks), input_bytes=input_bytes, output_bytes=output_bytes,
        extra_blocks=tuple(extra), unused_bytes=unused,
        unused_expert_bytes=sum(slot["experts"] for il, slot in per_block.items() if il >= n_layer),
    )
