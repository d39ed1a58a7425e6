"""The memory planner: how a model fits on this machine's GPU, with a breakdown and a reason. No Qt.

Given a model's facts (`app.gguf.model_facts`, from a local or remote header), the GPU probe and the
system RAM, it picks, in this order of preference:

1. the context the user asked for (default: the model's full window);
2. the fewest blocks whose routed experts stay in system RAM (`n_cpu_moe`; llama.cpp's
   `--n-cpu-moe` convention: the first blocks);
3. an f16 KV cache, else q8_0 (half the size; needs flash attention, which is on for GPUs).

Only when nothing fits at the asked context does it halve the context, down to `min_ctx`.

Parallel slots share one KV cache of that context (llama.cpp's unified cache: one pool, any slot may use
all of it); each has its own recurrent state, rollback snapshots and checkpoints. `parallel=0` (serve's
`--parallel auto`, the window's automatic setting) plans AUTO_SLOTS of them where that costs nothing the
plan for one keeps (its context, its KV precision, its experts on the GPU), fewer otherwise, down to 1
(`Plan.slots_note` says how many and why).

A file with a multi-token-prediction head (the public Qwen3.6 MTP files) is planned twice under
speculative decoding "auto": with the head's memory (its block, its draft context, the rollback
snapshots) and without it (n-grams draft, with the snapshots). The head is kept where it costs no
context and no KV precision and its expected tokens/s (`expected_tps`, with `MTP_GAIN`) beats the
plan without it; the plan's text shows both. "mtp" forces the head; "off" never reserves it.

The GPU budget is the free memory NVML reports minus a margin for the driver, the display and
fragmentation. Compute buffers are estimated from the header (checked against llama.cpp's own
no-alloc sizing in the tests); on CUDA they run larger than on the CPU backend, by the factor
between the published Clover figure (692 MiB at n_ubatch 512) and llama.cpp's CPU sizing of the
same shape (497 MiB).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.gguf.model_facts import ModelFacts
from app.machine.gpu import GpuInfo, GpuProbe
from app.machine.llama_load import LoadSettings
from app.machine.system_memory import SystemMemory

if TYPE_CHECKING:
    from app.gguf.gguf_file import GGUFHeader
    from app.machine.snapshot import Machine

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


@dataclass
class Plan:
    model: str
    device: str  # "gpu" or "cpu"
    gpu: GpuInfo | None
    budget_bytes: int  # usable GPU memory (0 in CPU mode)
    n_ctx: int
    type_k: str
    type_v: str
    flash_attn: bool
    cpu_moe_blocks: tuple[int, ...]
    n_expert_blocks: int
    breakdown: Breakdown
    ram_available: int
    fits: bool
    reason: str
    suggestions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    device_label: str = ""
    # what the load drafts with: "auto" (and "mtp") load the file's MTP head where it has one; "ngram" where
    # the plan kept the head off; "off" where nothing drafts
    speculative: str = "auto"
    drafting: DraftingChoice | None = None  # the plans with and without the MTP head, side by side
    slots_note: str = ""  # with parallel=0: how many slots the plan chose and why, in words

    @property
    def parallel(self) -> int:
        return self.breakdown.slots

    @property
    def n_cpu_moe(self) -> int:
        return len(self.cpu_moe_blocks)

    def settings(self) -> LoadSettings:
        return LoadSettings(
            n_ctx=self.n_ctx, n_gpu_layers=-1 if self.device == "gpu" else 0,
            cpu_moe_blocks=self.cpu_moe_blocks + (b.mtp_blocks if (b := self.breakdown).mtp_experts_in_ram else ()),
            flash_attn=self.flash_attn, type_k=self.type_k, type_v=self.type_v, n_ubatch=N_UBATCH,
            n_outputs_max=N_OUTPUTS, main_gpu=self.gpu.index if self.gpu else 0,
            ctx_checkpoints=self.n_checkpoints, draft_max=self.draft_max, parallel=self.parallel,
            cache_ram_mb=self.cache_ram_mb, speculative=self.speculative,
        )

    @property
    def cache_ram_mb(self) -> int:
        """The prompt cache's RAM tier: a quarter of the RAM the plan leaves free (after the weights
        and experts it keeps in RAM, the checkpoints and the headroom), at most PROMPT_CACHE_RAM_MAX."""
        spare = self.ram_available - RAM_HEADROOM - self.breakdown.ram_total
        return int(min(max(spare // 4, 0), PROMPT_CACHE_RAM_MAX) // MiB)

    @property
    def draft_max(self) -> int:
        b = self.breakdown
        if self.speculative == "off":
            return 0
        return b.rollback // b.recurrent if b.recurrent else DRAFT_MAX

    @property
    def n_checkpoints(self) -> int:
        """Context checkpoints in all (shared out among the slots)."""
        b = self.breakdown
        return b.checkpoints * b.slots // b.recurrent if b.recurrent else 0

    def lines(self) -> list[str]:
        b = self.breakdown
        out = [self.reason, ""]
        out.append(f"device           {self.device_label or self.device}")
        if self.device == "gpu":
            out.append(f"GPU budget       {_gib(self.budget_bytes)} (free memory minus margin)")
        slots = f" shared by {b.slots} slots" if b.slots > 1 else ""
        out.append(f"context          {self.n_ctx:,} tokens{slots}, KV cache {self.type_k}/{self.type_v}, "
                   f"flash attention {'on' if self.flash_attn else 'off'}")
        if self.slots_note:
            out.append(f"slots            {b.slots} ({self.slots_note})")
        if self.n_cpu_moe and self.device == "gpu":  # on the CPU, or with none in RAM, it says nothing
            out.append(f"experts in RAM   {self.n_cpu_moe} of {self.n_expert_blocks} blocks"
                       + (f" (blocks {_ranges(self.cpu_moe_blocks)})" if self.cpu_moe_blocks else ""))
        if self.drafting is not None:
            out += self.drafting.lines()
        out.append("memory")
        if self.device == "gpu":
            out.append(f"  weights on GPU   {_gib(b.weights_gpu)}")
        out.append(f"  weights in RAM   {_gib(b.weights_ram)}")
        out.append(f"  KV cache         {_gib(b.kv)}")
        if b.recurrent:
            out.append(f"  recurrent state  {_gib(b.recurrent)}"
                       + (f" ({b.slots} x {b.recurrent / b.slots / MiB:.2f} MiB, one per slot)" if b.slots > 1 else ""))
        if b.mtp:
            out.append(f"  MTP head         {_gib(b.mtp)} (block {_ranges(b.mtp_blocks)} and its draft context: "
                       "speculative decoding drafts with the model's multi-token-prediction head)")
        if b.rollback:
            out.append(f"  draft rollback   {_gib(b.rollback)} ({b.rollback // b.recurrent} snapshots of the recurrent "
                       "state: speculative decoding takes back rejected draft tokens)")
        if b.checkpoints:
            out.append(f"  checkpoints      {_gib(b.checkpoints)} in RAM ({self.n_checkpoints} x "
                       f"{b.recurrent / b.slots / MiB:.2f} MiB of recurrent state: follow-ups reuse the conversation)")
        out.append(f"  compute buffers  {_gib(b.compute)}")
        if self.device == "gpu":
            out.append(f"  GPU total        {_gib(b.gpu_total)} of {_gib(self.budget_bytes)}")
        usable = max(self.ram_available - RAM_HEADROOM, 0)
        out.append(f"  RAM needed       {_gib(b.ram_total)} of {_gib(usable)} usable "
                   f"({_gib(self.ram_available).strip()} available less {RAM_HEADROOM // GiB} GiB headroom)")
        out += [f"warning: {w}" for w in self.warnings]
        out += [f"to fit: {s}" for s in self.suggestions]
        return out


def _gib(n: int) -> str:
    """A size in a 10-character column: MiB below 1 GiB (a 28 MB model is not "0.00 GiB")."""
    return size_text(n)


def size_text(n: int, width: int = 6) -> str:
    """n bytes as "1.50 GiB", or "27.3 MiB" below 1 GiB, right-aligned to width digits."""
    return f"{n / GiB:{width}.2f} GiB" if n >= GiB else f"{n / MiB:{width}.1f} MiB"


def _ranges(blocks: tuple[int, ...]) -> str:
    """(0, 1, 2, 5, 7, 8) → '0-2, 5, 7-8'."""
    parts = []
    for _, run in itertools.groupby(enumerate(sorted(blocks)), key=lambda ib: ib[1] - ib[0]):
        values = [b for _, b in run]
        parts.append(f"{values[0]}-{values[-1]}" if len(values) > 1 else str(values[0]))
    return ", ".join(parts)


def breakdown(facts: ModelFacts, n_ctx: int, cpu_moe_blocks: tuple[int, ...], type_k: str, type_v: str, *,
              on_gpu: bool, flash_attn: bool = True, parallel: int = 1, mtp: bool = False) -> Breakdown:
    """What a plan costs. `parallel` slots: one n_ctx of KV cache for all of them (llama.cpp's unified
    cache, n_seq_max sequences in one pool) and one recurrent state each; the checkpoints' RAM is shared
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
    b = Breakdown(weights_gpu, weights_ram, facts.kv_bytes(n_ctx, type_k, type_v),
                  per_seq * parallel, compute, on_gpu,
                  checkpoint_count(facts) // parallel * parallel * per_seq,
                  draft_max(facts) * per_seq * parallel, parallel)
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


