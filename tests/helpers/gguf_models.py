"""Small GGUF models of real llama.cpp architectures, with random weights, for tests.

Written with the `gguf` package (the same writer llama.cpp's converters use). The tokenizer is a
real byte-level BPE (GPT-2 style: 256 byte symbols, merges learned from a short text, ChatML
special tokens), so llama.cpp tokenizes and detokenizes any text with it.

Shapes here are in ggml order (ne0 first), as llama.cpp and `qwen35moe-tensors.json` write them;
numpy arrays are the reverse.
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

SPECIAL_CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SPECIAL_USER = ["<think>", "</think>", "<tool_call>", "</tool_call>"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% endif %}"
    "{% endif %}"
)

_CORPUS = (
    "The capital of France is Paris. The capital of Australia is Canberra. "
    "What is the weather in Lisbon and in Oslo today? It is warmer in Lisbon than in Oslo. "
    "Dispatch the drone to the warehouse, then return to the base and report the order. "
    "def add(a, b):\n    return a + b\n"
    "<html><body><script>const x = 7 * 6; console.log(x);</script></body></html>\n"
    "Hello, how are you? I am fine, thank you. Think step by step before you answer the question."
)


@functools.lru_cache(maxsize=1)
def _byte_symbols() -> list[str]:
    """GPT-2's reversible byte -> printable unicode mapping, in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


@functools.lru_cache(maxsize=4)
def bpe_vocab(n_merges: int = 200) -> tuple[list[str], list[str]]:
    """(tokens, merges): 256 byte symbols plus merged symbols learned on _CORPUS, plus specials."""
    sym = _byte_symbols()
    words = collections.Counter()
    for i, chunk in enumerate(_CORPUS.split(" ")):
        text = (" " + chunk) if i else chunk
        words[tuple(sym[b] for b in text.encode("utf-8"))] += 1
    tokens = list(sym)
    merges: list[str] = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for word, count in words.items():
            for a, b in itertools.pairwise(word):
                pairs[(a, b)] += count
        if not pairs:
            break
        (a, b), _count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        tokens.append(a + b)
        merged = collections.Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return tokens + SPECIAL_CONTROL + SPECIAL_USER, merges


def add_bpe_tokenizer(writer: gguf.GGUFWriter, *, eos: str = "<|im_end|>", chat_template: str | None = CHATML_TEMPLATE,
                      pad_to: int | None = None, extra_control: tuple[str, ...] = ()) -> int:
    """Write the tokenizer keys; return the vocabulary size. `pad_to` fills the vocabulary up to that size
    with unused `[PADn]` tokens, as convert_hf_to_gguf pads a model whose output is wider than its
    tokenizer (a Clover-sized 248,320 logits per token from a tiny model)."""
    tokens, merges = bpe_vocab()
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIAL_CONTROL) - len(SPECIAL_USER))
    types += [gguf.TokenType.CONTROL] * len(SPECIAL_CONTROL) + [gguf.TokenType.USER_DEFINED] * len(SPECIAL_USER)
    tokens = tokens + list(extra_control)  # another family's turn markers (Gemma's <start_of_turn>...)
    types += [gguf.TokenType.CONTROL] * len(extra_control)
    if pad_to is not None and pad_to > len(tokens):
        types += [gguf.TokenType.UNUSED] * (pad_to - len(tokens))
        tokens = tokens + [f"[PAD{i}]" for i in range(len(tokens), pad_to)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index(eos))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    if chat_template is not None:  # None: a file without one, as some conversions leave it
        writer.add_chat_template(chat_template)
    return len(tokens)


@dataclass
class ModelShape:
    """The size of a generated model. Defaults give a file of a few hundred KiB."""

    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_layer: int = 3
    n_ff: int = 128  # dense FFN width
    n_ctx_train: int = 2048
    # MoE (deepseek): the first `n_dense_lead` blocks are dense, the rest MoE with shared expert
    n_expert: int = 8
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_dense_lead: int = 1
    seed: int = 1234
    dtype: Any = np.float32
    extra_kv: dict[str, Any] = field(default_factory=dict)
    qtype: str | None = None  # quantize the weight matrices (Q8_0, Q4_0, Q5_0, BF16: what gguf-py can write)
    n_vocab: int | None = None  # pad the vocabulary (and the embedding and output matrices) to this size

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def _random(rng: np.random.Generator, ggml_shape: tuple[int, ...], dtype: Any, scale: float = 0.08) -> np.ndarray:
    return (rng.standard_normal(tuple(reversed(ggml_shape))) * scale).astype(dtype)


