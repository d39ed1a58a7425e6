"""The memory planner: how a model fits on this machine's GPU, with a breakdown and a reason. No Qt.

Given a model's facts (`app.gguf.model_facts`), the GPU probe and the system RAM, it chooses among
options, in this order of preference: the context asked for (default: the model's full window), the
fewest blocks whose routed experts stay in system RAM (`n_cpu_moe`), an f16 KV cache before q8_0;
only when nothing fits does it halve the context, down to `min_ctx`. It also chooses the number of
parallel slots (`parallel=0`) and whether the file's MTP head drafts (plan_drafting.py).

The arithmetic of one option is app/model/plan_memory.py, the words app/model/plan_words.py; the
names of both are importable from here. The reasoning: docs/architecture/memory-plan.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.gguf.model_facts import ModelFacts
from app.machine.drafting_gain import VerifyCosts, load_measured, load_profile, ngram_gain
from app.machine.gpu import GpuInfo, GpuProbe
from app.machine.llama_load import LoadSettings
from app.machine.system_memory import SystemMemory
from app.model.plan_drafting import (
    DraftingChoice,
    DraftOption,
    NgramChoice,
    drafting_choice,
    ngram_choice,
)
from app.model.plan_memory import (
    CHECKPOINTS_MAX,
    CHECKPOINTS_RAM_MAX,
    CUDA_COMPUTE_FACTOR,
    DRAFT_MAX,
    DRAFT_MAX_RECURRENT,
    KV_RANK,
    MTP_GAIN,
    N_OUTPUTS,
    N_UBATCH,
    PROMPT_CACHE_RAM_MAX,
    RAM_HEADROOM,
    REPORTED_TPS,
    Breakdown,
    GiB,
    MiB,
    PlanRequest,
    breakdown,
    checkpoint_count,
    draft_max,
    expected_tps,
    mtp_cost,
    reproducible_layout,
    speed_share,
    uses_mtp,
)
from app.model.plan_words import (
    CPU_ONLY_CONFIRM_BYTES,
    RAM_WARN,
    GoalCost,
    block_ranges,
    confirmation_needed,
    goal_lines,
    plan_lines,
    plan_reason,
    size_text,
    slots_cost,
    speed_expectation,
)

if TYPE_CHECKING:
    from app.gguf.gguf_file import GGUFHeader
    from app.machine.snapshot import Machine

DEFAULT_REQUEST = PlanRequest()  # frozen: one shared default for the functions below

__all__ = [
    "AUTO_SLOTS", "CHECKPOINTS_MAX", "CHECKPOINTS_RAM_MAX", "CPU_ONLY_CONFIRM_BYTES", "CUDA_COMPUTE_FACTOR",
    "DRAFT_MAX", "DRAFT_MAX_RECURRENT", "KV_RANK", "MTP_GAIN", "N_OUTPUTS", "N_UBATCH", "PROMPT_CACHE_RAM_MAX",
    "RAM_HEADROOM", "RAM_WARN", "REPORTED_TPS", "Breakdown", "DraftOption", "DraftingChoice", "GiB", "GoalCost",
    "MiB", "Plan", "PlanRequest", "PlannedFile", "breakdown", "checkpoint_count", "confirmation_needed",
    "draft_max", "drafting_choice", "expected_tps", "goal_costs", "goal_lines", "load_time_patch", "make_plan",
    "mtp_cost", "plan_facts", "plan_for_file", "reproducible_layout", "size_text", "speed_expectation",
    "speed_share", "uses_mtp",
]


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
    ngram: NgramChoice | None = None  # the plans with and without n-gram drafting's rollback snapshots
    slots_note: str = ""  # with parallel=0: how many slots the plan chose and why, in words

    @property
    def parallel(self) -> int:
        return self.breakdown.slots

    @property
    def n_cpu_moe(self) -> int:
        return len(self.cpu_moe_blocks)

    def settings(self) -> LoadSettings:
        settings = LoadSettings(
            n_ctx=self.n_ctx, n_gpu_layers=-1 if self.device == "gpu" else 0,
            cpu_moe_blocks=self.cpu_moe_blocks + (b.mtp_blocks if (b := self.breakdown).mtp_experts_in_ram else ()),
            flash_attn=self.flash_attn, type_k=self.type_k, type_v=self.type_v, n_ubatch=N_UBATCH,
            n_outputs_max=N_OUTPUTS, main_gpu=self.gpu.index if self.gpu else 0,
            ctx_checkpoints=self.n_checkpoints, draft_max=self.draft_max, parallel=self.parallel,
            cache_ram_mb=self.cache_ram_mb, speculative=self.speculative,
        )
        return reproducible_layout(settings, cpu=self.device == "cpu") if self.breakdown.reproducible else settings

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
        return plan_lines(self)


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


def make_plan(facts: ModelFacts, probe: GpuProbe, ram: SystemMemory, request: PlanRequest = DEFAULT_REQUEST, *,
              batch_costs: VerifyCosts | None = None) -> Plan:
    """`batch_costs`: verify batch costs measured on this GPU (None: those the GPU check or Tune kept
    for this GPU and model shape, if any): whether n-gram drafting's rollback snapshots are worth
    their memory (`_ngram_plan`)."""
    if request.parallel <= 0:
        return _auto_slots(facts, probe, ram, request, batch_costs)
    if request.reproducible:  # nothing drafts (plan_memory.reproducible_layout)
        request = replace(request, speculative="off")
    wanted_ctx = min(request.n_ctx or facts.n_ctx_train, facts.n_ctx_train)
    warnings: list[str] = []
    mtp = uses_mtp(facts, request)
    if facts.extra_blocks and not mtp:
        warnings.append(f"the file carries a multi-token-prediction head (block {block_ranges(facts.extra_blocks)}, "
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
    label = (f"GPU {gpu.index}: {gpu.name}, {size_text(gpu.free_bytes).strip()} free of "
             f"{size_text(gpu.total_bytes).strip()}"
             if gpu is not None else f"a GPU with {size_text(free).strip()} free (what-if)")

    def fit(with_head: bool, asked: PlanRequest = request, rollback: bool = True) -> Plan:
        plan = _gpu_plan(facts, gpu, budget, margin, label, ram, ram_budget, wanted_ctx, asked, warnings,
                         mtp=with_head, rollback=rollback)
        plan.speculative = _speculative(asked, mtp, with_head)
        return plan

    if batch_costs is None and gpu is not None:
        batch_costs = load_measured(gpu.name, facts)

    def no_head(asked: PlanRequest) -> Plan:
        if not facts.recurrent_state_per_seq:
            return fit(False, asked)
        if asked.speculative == "off":  # nothing drafts: no snapshots to take a draft back
            return fit(False, asked, rollback=False)
        return _ngram_plan(fit(False, asked), fit(False, asked, rollback=False), batch_costs,
                           forced=asked.speculative == "ngram")

    if not mtp:
        return no_head(request)
    # mtp forces the head: the plan without it, for comparison, is what auto would load without it
    without = no_head(replace(request, speculative="auto"))
    return _weigh(fit(True), without, forced=request.speculative == "mtp")


def _ngram_plan(drafts: Plan, bare: Plan, costs: VerifyCosts | None, *, forced: bool) -> Plan:
    """The plan with n-gram drafting's rollback snapshots or the one without, as `ngram_choice` decides
    from the batch costs measured on this GPU and the acceptance measured on SmolLM2; said in the plan's
    reason and lines where the choice costs or saves something."""
    profile = load_profile() if costs is not None else None
    gain = ngram_gain(profile, costs) if costs is not None and profile is not None else None
    choice = ngram_choice(DraftOption.of(drafts, False, gain or 1.0), DraftOption.of(bare, False), gain,
                          source=costs.source if costs is not None else "", forced=forced)
    plan = drafts if choice.kept else bare
    plan.ngram = choice
    if choice.matters and plan.fits:
        plan.reason += " " + choice.sentence()
    return plan


# Parallel slots planned by `parallel=0`: llama-server's default since late 2025 (4 slots, one KV pool)
AUTO_SLOTS = 4


def _auto_slots(facts: ModelFacts, probe: GpuProbe, ram: SystemMemory, request: PlanRequest,
                batch_costs: VerifyCosts | None = None) -> Plan:
    """The plan with the most slots, AUTO_SLOTS at most, that costs nothing the plan for one slot keeps:
    its context, its KV precision, its experts on the GPU, and fitting at all (each slot adds a recurrent
    state and its rollback snapshots; the KV pool is the same); `slots_note` says why that many."""
    one = make_plan(facts, probe, ram, replace(request, parallel=1), batch_costs=batch_costs)
    if not one.fits:
        one.slots_note = "automatic: the model does not fit with one"
        return one
    cost = ""
    for n in range(AUTO_SLOTS, 1, -1):
        plan = make_plan(facts, probe, ram, replace(request, parallel=n), batch_costs=batch_costs)
        more = slots_cost(plan, one)
        if not more:
            plan.slots_note = (f"automatic: {n + 1} would {cost}" if cost else
                               f"automatic: {n} at no cost to the context, the KV precision or the experts on the GPU"
                               if plan.device == "gpu" else f"automatic: {n} at no cost to the context")
            return plan
        cost = more
    one.slots_note = f"automatic: 2 would {cost}"
    return one


def _speculative(request: PlanRequest, may_use_head: bool, with_head: bool) -> str:
    """What the load drafts with: the setting, except that auto without the head the file carries drafts
    with n-grams (auto would load the head, whose memory the plan did not reserve)."""
    if may_use_head and not with_head and request.speculative == "auto":
        return "ngram"
    return request.speculative


def _gpu_plan(facts: ModelFacts, gpu: GpuInfo | None, budget: int, margin: int, label: str, ram: SystemMemory,
              ram_budget: int, wanted_ctx: int, request: PlanRequest, warnings: list[str], *, mtp: bool,
              rollback: bool = True) -> Plan:
    """The preferred plan that fits the GPU budget: the asked context, the fewest blocks in RAM, f16 KV;
    `rollback` False: without drafting's rollback snapshots (nothing drafts)."""
    kv_types = [("f16", "f16"), ("q8_0", "q8_0")] if request.allow_kv_quant else [("f16", "f16")]
    blocks = facts.expert_blocks
    for n_ctx in _contexts(wanted_ctx, min(request.min_ctx, wanted_ctx)):
        for k in range(len(blocks) + 1):
            for type_k, type_v in kv_types:
                cpu_blocks = tuple(blocks[:k])
                b = breakdown(facts, n_ctx, cpu_blocks, type_k, type_v, on_gpu=True, parallel=request.parallel,
                              mtp=mtp, reproducible=request.reproducible)
                b = b if rollback else replace(b, rollback=0)
                if b.gpu_total > budget:
                    continue
                plan = Plan(facts.name or facts.arch, "gpu", gpu, budget, n_ctx, type_k, type_v, True, cpu_blocks,
                            len(blocks), b, ram.available_bytes, True, "", warnings=warnings, device_label=label)
                plan.reason = plan_reason(plan, wanted_ctx)
                if b.ram_total > ram_budget:
                    plan.fits = False
                    plan.reason = (f"Does not fit in system RAM: {size_text(b.ram_total).strip()} must stay in RAM and "
                                   f"{size_text(ram_budget).strip()} is usable. On the GPU side: {plan.reason}")
                    plan.suggestions.append(
                        f"system RAM: {size_text(b.ram_total).strip()} must stay in RAM but only "
                        f"{size_text(ram_budget).strip()} is available beyond a {RAM_HEADROOM // GiB} GiB headroom; "
                        "close programs or add RAM")
                return plan
    # Nothing fits, even with every expert in RAM at the smallest context.
    n_ctx = min(request.min_ctx, wanted_ctx)
    b = breakdown(facts, n_ctx, tuple(blocks), kv_types[-1][0], kv_types[-1][1], on_gpu=True,
                  parallel=request.parallel, mtp=mtp, reproducible=request.reproducible)
    plan = Plan(facts.name or facts.arch, "gpu", gpu, budget, n_ctx, kv_types[-1][0], kv_types[-1][1], True,
                tuple(blocks), len(blocks), b, ram.available_bytes, False,
                f"Does not fit: even at {n_ctx:,} tokens with every expert in RAM it needs "
                f"{size_text(b.gpu_total).strip()} on the GPU; {size_text(budget).strip()} is usable.",
                warnings=warnings, device_label=label)
    plan.suggestions.append(f"a GPU with at least {size_text(b.gpu_total + margin).strip()} free")
    plan.suggestions.append("a smaller quantization of the model, or CPU mode")
    return plan