def _contexts(wanted: int, min_ctx: int) -> list[int]:
    out = [wanted]
    ctx = wanted
    while ctx // 2 >= min_ctx:
        ctx //= 2
        out.append(ctx)
    return out


def _pick_gpu(probe: GpuProbe, request: PlanRequest) -> GpuInfo | None:
    if not probe.has_gpu:
        return None
    if request.gpu_index is not None:
        for g in probe.gpus:
            if g.index == request.gpu_index:
                return g
        raise ValueError(f"there is no GPU {request.gpu_index} (found {[g.index for g in probe.gpus]})")
    return max(probe.gpus, key=lambda g: g.free_bytes)


def make_plan(facts: ModelFacts, probe: GpuProbe, ram: SystemMemory, request: PlanRequest = PlanRequest()) -> Plan:
    if request.parallel <= 0:
        return _auto_slots(facts, probe, ram, request)
    wanted_ctx = min(request.n_ctx or facts.n_ctx_train, facts.n_ctx_train)
    warnings: list[str] = []
    mtp = uses_mtp(facts, request)
    if facts.extra_blocks and not mtp:
        warnings.append(f"the file carries a multi-token-prediction head (block {_ranges(facts.extra_blocks)}, "
                        f"{facts.unused_bytes / GiB:.2f} GiB) that drafts only with speculative decoding auto or "
                        f"mtp (speculative decoding: {request.speculative}): it is not loaded")
    if request.n_ctx and request.n_ctx > facts.n_ctx_train:
        warnings.append(f"the model was trained for {facts.n_ctx_train:,} tokens; context capped there")
    ram_budget = max(ram.available_bytes - RAM_HEADROOM, 0)
    gpu = _pick_gpu(probe, request) if request.vram_bytes is None else None
    if request.vram_bytes is None and gpu is None:
        return _cpu_plan(facts, probe, ram, ram_budget, wanted_ctx, request, warnings)

    if request.vram_bytes is not None:
        free = total = request.vram_bytes
    else:
        assert gpu is not None  # returned above otherwise
        free, total = gpu.free_bytes, gpu.total_bytes
    margin = request.margin_bytes if request.margin_bytes is not None else max(512 * MiB, int(total * 0.03))
    budget = max(free - margin, 0)
    if gpu is not None and gpu.mig_enabled:
        warnings.append("MIG mode is on: a MIG slice can have less memory than the whole GPU NVML reports")
    if gpu is not None and probe.has_gpu and len(probe.gpus) > 1:
        warnings.append(f"{len(probe.gpus)} GPUs found; planning for GPU {gpu.index}, "
                        "the one with the most free memory")
    label = (f"GPU {gpu.index}: {gpu.name}, {_gib(gpu.free_bytes).strip()} free of {_gib(gpu.total_bytes).strip()}"
             if gpu is not None else f"a GPU with {_gib(free).strip()} free (what-if)")

    def fit(with_head: bool, asked: PlanRequest = request) -> Plan:
        plan = _gpu_plan(facts, gpu, budget, margin, label, ram, ram_budget, wanted_ctx, asked, warnings,
                         mtp=with_head)
        plan.speculative = _speculative(asked, mtp, with_head)
        return plan

    if not mtp:
        return fit(False)
    # mtp forces the head: the plan without it, for comparison, is what auto would load without it
    without = fit(False, replace(request, speculative="auto"))
    return _weigh(fit(True), without, forced=request.speculative == "mtp")