def _attention_tensors(rng, shape: ModelShape, i: int) -> dict[str, np.ndarray]:
    e, hd, kv = shape.n_embd, shape.head_dim, shape.n_head_kv
    return {
        f"blk.{i}.attn_norm.weight": np.ones(e, dtype=np.float32),
        f"blk.{i}.attn_q.weight": _random(rng, (e, e), shape.dtype),
        f"blk.{i}.attn_k.weight": _random(rng, (e, kv * hd), shape.dtype),
        f"blk.{i}.attn_v.weight": _random(rng, (e, kv * hd), shape.dtype),
        f"blk.{i}.attn_output.weight": _random(rng, (e, e), shape.dtype),
        f"blk.{i}.ffn_norm.weight": np.ones(e, dtype=np.float32),
    }


def _dense_ffn(rng, shape: ModelShape, i: int) -> dict[str, np.ndarray]:
    e, f = shape.n_embd, shape.n_ff
    return {
        f"blk.{i}.ffn_gate.weight": _random(rng, (e, f), shape.dtype),
        f"blk.{i}.ffn_up.weight": _random(rng, (e, f), shape.dtype),
        f"blk.{i}.ffn_down.weight": _random(rng, (f, e), shape.dtype),
    }


def _moe_ffn(rng, shape: ModelShape, i: int) -> dict[str, np.ndarray]:
    e, fx, n = shape.n_embd, shape.n_ff_exp, shape.n_expert
    return {
        f"blk.{i}.ffn_gate_inp.weight": _random(rng, (e, n), np.float32, scale=0.5),
        f"blk.{i}.ffn_gate_exps.weight": _random(rng, (e, fx, n), shape.dtype),
        f"blk.{i}.ffn_up_exps.weight": _random(rng, (e, fx, n), shape.dtype),
        f"blk.{i}.ffn_down_exps.weight": _random(rng, (fx, e, n), shape.dtype),
        f"blk.{i}.ffn_gate_shexp.weight": _random(rng, (e, fx), shape.dtype),
        f"blk.{i}.ffn_up_shexp.weight": _random(rng, (e, fx), shape.dtype),
        f"blk.{i}.ffn_down_shexp.weight": _random(rng, (fx, e), shape.dtype),
    }


# A Qwen3.5/3.6-style template: tools described in the system turn, calls written as XML.
QWEN_XML_TOOLS_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\n# Tools\n' }}{% for t in tools %}{{ t | tojson }}{{ '\n' }}{% endfor %}"
    "{{ 'Call a tool as <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n"
    "</tool_call><|im_end|>\n' }}{% endif %}"
    + CHATML_TEMPLATE
)


Blocks = Callable[[np.random.Generator, ModelShape, int], dict[str, np.ndarray]]