def _weigh(with_head: Plan, without: Plan, *, forced: bool) -> Plan:
    """The plan with the MTP head or the one without, as `drafting_choice` decides, with both in its text."""
    ngram = without.ngram  # n-grams draft without the head: at the gain measured costs give them, if any
    gain = ngram.gain if ngram is not None and ngram.kept else None
    choice = drafting_choice(DraftOption.of(with_head, True), DraftOption.of(without, False, gain), forced=forced)
    plan = with_head if choice.kept else without
    plan.drafting = choice
    if plan.fits:
        plan.reason += " " + choice.sentence()
    return plan


def goal_costs(facts: ModelFacts, probe: GpuProbe, ram: SystemMemory,
               request: PlanRequest = DEFAULT_REQUEST) -> list[GoalCost]:
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
    flat = request.reproducible and request.parallel > 1  # no flash attention (plan_memory.reproducible_layout)
    for n_ctx in _contexts(wanted_ctx, min(request.min_ctx, wanted_ctx)):
        b = breakdown(facts, n_ctx, (), "f16", "f16", on_gpu=False, parallel=request.parallel, mtp=mtp,
                      flash_attn=not flat, reproducible=request.reproducible)
        if b.ram_total <= ram_budget:
            break
    fits = b.ram_total <= ram_budget
    ctx_text = f"{n_ctx:,}-token context" + ("" if n_ctx == wanted_ctx else f" (reduced from {wanted_ctx:,})")
    if request.parallel > 1:
        ctx_text = f"{request.parallel} parallel slots {'each with' if request.reproducible else 'sharing'} " \
                   f"a {ctx_text}"
    reason = (f"CPU mode: the whole model in system RAM, {size_text(b.ram_total).strip()} of "
              f"{size_text(ram_budget).strip()} usable, {ctx_text}.")
    plan = Plan(facts.name or facts.arch, "cpu", None, 0, n_ctx, "f16", "f16", not flat, (),
                len(facts.expert_blocks),
                b, ram.available_bytes, fits, reason, warnings=warnings, device_label="CPU only")
    if not fits:
        plan.reason = (f"Does not fit in system RAM: needs {size_text(b.ram_total).strip()}, "
                       f"{size_text(ram_budget).strip()} usable.")
        plan.suggestions.append("an NVIDIA GPU, or more RAM")
    return plan


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


def plan_facts(facts: ModelFacts, machine: Machine, request: PlanRequest = DEFAULT_REQUEST, *,
               profile: str | None = None, fixes: int = 0) -> PlannedFile:
    """Plan a file known by its facts (a header read over the network, or cached): no load-time patch
    or tune result, which need the file on disk."""
    plan = make_plan(facts, machine.gpus, machine.ram, request)
    return PlannedFile(facts, plan, plan.settings(), profile=profile, fixes=fixes)


def plan_for_file(path: str | Path, machine: Machine, request: PlanRequest = DEFAULT_REQUEST, *,
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