# Parallel slots planned by `parallel=0`: llama-server's default since late 2025 (4 slots, one KV pool)
AUTO_SLOTS = 4


def _auto_slots(facts: ModelFacts, probe: GpuProbe, ram: SystemMemory, request: PlanRequest) -> Plan:
    """The plan with the most slots, AUTO_SLOTS at most, that costs nothing the plan for one slot keeps:
    its context, its KV precision, its experts on the GPU, and fitting at all (each slot adds a recurrent
    state and its rollback snapshots; the KV pool is the same); `slots_note` says why that many."""
    one = make_plan(facts, probe, ram, replace(request, parallel=1))
    if not one.fits:
        one.slots_note = "automatic: the model does not fit with one"
        return one
    cost = ""
    for n in range(AUTO_SLOTS, 1, -1):
        plan = make_plan(facts, probe, ram, replace(request, parallel=n))
        more = _slots_cost(plan, one)
        if not more:
            plan.slots_note = (f"automatic: {n + 1} would {cost}" if cost else
                               f"automatic: {n} at no cost to the context, the KV precision or the experts on the GPU"
                               if plan.device == "gpu" else f"automatic: {n} at no cost to the context")
            return plan
        cost = more
    one.slots_note = f"automatic: 2 would {cost}"
    return one


def _slots_cost(plan: Plan, one: Plan) -> str:
    """What a plan of several slots gives up against the plan for one, in words ("": nothing)."""
    if not plan.fits:
        return "not fit this machine's memory"
    if plan.n_ctx < one.n_ctx:
        return f"shrink the context to {plan.n_ctx:,} tokens"
    if _KV_RANK[plan.type_k] < _KV_RANK[one.type_k] or _KV_RANK[plan.type_v] < _KV_RANK[one.type_v]:
        return f"need a {plan.type_k} KV cache"
    if plan.n_cpu_moe > one.n_cpu_moe:
        more = plan.n_cpu_moe - one.n_cpu_moe
        return f"keep the experts of {more} more block{'s' if more != 1 else ''} in system RAM"
    return ""


