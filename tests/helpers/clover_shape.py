"""A GGUF with Clover-35B-A3B's shape and realistic quant sizes, without tensor data.

The tensor list comes from `tests/data/qwen35moe-tensors.json` (a copy of the design folder's
public header dump: qwen35moe, 40 blocks, every 4th block full attention, 256 routed experts plus
one shared expert). Types follow a Q4_K_M-style mix (experts Q4_K; the output and value
projections Q6_K; norms, routers and small state tensors F32), which gives a file of about the
official 19.6 GB. The data section is a sparse hole: the file is its full size on the directory
listing but takes no disk, so llama.cpp's no-alloc simulation can load it.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.gguf.gguf_file import GGML_TYPES, KV, TensorInfo, ValueType, encode_header

DATA = Path(__file__).resolve().parent.parent / "data" / "qwen35moe-tensors.json"
F32, Q4_K, Q6_K = 0, 12, 14
ARCH = "qwen35moe"
N_VOCAB = 248_320

_F32_SUFFIXES = ("norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight",
                 "ssm_dt.bias", "ssm_a", "ssm_alpha.weight", "ssm_beta.weight")
_Q6_K_NAMES = ("output.weight", "attn_v.weight", "ffn_down_shexp.weight")


def tensor_type(name: str, shape: list[int]) -> int:
    if name.endswith(_F32_SUFFIXES) or len(shape) == 1:
        return F32
    if name.endswith(_Q6_K_NAMES):
        return Q6_K
    return Q4_K


def clover_tensors(n_blocks: int = 40, mtp: bool = False) -> list[tuple[str, tuple[int, ...], int]]:
    """The tensors of a Clover-shaped file; `mtp`: plus block N, the multi-token-prediction head that
    public Qwen3.6 MTP files carry (an attention block, its MoE and the nextn.* projections)."""
    spec = json.loads(DATA.read_text())
    out: list[tuple[str, tuple[int, ...], int]] = []
    for name, shape in spec["global"].items():
        if name != "output.weight":
            out.append((name, tuple(shape), tensor_type(name, shape)))
    for il in range(n_blocks):
        full_attention = il % 4 == 3
        parts = dict(spec["attention_layer"] if full_attention else spec["recurrent_layer"])
        parts.update(spec["every_layer"])
        for suffix, shape in parts.items():
            name = f"blk.{il}.{suffix}"
            out.append((name, tuple(shape), tensor_type(name, shape)))
    if mtp:
        il = n_blocks
        parts = dict(spec["attention_layer"])
        parts.update(spec["every_layer"])
        parts.update({k: v for k, v in spec["mtp_layer_blk40_optional"].items() if k.startswith("nextn.")})
        for suffix, shape in parts.items():
            name = f"blk.{il}.{suffix}"
            out.append((name, tuple(shape), tensor_type(name, shape)))
    out.append(("output.weight", tuple(spec["global"]["output.weight"]), Q6_K))
    return out


def clover_kvs(arch: str = ARCH, n_ctx: int = 131_072, n_blocks: int = 40, mtp: bool = False) -> list[KV]:
    tokens = [f"t{i}" for i in range(N_VOCAB - 3)] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = [f"t {i}" for i in range(1000)]
    u32, f32, s = ValueType.UINT32, ValueType.FLOAT32, ValueType.STRING
    return [
        KV.make("general.architecture", s, arch),
        KV.make("general.name", s, "Clover-35B-A3B (shape only)"),
        KV.make("general.alignment", u32, 32),
        KV.make(f"{arch}.block_count", u32, n_blocks + (1 if mtp else 0)),
        *([KV.make(f"{arch}.nextn_predict_layers", u32, 1)] if mtp else []),
        KV.make(f"{arch}.context_length", u32, n_ctx),
        KV.make(f"{arch}.embedding_length", u32, 2048),
        KV.make(f"{arch}.feed_forward_length", u32, 512),
        KV.make(f"{arch}.attention.head_count", u32, 16),
        KV.make(f"{arch}.attention.head_count_kv", u32, 2),
        KV.make(f"{arch}.attention.key_length", u32, 256),
        KV.make(f"{arch}.attention.value_length", u32, 256),
        KV.make(f"{arch}.attention.layer_norm_rms_epsilon", f32, 1e-6),
        KV.make(f"{arch}.rope.freq_base", f32, 10_000_000.0),
        KV.make(f"{arch}.rope.dimension_count", u32, 64),
        KV.make(f"{arch}.rope.dimension_sections", ValueType.ARRAY, [11, 11, 10, 0], ValueType.INT32),
        KV.make(f"{arch}.expert_count", u32, 256),
        KV.make(f"{arch}.expert_used_count", u32, 8),
        KV.make(f"{arch}.expert_feed_forward_length", u32, 512),
        KV.make(f"{arch}.expert_shared_feed_forward_length", u32, 512),
        KV.make(f"{arch}.full_attention_interval", u32, 4),
        KV.make(f"{arch}.ssm.conv_kernel", u32, 4),
        KV.make(f"{arch}.ssm.state_size", u32, 128),
        KV.make(f"{arch}.ssm.group_count", u32, 16),
        KV.make(f"{arch}.ssm.time_step_rank", u32, 32),
        KV.make(f"{arch}.ssm.inner_size", u32, 4096),
        KV.make("tokenizer.ggml.model", s, "gpt2"),
        KV.make("tokenizer.ggml.pre", s, "qwen2"),
        KV.make("tokenizer.ggml.tokens", ValueType.ARRAY, tokens, s),
        KV.make("tokenizer.ggml.token_type", ValueType.ARRAY, [1] * (N_VOCAB - 3) + [3, 3, 3], ValueType.INT32),
        KV.make("tokenizer.ggml.merges", ValueType.ARRAY, merges, s),
        KV.make("tokenizer.ggml.eos_token_id", u32, N_VOCAB - 1),
        KV.make("tokenizer.ggml.padding_token_id", u32, N_VOCAB - 3),
    ]


def write_clover_shaped(path: Path, n_ctx: int = 131_072, n_blocks: int = 40, mtp: bool = False) -> Path:
    """Write the header and extend the file, sparsely, to its full size (all weights zero)."""
    infos, offset = [], 0
    for name, shape, ggml_type in clover_tensors(n_blocks, mtp):
        info = TensorInfo(name, shape, ggml_type, offset)
        infos.append(info)
        offset += -(-info.n_bytes // 32) * 32
    head = encode_header(3, clover_kvs(n_ctx=n_ctx, n_blocks=n_blocks, mtp=mtp), infos, 32)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    return path


def expected_bytes() -> int:
    return sum(TensorInfo(n, s, t, 0).n_bytes for n, s, t in clover_tensors())


assert all(t in GGML_TYPES for _, _, t in clover_tensors())
