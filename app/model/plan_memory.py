"""The memory plan's arithmetic: what a model costs on this machine (weights on the GPU and in RAM, KV
cache, recurrent state, draft rollback, checkpoints, the MTP head, compute buffers) for one set of
choices, and the decode speed those choices are expected to give. No Qt.

`breakdown()` prices one option; app/model/plan.py chooses among options, app/model/plan_words.py
says the result in words. The reasoning behind the figures: docs/architecture/memory-plan.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.gguf.model_facts import ModelFacts
from app.machine.llama_load import LoadSettings

GiB = 1024**3
MiB = 1024**2
CUDA_COMPUTE_FACTOR = 692 / 497
N_UBATCH = 512
N_OUTPUTS = 1  # the chat engine needs the logits of the last token only
RAM_HEADROOM = 2 * GiB  # for the OS, the app and Qt, besides what the model keeps in RAM
# The prompt cache's RAM tier (app/engine/prompt_cache.py) at most: 4 GiB holds 48 Clover states of
# 12,000 tokens (its 10 attention blocks' f16 KV, 20 KiB a token, and the 62.81 MiB recurrent state)
PROMPT_CACHE_RAM_MAX = 4 * GiB
# Context checkpoints (app/engine/checkpoints.py), kept in system RAM for models whose cache cannot be
# cut back: one per turn lets follow-ups, regenerates and edits skip what is already evaluated. At most
# 16 (llama-server keeps 32 per slot) and at most 1 GiB: 16 of Clover's 62.81 MiB.
CHECKPOINTS_MAX = 16
# Speculative decoding's longest draft. A model with a recurrent state keeps a snapshot of it per draft
# token (llama.cpp's n_rs_seq) on the device: 8 would cost Clover 502 MiB, three expert blocks more in
# RAM on a 16 GB card; 4 (251 MiB) keeps most of what drafting gains where batches are cheap.
DRAFT_MAX = LoadSettings().draft_max
DRAFT_MAX_RECURRENT = 4


def draft_max(facts: ModelFacts) -> int:
    return DRAFT_MAX_RECURRENT if facts.recurrent_state_per_seq else DRAFT_MAX
CHECKPOINTS_RAM_MAX = 1 * GiB
KV_RANK = {"f16": 2, "q8_0": 1}  # KV cache precision, higher is better


def reproducible_layout(settings: LoadSettings, *, cpu: bool = True) -> LoadSettings:
    """The load under which a reply at temperature 0 is the same whatever else runs and ran before
    (the setting engine.reproducible; docs/architecture/decode-loop.md): a set of KV cells per slot,
    so a sequence's cells are its own and in position order; with several slots on the CPU no flash
    attention (its kernel splits a lone sequence's token over the threads past 512 cells, and not a
    token beside others); no drafts (their verify batches follow measured costs). The slots read a
    prompt piece alone."""
    return replace(settings, reproducible=True, kv_unified=False, speculative="off",
                   flash_attn=settings.flash_attn and not (cpu and settings.parallel > 1))


def checkpoint_count(facts: ModelFacts) -> int:
    """How many context checkpoints the plan keeps: none where the cache can be cut (no recurrent state)."""
    per = facts.recurrent_state_per_seq
    return min(CHECKPOINTS_MAX, CHECKPOINTS_RAM_MAX // per) if per else 0


@dataclass(frozen=True)
class PlanRequest:
    n_ctx: int | None = None  # None: the model's full window
    vram_bytes: int | None = None  # pretend the GPU has this much free memory (what-if planning)
    gpu_index: int | None = None  # None: the GPU with the most free memory
    margin_bytes: int | None = None  # None: max(512 MiB, 3 % of the card)
    allow_kv_quant: bool = True
    min_ctx: int = 4096
    # replies written at once (parallel slots), sharing n_ctx of KV, each with its own recurrent state;
    # 0: automatic (AUTO_SLOTS where the memory allows, fewer otherwise)
    parallel: int = 1
    # the setting: mtp loads a file's MTP head (and the plan counts it); auto weighs the plan with the head
    # against the plan without it and keeps the faster; ngram drafts without the head; off drafts nothing
    speculative: str = "auto"
    # reproducible replies (the setting engine.reproducible, `reproducible_layout`): nothing drafts, and with
    # several slots a set of n_ctx KV cells each (n_ctx x slots in all) and on the CPU no flash attention
    reproducible: bool = False


@dataclass(frozen=True)
class Breakdown:
    weights_gpu: int
    weights_ram: int
    kv: int
    recurrent: int
    compute: int
    on_gpu: bool  # KV, state and compute live on the GPU
    checkpoints: int = 0  # context checkpoints: copies of the recurrent state, always in system RAM
    rollback: int = 0  # a recurrent-state snapshot per draft token (n_rs_seq), beside the state itself
    slots: int = 1  # parallel slots: they share kv; recurrent, rollback and checkpoints are for all of them
    # the MTP head, where it drafts: its block's weights and its draft context's KV cache and compute
    mtp_gpu: int = 0
    mtp_ram: int = 0
    mtp_blocks: tuple[int, ...] = ()  # the head's blocks (none: it does not draft, and is not loaded)
    mtp_experts_in_ram: bool = False  # its routed experts stay in RAM, as the last block's do
    reproducible: bool = False  # reproducible replies: with several slots, kv is n_ctx cells a slot

    @property
    def mtp(self) -> int:
        return self.mtp_gpu + self.mtp_ram

    @property
    def gpu_total(self) -> int:
        return self.weights_gpu + self.mtp_gpu + (
            self.kv + self.recurrent + self.rollback + self.compute if self.on_gpu else 0)

    @property
    def ram_total(self) -> int:
        return self.weights_ram + self.mtp_ram + self.checkpoints + (
            0 if self.on_gpu else self.kv + self.recurrent + self.rollback + self.compute)


def breakdown(facts: ModelFacts, n_ctx: int, cpu_moe_blocks: tuple[int, ...], type_k: str, type_v: str, *,
              on_gpu: bool, flash_attn: bool = True, parallel: int = 1, mtp: bool = False,
              reproducible: bool = False) -> Breakdown:
    """What a plan costs. `parallel` slots: one n_ctx of KV cache for all of them (llama.cpp's unified
    cache, n_seq_max sequences in one pool), or with `reproducible` n_ctx each (the partitioned cache: a
    stream of n_ctx cells a sequence), and one recurrent state each; the checkpoints' RAM is shared
    out among them, and each slot drafts n-grams with rollback snapshots of its own. `mtp`: the file's
    MTP head drafts (see `mtp_cost`: one draft context, whatever the slot count: a sequence a slot in
    its one attention block's KV pool, as the target's)."""
    parallel = max(parallel, 1)
    in_ram = set(cpu_moe_blocks)
    experts_ram = sum(b.expert_bytes for b in facts.blocks if b.index in in_ram)
    compute = facts.compute_bytes(n_ctx, n_ubatch=N_UBATCH, n_outputs=N_OUTPUTS, flash_attn=flash_attn)
    if on_gpu:
        compute = int(compute * CUDA_COMPUTE_FACTOR)
        weights_gpu = facts.weights_bytes - facts.input_bytes - experts_ram
        weights_ram = facts.input_bytes + experts_ram
    else:
        weights_gpu, weights_ram = 0, facts.weights_bytes
    per_seq = facts.recurrent_state_per_seq
    streams = parallel if reproducible else 1
    b = Breakdown(weights_gpu, weights_ram, facts.kv_bytes(n_ctx, type_k, type_v) * streams,
                  per_seq * parallel, compute, on_gpu,
                  checkpoint_count(facts) // parallel * parallel * per_seq,
                  0 if reproducible else draft_max(facts) * per_seq * parallel, parallel,
                  reproducible=reproducible)
    return mtp_cost(facts, b, n_ctx, cpu_moe_blocks, type_k, type_v, flash_attn) if mtp else b


def uses_mtp(facts: ModelFacts, request: PlanRequest) -> bool:
    """The file's MTP head may draft: it has one and the setting allows it (auto or mtp), with any number
    of slots (it drafts for each). Under auto the plan still weighs it (`Plan.breakdown.mtp_blocks` says
    whether the plan reserved it, and `Plan.speculative` what the load drafts with)."""
    return bool(facts.extra_blocks) and request.speculative in ("auto", "mtp")


def mtp_cost(facts: ModelFacts, b: Breakdown, n_ctx: int, cpu_moe_blocks: tuple[int, ...], type_k: str,
             type_v: str, flash_attn: bool) -> Breakdown:
    """`b` with the MTP head: its block's weights (routed experts where the last block's are, the rest on
    the GPU with the other blocks), its draft context's KV cache (one attention block, as many cells as
    the target's) and compute buffers (a graph of one block, a row of logits a slot), where the target's are."""
    experts = facts.unused_expert_bytes
    experts_in_ram = bool(cpu_moe_blocks) and cpu_moe_blocks[-1] == facts.n_layer - 1
    kv = facts.mtp_kv_bytes(n_ctx, type_k, type_v)
    # a row of logits a slot (app.engine.mtp.HeadContext reserves one a sequence)
    compute = facts.compute_bytes(n_ctx, n_ubatch=N_UBATCH, n_outputs=max(b.slots, 1), flash_attn=flash_attn)
    if b.on_gpu:
        gpu = facts.unused_bytes - (experts if experts_in_ram else 0) + kv + int(compute * CUDA_COMPUTE_FACTOR)
        ram = experts if experts_in_ram else 0
    else:
        gpu, ram = 0, facts.unused_bytes + kv + compute
    return replace(b, mtp_gpu=gpu, mtp_ram=ram, mtp_blocks=facts.extra_blocks, mtp_experts_in_ram=experts_in_ram)


# Clover's reported figures: about 208 tok/s with everything on an RTX 4090, about 102 tok/s with the
# experts of 10 of 40 blocks in system RAM (the 16 GB budget). Each block's experts read from RAM
# adds about the same time per token, so the speed goes as 1 / (1 + blocks / 10.4).
_BLOCKS_FOR_HALF_SPEED = 10 / (208 / 102 - 1)


def speed_share(blocks_in_ram: int, expert_blocks: int) -> float:
    """The share of all-on-GPU speed left with experts of some blocks in RAM (see speed_expectation)."""
    return 1 / (1 + blocks_in_ram / _BLOCKS_FOR_HALF_SPEED * 40 / max(expert_blocks, 1))


# Clover's reported all-on-GPU figure (RTX 4090, tok/s): the scale of the planner's tok/s estimates.
REPORTED_TPS = 208
# The decode speed-up the MTP head's drafts are expected to bring where everything is on the GPU. An
# assumption, at the low end of public reports for Qwen3.6-35B-A3B in llama.cpp (../shared/design/
# clover-facts.md: +10-20 % on CUDA with IQ4_XS and Q8_0 files, up to 1.49x on an A100 at 76 %
# acceptance, "it pays less on MoE than on dense models"; one publisher saw no speed-up on consumer
# GPUs). This repo has no measurement with real weights: tests/bench/mtp.py runs random weights, which
# accept nothing, and the GPU check (docs/gpu-check.md) ran zero weights. Tune measures drafting on and off.
MTP_GAIN = 1.10


def expected_tps(blocks_in_ram: int, expert_blocks: int, gain: float = 1.0) -> float:
    """Expected decode tokens/s, scaled from Clover's reported figures (see speed_share), with a drafting
    `gain` on the GPU's share of a token's time only: the experts of the blocks in RAM are read for every
    token a verify batch checks (k tokens read up to k x 8 experts a block), so drafting does not shorten
    that share. The KV type does not enter: f16 and q8_0 decode at about the same speed."""
    in_ram = blocks_in_ram / _BLOCKS_FOR_HALF_SPEED * 40 / max(expert_blocks, 1)
    return REPORTED_TPS / (1 / gain + in_ram)