def _speculative(request: PlanRequest, may_use_head: bool, with_head: bool) -> str:
    """What the load drafts with: the setting, except that auto without the head the file carries drafts
    with n-grams (auto would load the head, whose memory the plan did not reserve)."""
    if may_use_head and not with_head and request.speculative == "auto":
        return "ngram"
    return request.speculative


def _gpu_plan(facts: ModelFacts, gpu: GpuInfo | None, budget: int, margin: int, label: str, ram: SystemMemory,
              ram_budget: int, wanted_ctx: int, request: PlanRequest, warnings: list[str], *, mtp: bool) -> Plan:
    """The preferred plan that fits the GPU budget: the asked context, the fewest blocks in RAM, f16 KV."""
    kv_types = [("f16", "f16"), ("q8_0", "q8_0")] if request.allow_kv_quant else [("f16", "f16")]
    blocks = facts.expert_blocks
    for n_ctx in _contexts(wanted_ctx, min(request.min_ctx, wanted_ctx)):
        for k in range(len(blocks) + 1):
            for type_k, type_v in kv_types:
                cpu_blocks = tuple(blocks[:k])
                b = breakdown(facts, n_ctx, cpu_blocks, type_k, type_v, on_gpu=True, parallel=request.parallel,
                              mtp=mtp)
                if b.gpu_total > budget:
                    continue
                plan = Plan(facts.name or facts.arch, "gpu", gpu, budget, n_ctx, type_k, type_v, True, cpu_blocks,
                            len(blocks), b, ram.available_bytes, True, "", warnings=warnings, device_label=label)
                plan.reason = _reason(plan, wanted_ctx)
                if b.ram_total > ram_budget:
                    plan.fits = False
                    plan.reason = (f"Does not fit in system RAM: {_gib(b.ram_total).strip()} must stay in RAM and "
                                   f"{_gib(ram_budget).strip()} is usable. On the GPU side: {plan.reason}")
                    plan.suggestions.append(
                        f"system RAM: {_gib(b.ram_total).strip()} must stay in RAM but only "
                        f"{_gib(ram_budget).strip()} is available beyond a {RAM_HEADROOM // GiB} GiB headroom; "
                        "close programs or add RAM")
                return plan
    # Nothing fits, even with every expert in RAM at the smallest context.
    n_ctx = min(request.min_ctx, wanted_ctx)
    b = breakdown(facts, n_ctx, tuple(blocks), kv_types[-1][0], kv_types[-1][1], on_gpu=True,
                  parallel=request.parallel, mtp=mtp)
    plan = Plan(facts.name or facts.arch, "gpu", gpu, budget, n_ctx, kv_types[-1][0], kv_types[-1][1], True,
                tuple(blocks), len(blocks), b, ram.available_bytes, False,
                f"Does not fit: even at {n_ctx:,} tokens with every expert in RAM it needs "
                f"{_gib(b.gpu_total).strip()} on the GPU; {_gib(budget).strip()} is usable.", warnings=warnings,
                device_label=label)
    plan.suggestions.append(f"a GPU with at least {_gib(b.gpu_total + margin).strip()} free")
    plan.suggestions.append("a smaller quantization of the model, or CPU mode")
    return plan


_KV_RANK = {"f16": 2, "q8_0": 1}  # KV cache precision, higher is better


@dataclass(frozen=True)
class DraftOption:
    """One side of the drafting choice: a fitted plan with or without the MTP head's memory."""

    head: bool  # the MTP head (its block, draft context and rollback snapshots) is reserved
    n_ctx: int
    type_k: str
    blocks_in_ram: int
    expert_blocks: int
    fits: bool
    tps: float  # expected decode tokens/s (`expected_tps`: scaled from Clover's reported figures)
    drafting_bytes: int  # the memory drafting takes: the head and the rollback snapshots
    settings: LoadSettings  # what a load of this option uses (Tune can measure both)

    @classmethod
    def of(cls, plan: Plan, head: bool) -> DraftOption:
        b = plan.breakdown
        return cls(head, plan.n_ctx, plan.type_k, plan.n_cpu_moe, plan.n_expert_blocks, plan.fits,
                   expected_tps(plan.n_cpu_moe, plan.n_expert_blocks, MTP_GAIN if head else 1.0),
                   b.mtp + b.rollback, plan.settings())

    def line(self, name: str) -> str:
        place = (f"{self.blocks_in_ram} of {self.expert_blocks} blocks in RAM" if self.blocks_in_ram
                 else "no experts in RAM")
        drafts = "the MTP head drafts" if self.head else (
            "n-grams draft" if self.settings.drafts else "nothing drafts")
        return (f"  {name:<16} {place}, {self.n_ctx:,} tokens, KV {self.type_k}, ~{self.tps:.0f} tok/s "
                f"({drafts}{'' if self.fits else '; does not fit'})")