def _write(path: Path, arch: str, shape: ModelShape, add_arch_keys: Callable[[gguf.GGUFWriter], None],
           block_ffn: Blocks, name: str, *, rope_dims: int | None = None, eos: str = "<|im_end|>",
           rename: dict[str, str] | None = None, chat_template: str | None = CHATML_TEMPLATE,
           block_attn: Blocks = _attention_tensors, n_blocks: int | None = None,
           extra_control: tuple[str, ...] = ()) -> Path:
    """`block_attn` and `block_ffn` give each block's tensors; `n_blocks` (default: the shape's layers)
    counts blocks beyond the trunk too, such as an MTP head."""
    rng = np.random.default_rng(shape.seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(n_blocks if n_blocks is not None else shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(rope_dims if rope_dims is not None else shape.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if shape.dtype == np.float32 else gguf.LlamaFileType.MOSTLY_F16)
    add_arch_keys(writer)
    n_vocab = add_bpe_tokenizer(writer, eos=eos, chat_template=chat_template, pad_to=shape.n_vocab,
                                extra_control=extra_control)
    for key, value in shape.extra_kv.items():
        _add_any(writer, key, value)

    tensors = {"token_embd.weight": _random(rng, (shape.n_embd, n_vocab), shape.dtype, scale=0.5)}
    for i in range(n_blocks if n_blocks is not None else shape.n_layer):
        for tname, array in block_attn(rng, shape, i).items():
            for old, new in (rename or {}).items():
                tname = tname.replace(f".{old}.", f".{new}.")
            tensors[tname] = array
        tensors.update(block_ffn(rng, shape, i))
    tensors["output_norm.weight"] = np.ones(shape.n_embd, dtype=np.float32)
    tensors["output.weight"] = _random(rng, (shape.n_embd, n_vocab), shape.dtype, scale=0.5)
    qtype = getattr(gguf.GGMLQuantizationType, shape.qtype) if shape.qtype else None
    for tname, array in tensors.items():
        if qtype is not None and array.ndim >= 2 and "gate_inp" not in tname:
            from gguf.quants import quantize

            data = quantize(array.astype(np.float32), qtype)
            writer.add_tensor(tname, data, raw_shape=data.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(tname, array)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_any(writer: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    else:
        writer.add_array(key, list(value))


def write_llama(path: Path, shape: ModelShape | None = None, *, chat_template: str | None = CHATML_TEMPLATE,
                name: str = "test-llama") -> Path:
    """A dense llama-architecture model."""
    shape = shape or ModelShape()
    return _write(path, "llama", shape, lambda w: None, _dense_ffn, name, chat_template=chat_template)


def _gemma3_attention(rng, shape: ModelShape, i: int) -> dict[str, np.ndarray]:
    e, hd = shape.n_embd, shape.head_dim
    return {**_attention_tensors(rng, shape, i),
            f"blk.{i}.attn_q_norm.weight": np.ones(hd, dtype=np.float32),
            f"blk.{i}.attn_k_norm.weight": np.ones(hd, dtype=np.float32),
            f"blk.{i}.post_attention_norm.weight": np.ones(e, dtype=np.float32),
            f"blk.{i}.post_ffw_norm.weight": np.ones(e, dtype=np.float32)}


def write_gemma3(path: Path, shape: ModelShape | None = None, *, sliding_window: int = 64,
                 chat_template: str | None = None, name: str = "test-gemma3-it") -> Path:
    """A `gemma3` model: sliding-window attention (`sliding_window` tokens) in 5 of every 6 blocks,
    the sixth global (llama.cpp's default pattern), Gemma's turn markers in its vocabulary; no chat
    template unless given, as some conversions leave it."""
    shape = shape or ModelShape(n_layer=6)

    def keys(w: gguf.GGUFWriter) -> None:
        w.add_key_length(shape.head_dim)
        w.add_value_length(shape.head_dim)
        w.add_sliding_window(sliding_window)

    return _write(path, "gemma3", shape, keys, _dense_ffn, name, block_attn=_gemma3_attention,
                  eos="<end_of_turn>", chat_template=chat_template,
                  extra_control=("<start_of_turn>", "<end_of_turn>"))


def write_deepseek_moe(path: Path, shape: ModelShape | None = None, chat_template: str = CHATML_TEMPLATE) -> Path:
    """A `deepseek`-architecture MoE: routed experts plus one shared expert per MoE block.

    llama.cpp's deepseek loader requires `deepseek.expert_shared_count` (the key the Clover file
    lacks) and, like Clover, keeps experts in `blk.N.ffn_{gate,up,down}_exps` tensors.
    """
    shape = shape or ModelShape()

    def arch_keys(w: gguf.GGUFWriter) -> None:
        w.add_leading_dense_block_count(shape.n_dense_lead)
        w.add_expert_count(shape.n_expert)
        w.add_expert_used_count(shape.n_expert_used)
        w.add_expert_feed_forward_length(shape.n_ff_exp)
        w.add_expert_shared_count(1)
        w.add_expert_weights_scale(1.0)

    def ffn(rng, s: ModelShape, i: int) -> dict[str, np.ndarray]:
        return _dense_ffn(rng, s, i) if i < s.n_dense_lead else _moe_ffn(rng, s, i)

    return _write(path, "deepseek", shape, arch_keys, ffn, "test-deepseek-moe", chat_template=chat_template)


# ----------------------------------------------------------------------------- Clover's own architecture
#
# `qwen35moe` (Qwen3.5/3.6 MoE, Clover): of every `full_attention_interval` blocks the last is full
# attention (query and output gate in one `attn_q` of 2 x heads x head width, q/k norms, partial
# rotary), the others gated delta nets (linear attention with a recurrent state: `attn_qkv` of
# conv_dim = 2 x state x groups + state x dt_rank, `attn_gate`, a causal conv, `ssm_*`); every block
# has routed experts plus a shared expert with its own gate. Shapes from llama.cpp's
# src/models/qwen35moe.cpp: head_v_dim = ssm.state_size, value_dim = state x dt_rank.

QWEN35_TEMPLATE = (Path(__file__).resolve().parent.parent / "data" / "qwen35-chat-template.jinja").read_text()


@dataclass(frozen=True)
class HybridShape:
    """The gated-delta-net sizes of a tiny qwen35moe (Clover: 4, 128, 16, 32, and interval 4)."""

    conv_kernel: int = 4
    state: int = 16  # ssm.state_size: the head width of keys and values
    groups: int = 2  # ssm.group_count: key heads
    dt_rank: int = 4  # ssm.time_step_rank: value heads
    interval: int = 4  # full_attention_interval
    rope_dims: int = 8  # partial rotary: a quarter of the head, as Clover's 64 of 256
    sections: tuple[int, int, int, int] = (2, 1, 1, 0)  # mrope sections, summing to rope_dims / 2

    @property
    def value_dim(self) -> int:
        return self.state * self.dt_rank

    @property
    def conv_dim(self) -> int:
        return 2 * self.state * self.groups + self.value_dim


def qwen35_shape(**changes: Any) -> ModelShape:
    """The tiny Clover's sizes: 4 blocks, head width 32 (a q8_0 KV cache needs a multiple of its 32-value
    block: Clover's is 256), 8 experts of which 2 run."""
    return ModelShape(**{"n_layer": 4, "n_embd": 128, "n_head": 4, "n_head_kv": 2, **changes})


def qwen35_block_is_recurrent(i: int, shape: ModelShape, hybrid: HybridShape) -> bool:
    return i < shape.n_layer and (i + 1) % hybrid.interval != 0


def write_qwen35moe(path: Path, shape: ModelShape | None = None, *, hybrid: HybridShape | None = None,
                    mtp: bool = False, chat_template: str = QWEN35_TEMPLATE, name: str = "test-qwen35moe",
                    dialect: str = "upstream") -> Path:
    """A tiny Clover: `shape.n_layer` blocks (default 4: three gated delta nets, then full attention),
    routed plus shared experts in every block, the Qwen3.5/3.6 chat template (thinking switch, XML tool
    calls). `mtp`: plus block N, the multi-token-prediction head the public Qwen3.6 MTP files carry
    (`nextn_predict_layers = 1`: a full-attention block with its experts and the nextn.* tensors).
    dialect "vendor": the Clover vendor's two differences that concern qwen35moe (the rotary width under
    rope.partial_dimension_count with the head width in rope.dimension_count; eos = <|endoftext|>); the
    shared-expert count key is not read by llama.cpp's qwen35moe loader, so no file has it."""
    if dialect not in ("upstream", "vendor"):
        raise ValueError("dialect must be 'upstream' or 'vendor'")
    shape = shape or qwen35_shape()
    hybrid = hybrid or HybridShape()
    arch = "qwen35moe"
    hd, e = shape.head_dim, shape.n_embd

    def arch_keys(w: gguf.GGUFWriter) -> None:
        w.add_uint32(f"{arch}.attention.key_length", hd)
        w.add_uint32(f"{arch}.attention.value_length", hd)
        w.add_expert_count(shape.n_expert)
        w.add_expert_used_count(shape.n_expert_used)
        w.add_expert_feed_forward_length(shape.n_ff_exp)
        w.add_uint32(f"{arch}.expert_shared_feed_forward_length", shape.n_ff_exp)
        w.add_uint32(f"{arch}.full_attention_interval", hybrid.interval)
        w.add_uint32(f"{arch}.ssm.conv_kernel", hybrid.conv_kernel)
        w.add_uint32(f"{arch}.ssm.state_size", hybrid.state)
        w.add_uint32(f"{arch}.ssm.group_count", hybrid.groups)
        w.add_uint32(f"{arch}.ssm.time_step_rank", hybrid.dt_rank)
        w.add_uint32(f"{arch}.ssm.inner_size", hybrid.value_dim)
        w.add_array(f"{arch}.rope.dimension_sections", list(hybrid.sections))
        if mtp:
            w.add_uint32(f"{arch}.nextn_predict_layers", 1)
        if dialect == "vendor":
            w.add_uint32(f"{arch}.rope.partial_dimension_count", hybrid.rope_dims)

    def attn(rng: np.random.Generator, s: ModelShape, i: int) -> dict[str, np.ndarray]:
        p = f"blk.{i}."
        out = {p + "attn_norm.weight": np.ones(e, np.float32), p + "post_attention_norm.weight": np.ones(e, np.float32)}
        if qwen35_block_is_recurrent(i, s, hybrid):
            out.update({
                p + "attn_qkv.weight": _random(rng, (e, hybrid.conv_dim), s.dtype),
                p + "attn_gate.weight": _random(rng, (e, hybrid.value_dim), s.dtype),
                p + "ssm_conv1d.weight": _random(rng, (hybrid.conv_kernel, hybrid.conv_dim), np.float32, scale=0.5),
                p + "ssm_dt.bias": _random(rng, (hybrid.dt_rank,), np.float32, scale=0.5),
                p + "ssm_a": -np.abs(_random(rng, (hybrid.dt_rank,), np.float32, scale=1.0)) - 0.1,
                p + "ssm_alpha.weight": _random(rng, (e, hybrid.dt_rank), np.float32),
                p + "ssm_beta.weight": _random(rng, (e, hybrid.dt_rank), np.float32),
                p + "ssm_norm.weight": np.ones(hybrid.state, np.float32),
                p + "ssm_out.weight": _random(rng, (hybrid.value_dim, e), s.dtype),
            })
        else:
            out.update({
                p + "attn_q.weight": _random(rng, (e, 2 * s.n_head * hd), s.dtype),
                p + "attn_k.weight": _random(rng, (e, s.n_head_kv * hd), s.dtype),
                p + "attn_v.weight": _random(rng, (e, s.n_head_kv * hd), s.dtype),
                p + "attn_output.weight": _random(rng, (s.n_head * hd, e), s.dtype),
                p + "attn_q_norm.weight": np.ones(hd, np.float32),
                p + "attn_k_norm.weight": np.ones(hd, np.float32),
            })
        if i >= s.n_layer:  # the MTP head: embedding and hidden state in, one block, the shared output out
            out.update({
                p + "nextn.eh_proj.weight": _random(rng, (2 * e, e), s.dtype),
                p + "nextn.enorm.weight": np.ones(e, np.float32),
                p + "nextn.hnorm.weight": np.ones(e, np.float32),
                p + "nextn.shared_head_norm.weight": np.ones(e, np.float32),
            })
        return out

    def ffn(rng: np.random.Generator, s: ModelShape, i: int) -> dict[str, np.ndarray]:
        out = _moe_ffn(rng, s, i)
        out[f"blk.{i}.ffn_gate_inp_shexp.weight"] = _random(rng, (e,), np.float32)
        return out

    vendor = dialect == "vendor"
    return _write(path, arch, shape, arch_keys, ffn, name, rope_dims=hd if vendor else hybrid.rope_dims,
                  eos="<|endoftext|>" if vendor else "<|im_end|>", chat_template=chat_template, block_attn=attn,
                  n_blocks=shape.n_layer + (1 if mtp else 0))


# ----------------------------------------------------------------------------- the patch's test double
#
# `glm4moe` is an MoE with a shared expert whose loader requires `{arch}.expert_shared_count`,
# like Clover's, and unlike `deepseek` it allows a rotary width smaller than the head width
# (deepseek asserts they are equal), so all three of the dialect's differences change behaviour.

DIALECTS = ("upstream", "vendor", "key-only")


def write_glm4_moe(path: Path, shape: ModelShape | None = None, *, dialect: str = "upstream",
                   rotary_dims: int | None = None) -> Path:
    """A `glm4moe` MoE (dense first block, then routed + shared experts, partial rotary embedding).

    dialect "upstream": what upstream llama.cpp expects. "vendor": the Clover vendor's dialect
    (no expert_shared_count; rope.dimension_count = head width with the rotary width under
    rope.partial_dimension_count; eos = <|endoftext|>). "key-only": the vendor file with only
    expert_shared_count added. The same seed gives the same tensors in every dialect.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {DIALECTS}")
    shape = shape or ModelShape()
    rotary = rotary_dims if rotary_dims is not None else shape.head_dim // 2
    arch = "glm4moe"

    def arch_keys(w: gguf.GGUFWriter) -> None:
        w.add_leading_dense_block_count(shape.n_dense_lead)
        w.add_expert_count(shape.n_expert)
        w.add_expert_used_count(shape.n_expert_used)
        w.add_expert_feed_forward_length(shape.n_ff_exp)
        if dialect != "vendor":
            w.add_expert_shared_count(1)
        w.add_expert_weights_scale(1.0)
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        if dialect != "upstream":
            w.add_uint32(f"{arch}.rope.partial_dimension_count", rotary)

    def ffn(rng, s: ModelShape, i: int) -> dict[str, np.ndarray]:
        tensors = _dense_ffn(rng, s, i) if i < s.n_dense_lead else _moe_ffn(rng, s, i)
        if i >= s.n_dense_lead:
            tensors[f"blk.{i}.exp_probs_b.bias"] = np.zeros(s.n_expert, dtype=np.float32)
        return tensors

    # glm4moe names the FFN's input norm post_attention_norm
    return _write(path, arch, shape, arch_keys, ffn, "test-glm4moe",
                  rope_dims=shape.head_dim if dialect != "upstream" else rotary,
                  eos="<|endoftext|>" if dialect != "upstream" else "<|im_end|>",
                  rename={"ffn_norm": "post_attention_norm"})


def write_split(source: Path, folder: Path, n_parts: int, stem: str | None = None) -> list[Path]:
    """Split a GGUF into `n_parts` files the way llama.cpp's gguf-split does: NAME-0000i-of-0000n.gguf,
    the first with all metadata, every part with `split.no`, `split.count`, `split.tensors.count`
    and its share of the tensors (each part's offsets relative to its own data section)."""
    from app.gguf.gguf_file import KV, TensorInfo, ValueType, encode_header, read_header

    header = read_header(source)
    stem = stem or source.stem
    tensors = list(header.tensors)
    per = -(-len(tensors) // n_parts)
    paths = []
    with open(source, "rb") as src:
        for i in range(n_parts):
            mine = tensors[i * per:(i + 1) * per]
            split_kvs = [KV.make("split.no", ValueType.UINT16, i), KV.make("split.count", ValueType.UINT16, n_parts),
                         KV.make("split.tensors.count", ValueType.INT32, len(tensors))]
            kvs = (list(header.kvs.values()) if i == 0 else [header.kvs["general.architecture"]]) + split_kvs
            infos, offset, blobs = [], 0, []
            for t in mine:
                src.seek(header.data_offset + t.offset)
                blob = src.read(t.n_bytes)
                infos.append(TensorInfo(t.name, t.shape, t.ggml_type, offset))
                pad = -len(blob) % header.alignment
                blobs.append(blob + b"\0" * pad)
                offset += len(blob) + pad
            path = folder / f"{stem}-{i + 1:05d}-of-{n_parts:05d}.gguf"
            with open(path, "wb") as out:
                out.write(encode_header(header.version, kvs, infos, header.alignment))
                for blob in blobs:
                    out.write(blob)
            paths.append(path)
    return paths


def quantize_with_llama_cpp(source: Path, dest: Path, ftype: str = "Q4_K_M") -> Path:
    """Quantize with llama.cpp's own quantizer (`llama_model_quantize`, through llama-cpp-python), for the
    mixes gguf-py cannot write (the K-quants: Q4_K_M gives Q4_K to most matrices and Q6_K to some
    `ffn_down` and the output, as in a Q4_K_M file of Clover). A quantized source is re-quantized."""
    import ctypes

    from app.machine.llama_backend import llama

    lc = llama()
    params = lc.llama_model_quantize_default_params()
    params.ftype = getattr(lc, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    rc = lc.llama_model_quantize(str(source).encode(), str(dest).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({source.name} -> {ftype}) returned {rc}")
    return dest


# gpt-oss's harmony format: its turn markers, the end of a message and of a reply
HARMONY_TOKENS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>")


def _gpt_oss_block(rng, shape: ModelShape, i: int) -> dict[str, np.ndarray]:
    e, hd, h, kv, fx, n = shape.n_embd, shape.head_dim, shape.n_head, shape.n_head_kv, shape.n_ff_exp, shape.n_expert
    return {
        f"blk.{i}.attn_norm.weight": np.ones(e, dtype=np.float32),
        f"blk.{i}.post_attention_norm.weight": np.ones(e, dtype=np.float32),
        f"blk.{i}.attn_q.weight": _random(rng, (e, h * hd), shape.dtype),
        f"blk.{i}.attn_k.weight": _random(rng, (e, kv * hd), shape.dtype),
        f"blk.{i}.attn_v.weight": _random(rng, (e, kv * hd), shape.dtype),
        f"blk.{i}.attn_output.weight": _random(rng, (h * hd, e), shape.dtype),
        f"blk.{i}.attn_output.bias": np.zeros(e, dtype=np.float32),
        f"blk.{i}.attn_sinks.weight": np.zeros(h, dtype=np.float32),
        f"blk.{i}.ffn_gate_inp.weight": _random(rng, (e, n), np.float32, scale=0.5),
        f"blk.{i}.ffn_gate_inp.bias": np.zeros(n, dtype=np.float32),
        f"blk.{i}.ffn_gate_exps.weight": _random(rng, (e, fx, n), shape.dtype),
        f"blk.{i}.ffn_gate_exps.bias": np.zeros((n, fx), dtype=np.float32),
        f"blk.{i}.ffn_up_exps.weight": _random(rng, (e, fx, n), shape.dtype),
        f"blk.{i}.ffn_up_exps.bias": np.zeros((n, fx), dtype=np.float32),
        f"blk.{i}.ffn_down_exps.weight": _random(rng, (fx, e, n), shape.dtype),
        f"blk.{i}.ffn_down_exps.bias": np.zeros((n, e), dtype=np.float32),
    }


def write_gpt_oss(path: Path, shape: ModelShape | None = None, *, sliding_window: int = 64,
                  chat_template: str | None = None, name: str = "test-gpt-oss") -> Path:
    """A `gpt-oss` model: sliding-window attention in every other block, attention sinks, routed
    experts with biases, harmony's turn markers in its vocabulary; no chat template unless given."""
    shape = shape or ModelShape(n_layer=4, n_expert=4, n_expert_used=2)

    def keys(w: gguf.GGUFWriter) -> None:
        w.add_expert_count(shape.n_expert)
        w.add_expert_used_count(shape.n_expert_used)
        w.add_expert_feed_forward_length(shape.n_ff_exp)
        w.add_key_length(shape.head_dim)
        w.add_value_length(shape.head_dim)
        w.add_sliding_window(sliding_window)

    return _write(path, "gpt-oss", shape, keys, lambda rng, shape, i: {}, name, block_attn=_gpt_oss_block,
                  eos="<|return|>", chat_template=chat_template, extra_control=HARMONY_TOKENS)