@dataclass(frozen=True)
class DraftingChoice:
    """The plan with the MTP head's memory against the plan without it, and which one the plan keeps."""

    with_head: DraftOption
    without: DraftOption
    kept: bool  # the head is reserved (and loaded)
    why: str  # the reason, in words
    forced: bool = False  # the setting (speculative decoding: mtp) asked for the head

    def costs(self) -> str:
        """What the head costs against the plan without it, in words ("" where nothing)."""
        w, wo = self.with_head, self.without
        out = []
        if w.n_ctx < wo.n_ctx:
            out.append(f"a {w.n_ctx:,}-token context instead of {wo.n_ctx:,}")
        if _KV_RANK.get(w.type_k, 0) < _KV_RANK.get(wo.type_k, 0):
            out.append(f"a {w.type_k} KV cache instead of {wo.type_k}")
        if w.blocks_in_ram > wo.blocks_in_ram:
            out.append(f"{w.blocks_in_ram} blocks of experts in RAM instead of {wo.blocks_in_ram}")
        if wo.fits and not w.fits:
            out.append("a plan that does not fit")
        return ", ".join(out)

    def sentence(self) -> str:
        """One sentence for the plan's reason."""
        w, wo = self.with_head, self.without
        speeds = f"~{w.tps:.0f} tok/s expected with it, ~{wo.tps:.0f} without"
        if self.kept:
            setting = " (speculative decoding: mtp)" if self.forced else ""
            return f"The MTP head drafts{setting}: {self.why} ({speeds})."
        drafts = "n-grams draft instead" if self.without.settings.drafts else "nothing drafts"
        return f"The MTP head is kept off: {self.why} ({speeds}); {drafts}."

    def lines(self) -> list[str]:
        verdict = "MTP head drafts" if self.kept else "MTP head kept off"
        return [f"drafting         {verdict}: {self.why}",
                self.with_head.line("with the head"), self.without.line("without"),
                f"  (tok/s scaled from Clover's reported {REPORTED_TPS} on an RTX 4090, with the head "
                f"+{round((MTP_GAIN - 1) * 100)} % assumed on the GPU's share; Tune measures)"]


def drafting_choice(with_head: DraftOption, without: DraftOption, *, forced: bool = False) -> DraftingChoice:
    """Keep the MTP head where it costs no context, no KV precision and no fit, and its expected tok/s
    beats the plan without it; `forced` (the setting says mtp) keeps it and says what it costs. Context
    and KV precision are not traded for drafting: drafting changes only the speed (the verify batch
    keeps the model's own tokens), a smaller context or a q8_0 cache change what the model can do."""
    w, wo = with_head, without
    choice = DraftingChoice(w, wo, True, "", forced)
    costs = choice.costs()
    if forced:
        why = f"it costs {costs}" if costs else "it costs nothing else here"
        return replace(choice, why=why)
    if wo.fits and not w.fits:
        return replace(choice, kept=False, why="the plan does not fit with it")
    if w.n_ctx < wo.n_ctx:
        return replace(choice, kept=False, why=f"it would cost {costs}, and drafting changes only the speed "
                                               "while a smaller context changes what fits in a conversation")
    if _KV_RANK.get(w.type_k, 0) < _KV_RANK.get(wo.type_k, 0):
        return replace(choice, kept=False, why=f"it would cost {costs}, and drafting changes only the speed "
                                               "while a quantized KV cache changes the text")
    if w.tps > wo.tps:
        return replace(choice, why=f"it gains more than it costs, {costs}" if costs
                       else f"{_gib(w.drafting_bytes - wo.drafting_bytes).strip()} that costs nothing else here")
    return replace(choice, kept=False, why=f"it costs more than it gains, {costs}")


def _weigh(with_head: Plan, without: Plan, *, forced: bool) -> Plan:
    """The plan with the MTP head or the one without, as `drafting_choice` decides, with both in its text."""
    choice = drafting_choice(DraftOption.of(with_head, True), DraftOption.of(without, False), forced=forced)
    plan = with_head if choice.kept else without
    plan.drafting = choice
    if plan.fits:
        plan.reason += " " + choice.sentence()
    return plan


def _reason(plan: Plan, wanted_ctx: int) -> str:
    b = plan.breakdown
    ctx = (f"the full {plan.n_ctx:,}-token context" if plan.n_ctx == wanted_ctx
           else f"a {plan.n_ctx:,}-token context (reduced from {wanted_ctx:,} to fit)")
    if plan.parallel > 1:
        ctx = f"{plan.parallel} parallel slots sharing {ctx}"
    kv = "an f16 KV cache" if plan.type_k == "f16" else f"a {plan.type_k} KV cache (half the size of f16)"
    if plan.cpu_moe_blocks:
        place = (f"Experts of {plan.n_cpu_moe} of {plan.n_expert_blocks} blocks in system RAM "
                 f"({_gib(b.weights_ram).strip()}), the rest on the GPU")
    else:
        place = "Everything on the GPU"
    text = f"{place}: {_gib(b.gpu_total).strip()} of {_gib(plan.budget_bytes).strip()} usable, with {ctx} and {kv}."
    if plan.cpu_moe_blocks:
        text += f" {speed_expectation(plan.n_cpu_moe, plan.n_expert_blocks)}"
    return text


# Clover's reported figures: about 208 tok/s with everything on an RTX 4090, about 102 tok/s with the
# experts of 10 of 40 blocks in system RAM (the 16 GB budget). Each block's experts read from RAM
# adds about the same time per token, so the speed goes as 1 / (1 + blocks / 10.4).
_BLOCKS_FOR_HALF_SPEED = 10 / (208 / 102 - 1)


def speed_expectation(blocks_in_ram: int, expert_blocks: int) -> str:
    """Words for what experts in RAM cost, scaled from Clover's reported 16 GB figure (a rough guide:
    the RAM's bandwidth and the CPU decide the real number; Tune measures it)."""
    share = speed_share(blocks_in_ram, expert_blocks)
    if 0.4 <= share <= 0.6:
        words = "about half"
    elif share > 0.6:
        words = f"about {round(share * 10) * 10} %"
    else:
        words = f"about {max(round(share * 10) * 10, 10)} %" if share >= 0.1 else "a small part"
    return (f"Expect {words} of the speed of a card that holds it all (Clover reported about 102 vs 208 "
            f"tokens/s with 10 blocks in RAM on an RTX 4090).")


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
# accept nothing, and the README's GPU check ran zero weights. Tune measures drafting on and off.
MTP_GAIN = 1.10


def expected_tps(blocks_in_ram: int, expert_blocks: int, gain: float = 1.0) -> float:
    """Expected decode tokens/s, scaled from Clover's reported figures (see speed_share), with a drafting
    `gain` on the GPU's share of a token's time only: the experts of the blocks in RAM are read for every
    token a verify batch checks (k tokens read up to k x 8 experts a block), so drafting does not shorten
    that share. The KV type does not enter: f16 and q8_0 decode at about the same speed."""
    in_ram = blocks_in_ram / _BLOCKS_FOR_HALF_SPEED * 40 / max(expert_blocks, 1)
    return REPORTED_TPS / (1 / gain + in_ram)


@dataclass(frozen=True)
class GoalCost:
    goal: str  # "longest context", "balanced", "fastest"
    n_ctx: int
    type_k: str
    blocks_in_ram: int
    expert_blocks: int

    @property
    def share(self) -> float:
        return speed_share(self.blocks_in_ram, self.expert_blocks)

    def line(self) -> str:
        return (f"  {self.goal:<16} {self.n_ctx:>9,} tokens  KV {self.type_k:<5} experts of "
                f"{self.blocks_in_ram:>2} of {self.expert_blocks} blocks in RAM  "
                f"~{round(self.share * 100)} % of all-on-GPU speed")

    def short(self) -> str:
        """The same in a line that fits a narrow panel (the model's details)."""
        return (f"{self.goal}: {self.n_ctx:,} tokens, {self.blocks_in_ram} of {self.expert_blocks} blocks in RAM, "
                f"~{round(self.share * 100)} %")


def goal_costs(facts: ModelFacts, probe: GpuProbe, ram: SystemMemory,
               request: PlanRequest = PlanRequest()) -> list[GoalCost]:
    """What each goal costs on this GPU, when experts must go to RAM: the full context against the
    fewest blocks in RAM, and the balance between them (the largest context that gives up at most half
    of the difference). Empty when the model fits whole, is not an MoE, or runs on the CPU. The
    speeds are scaled from Clover's reported figures; Tune measures the real ones."""
    wanted = min(request.n_ctx or facts.n_ctx_train, facts.n_ctx_train)
    plans = []
    for n_ctx in _contexts(wanted, min(request.min_ctx, wanted)):
        p = make_plan(facts, probe, ram, replace(request, n_ctx=n_ctx))
        if p.device != "gpu" or not p.fits or not p.n_expert_blocks:
            return []
        plans.append(p)
    if not plans or plans[0].n_cpu_moe == 0:
        return []
    longest = plans[0]
    fewest = min(p.n_cpu_moe for p in plans)
    fastest = next(p for p in plans if p.n_cpu_moe == fewest)  # the largest context with the fewest blocks
    middle = fewest + (longest.n_cpu_moe - fewest) / 2
    balanced = next(p for p in plans if p.n_cpu_moe <= middle)

    def cost(goal: str, p: Plan) -> GoalCost:
        return GoalCost(goal, p.n_ctx, p.type_k, p.n_cpu_moe, p.n_expert_blocks)

    return [cost("longest context", longest), cost("balanced", balanced), cost("fastest", fastest)]


def goal_lines(costs: list[GoalCost], *, narrow: bool = False) -> list[str]:
    """The goal table: aligned columns for a terminal, or one short line per goal for a narrow panel."""
    if not costs:
        return []
    if narrow:
        return ["What each goal costs (share of all-on-GPU speed, scaled from Clover's reported figures; "
                "Tune measures it):"] + [c.short() for c in costs]
    return ["what each goal costs (speeds scaled from Clover's reported figures; Tune measures them)"] + [
        c.line() for c in costs]


def _cpu_plan(facts: ModelFacts, probe: GpuProbe, ram: SystemMemory, ram_budget: int, wanted_ctx: int,
              request: PlanRequest, warnings: list[str]) -> Plan:
    """The whole model in RAM. The MTP head (where it may draft) stays where it costs no context and the
    plan fits with it: on the CPU it takes only RAM, and the engine drafts only where its measured batch
    costs pay."""
    mtp = uses_mtp(facts, request)
    plan = _cpu_fit(facts, ram, ram_budget, wanted_ctx, request, warnings, mtp=mtp)
    if mtp and request.speculative == "auto":
        without = _cpu_fit(facts, ram, ram_budget, wanted_ctx, request, warnings, mtp=False)
        if without.n_ctx > plan.n_ctx or (without.fits and not plan.fits):
            warnings.append(f"the multi-token-prediction head is kept off: with it the plan needs "
                            f"{'a smaller context' if without.n_ctx > plan.n_ctx else 'more RAM than there is'}")
            plan = without
    plan.speculative = _speculative(request, mtp, bool(plan.breakdown.mtp_blocks))
    return plan


def _cpu_fit(facts: ModelFacts, ram: SystemMemory, ram_budget: int, wanted_ctx: int, request: PlanRequest,
             warnings: list[str], *, mtp: bool) -> Plan:
    for n_ctx in _contexts(wanted_ctx, min(request.min_ctx, wanted_ctx)):
        b = breakdown(facts, n_ctx, (), "f16", "f16", on_gpu=False, parallel=request.parallel, mtp=mtp)
        if b.ram_total <= ram_budget:
            break
    fits = b.ram_total <= ram_budget
    ctx_text = f"{n_ctx:,}-token context" + ("" if n_ctx == wanted_ctx else f" (reduced from {wanted_ctx:,})")
    if request.parallel > 1:
        ctx_text = f"{request.parallel} parallel slots sharing a {ctx_text}"
    reason = (f"CPU mode: the whole model in system RAM, {_gib(b.ram_total).strip()} of "
              f"{_gib(ram_budget).strip()} usable, {ctx_text}.")
    plan = Plan(facts.name or facts.arch, "cpu", None, 0, n_ctx, "f16", "f16", True, (), len(facts.expert_blocks),
                b, ram.available_bytes, fits, reason, warnings=warnings, device_label="CPU only")
    if not fits:
        plan.reason = (f"Does not fit in system RAM: needs {_gib(b.ram_total).strip()}, "
                       f"{_gib(ram_budget).strip()} usable.")
        plan.suggestions.append("an NVIDIA GPU, or more RAM")
    return plan


RAM_WARN = 0.85  # confirm a download whose plan keeps more of the available RAM busy than this
CPU_ONLY_CONFIRM_BYTES = 2 * 10**9  # confirm a CPU-only download larger than this (a 100 MB test model is not)


def confirmation_needed(plan: Plan | None, size: int | None = None) -> str | None:
    """Why a download should be confirmed first (None: go ahead): the plan does not fit, keeps more
    than 85 % of the RAM busy, or runs on the CPU only (for downloads over 2 GB)."""
    if plan is None:
        return None
    if not plan.fits:
        fix = f" To fit: {'; '.join(plan.suggestions)}." if plan.suggestions else ""
        return f"This file does not fit this machine. {plan.reason}{fix}"
    if plan.device == "cpu" and (size is None or size > CPU_ONLY_CONFIRM_BYTES):
        gb = f" ({size / 1e9:.1f} GB)" if size else ""
        return (f"There is no usable NVIDIA GPU: this file{gb} would run on the CPU only, at a few tokens "
                "per second.")
    if plan.ram_available and plan.breakdown.ram_total > RAM_WARN * plan.ram_available:
        used = plan.breakdown.ram_total / plan.ram_available
        return f"This plan keeps {used:.0%} of the available RAM busy; other programs may slow down or fail."
    return None


@dataclass
class PlannedFile:
    """One model file planned for this machine from its header: the one object that a Hub page row
    shows before anything is downloaded, that the set-up takes (it reads and plans nothing again), and
    that a load uses (`plan_for_file`: the settings with the load-time patch and a cached tune result)."""

    facts: ModelFacts
    plan: Plan
    settings: LoadSettings  # the plan's; for a local file, with the load-time patch and a tune result applied
    tuned: str = ""  # what the tune result changed, in words ("" when none applies)
    overlay: str = ""  # a patch profile applied at load time, in words ("Clover patch applied at load (3 fixes)")
    profile: str | None = None  # the vendor dialect's patch profile the header matched (None: upstream)
    fixes: int = 0  # the fixes that profile makes

    @property
    def dialect(self) -> str | None:
        """"needs the X patch (N fixes)" for a file in a known vendor dialect, None for upstream."""
        if not self.profile:
            return None
        return f"needs the {self.profile.capitalize()} patch ({self.fixes} fix{'es' if self.fixes != 1 else ''})"

    def replanned(self, plan: Plan) -> PlannedFile:
        """The same file under another plan (planned again for this machine after a what-if)."""
        return replace(self, plan=plan, settings=plan.settings(), tuned="")


def plan_facts(facts: ModelFacts, machine: Machine, request: PlanRequest = PlanRequest(), *,
               profile: str | None = None, fixes: int = 0) -> PlannedFile:
    """Plan a file known by its facts (a header read over the network, or cached): no load-time patch
    or tune result, which need the file on disk."""
    plan = make_plan(facts, machine.gpus, machine.ram, request)
    return PlannedFile(facts, plan, plan.settings(), profile=profile, fixes=fixes)


def plan_for_file(path: str | Path, machine: Machine, request: PlanRequest = PlanRequest(), *,
                  use_tune: bool = True, threads: int = 0, speculative: str = "", cache_ram_mb: int = 0,
                  cache_disk_gb: int = 0) -> PlannedFile:
    """Read a local GGUF's header, plan it for this machine, and apply what a tune run measured for
    this model, GPU and build (the one path from a file to load settings: window, CLI, compare).
    `threads` (a setting; 0: automatic) wins over both, and so does `speculative` ("": the plan's; auto:
    as the plan weighed it, so n-grams where it kept the file's MTP head off);
    the prompt cache's tiers: `cache_ram_mb` (0: the plan's; -1: none) and `cache_disk_gb` (0: none).
    Raises GGUFError/OSError/KeyError/ValueError."""

    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header

    header = read_header(path)
    facts = facts_from_header(header)
    if speculative:
        request = replace(request, speculative=speculative)
    plan = make_plan(facts, machine.gpus, machine.ram, request)
    settings, tuned = plan.settings(), ""
    overrides, overlay, found = _load_time_patch(path, header)
    if overrides:
        settings = replace(settings, kv_overrides=tuple(overrides.items()))
    if use_tune and plan.fits:
        from app.machine.tune import apply_cached

        gpu, build = machine.identity()  # ("", "") without llama.cpp: nothing was tuned with it either
        if gpu:
            tuned_settings, result = apply_cached(path, settings, facts.expert_blocks, gpu, build)
            best = result.best_trial() if result is not None else None
            if best is not None and result is not None:
                settings = tuned_settings
                tuned = f"tuned: {best.label()} ({result.chosen_tps()[0]:.1f} tok/s measured)"
    if threads:
        settings = replace(settings, n_threads=threads, n_threads_batch=threads)
    if speculative:  # the setting wins over a tune result, as the plan resolved it (auto: ngram where
        settings = replace(settings, speculative=plan.speculative)  # it kept the file's MTP head off)
    if facts.extra_blocks and not plan.breakdown.mtp_blocks and settings.speculative in ("auto", "mtp"):
        settings = replace(settings, speculative="ngram")  # never load a head whose memory the plan did not count
    if cache_ram_mb:
        settings = replace(settings, cache_ram_mb=max(cache_ram_mb, 0))
    settings = replace(settings, cache_disk_mb=max(cache_disk_gb, 0) * 1024)
    profile, fixes = found if found is not None else (None, 0)
    return PlannedFile(facts, plan, settings, tuned, overlay, profile, fixes)


def load_time_patch(path: str | Path, header: GGUFHeader) -> tuple[dict | None, str]:
    """(overrides, what was done in words) for a file in a known vendor dialect: the profile's fixes
    applied as llama.cpp load-time metadata overrides, with no copy and no extra byte on disk."""
    overrides, said, _ = _load_time_patch(path, header)
    return overrides, said


def _load_time_patch(path: str | Path, header: GGUFHeader) -> tuple[dict | None, str, tuple[str, int] | None]:
    """load_time_patch, and the (profile, fixes) the header's dialect matched (None: upstream)."""
    from app.model.patch import APPLIED, llama_requires_key, load_overrides, load_profile, matching_profile

    found = matching_profile(header)
    if found is None:
        return None, "", None
    name = found[0]  # matched by a rule that does not depend on llama.cpp: the file is in this dialect
    # asked of llama.cpp, as the patched copy asks: its qwen35moe loader does not read the shared-expert
    # count, which the load-time overrides used to add (and count as a fix) all the same
    overrides, results, why = load_overrides(header, load_profile(name), llama_requires_key(path, header))
    fixes = sum(r.status == APPLIED for r in results)
    if overrides is None:
        return None, (f"in the {name} dialect, and its fixes cannot be applied at load ({why}): "
                      "patch a copy with `python -m app patch`"), found
    return overrides, f"{name.capitalize()} patch applied at load ({fixes} fix{'es' if fixes != 1 else ''})", found
