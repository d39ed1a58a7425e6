"""The memory plan in the words a user reads: the plan's lines (device, context, memory table,
warnings, what would make it fit), its one-sentence reason, what experts in RAM cost in speed, what
each goal costs, and why a download should be confirmed first. No Qt.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.model.plan_memory import KV_RANK, RAM_HEADROOM, GiB, MiB, speed_share

if TYPE_CHECKING:
    from app.model.plan import Plan


def size_text(n: int, width: int = 6) -> str:
    """n bytes as "1.50 GiB", or "27.3 MiB" below 1 GiB, right-aligned to width digits."""
    return f"{n / GiB:{width}.2f} GiB" if n >= GiB else f"{n / MiB:{width}.1f} MiB"


def block_ranges(blocks: tuple[int, ...]) -> str:
    """(0, 1, 2, 5, 7, 8) → '0-2, 5, 7-8'."""
    parts = []
    for _, run in itertools.groupby(enumerate(sorted(blocks)), key=lambda ib: ib[1] - ib[0]):
        values = [b for _, b in run]
        parts.append(f"{values[0]}-{values[-1]}" if len(values) > 1 else str(values[0]))
    return ", ".join(parts)


def plan_lines(plan: Plan) -> list[str]:
    """The plan as the CLI and the model page print it: the reason, the choices, the memory table."""
    b = plan.breakdown
    out = [plan.reason, ""]
    out.append(f"device           {plan.device_label or plan.device}")
    if plan.device == "gpu":
        out.append(f"GPU budget       {size_text(plan.budget_bytes)} (free memory minus margin)")
    slots = f" shared by {b.slots} slots" if b.slots > 1 else ""
    out.append(f"context          {plan.n_ctx:,} tokens{slots}, KV cache {plan.type_k}/{plan.type_v}, "
               f"flash attention {'on' if plan.flash_attn else 'off'}")
    if plan.slots_note:
        out.append(f"slots            {b.slots} ({plan.slots_note})")
    if plan.n_cpu_moe and plan.device == "gpu":  # on the CPU, or with none in RAM, it says nothing
        out.append(f"experts in RAM   {plan.n_cpu_moe} of {plan.n_expert_blocks} blocks"
                   + (f" (blocks {block_ranges(plan.cpu_moe_blocks)})" if plan.cpu_moe_blocks else ""))
    if plan.ngram is not None and plan.ngram.matters:
        out += plan.ngram.lines()
    if plan.drafting is not None:
        out += plan.drafting.lines()
    out.append("memory")
    if plan.device == "gpu":
        out.append(f"  weights on GPU   {size_text(b.weights_gpu)}")
    out.append(f"  weights in RAM   {size_text(b.weights_ram)}")
    out.append(f"  KV cache         {size_text(b.kv)}")
    if b.recurrent:
        out.append(f"  recurrent state  {size_text(b.recurrent)}"
                   + (f" ({b.slots} x {b.recurrent / b.slots / MiB:.2f} MiB, one per slot)" if b.slots > 1 else ""))
    if b.mtp:
        out.append(f"  MTP head         {size_text(b.mtp)} (block {block_ranges(b.mtp_blocks)} and its draft context: "
                   "speculative decoding drafts with the model's multi-token-prediction head)")
    if b.rollback:
        out.append(f"  draft rollback   {size_text(b.rollback)} ({b.rollback // b.recurrent} snapshots of the "
                   "recurrent state: speculative decoding takes back rejected draft tokens)")
    if b.checkpoints:
        out.append(f"  checkpoints      {size_text(b.checkpoints)} in RAM ({plan.n_checkpoints} x "
                   f"{b.recurrent / b.slots / MiB:.2f} MiB of recurrent state: follow-ups reuse the conversation)")
    out.append(f"  compute buffers  {size_text(b.compute)}")
    if plan.device == "gpu":
        out.append(f"  GPU total        {size_text(b.gpu_total)} of {size_text(plan.budget_bytes)}")
    usable = max(plan.ram_available - RAM_HEADROOM, 0)
    out.append(f"  RAM needed       {size_text(b.ram_total)} of {size_text(usable)} usable "
               f"({size_text(plan.ram_available).strip()} available less {RAM_HEADROOM // GiB} GiB headroom)")
    out += [f"warning: {w}" for w in plan.warnings]
    out += [f"to fit: {s}" for s in plan.suggestions]
    return out


def plan_reason(plan: Plan, wanted_ctx: int) -> str:
    b = plan.breakdown
    ctx = (f"the full {plan.n_ctx:,}-token context" if plan.n_ctx == wanted_ctx
           else f"a {plan.n_ctx:,}-token context (reduced from {wanted_ctx:,} to fit)")
    if plan.parallel > 1:
        ctx = f"{plan.parallel} parallel slots {'each with' if b.reproducible else 'sharing'} {ctx}"
    kv = "an f16 KV cache" if plan.type_k == "f16" else f"a {plan.type_k} KV cache (half the size of f16)"
    if plan.cpu_moe_blocks:
        place = (f"Experts of {plan.n_cpu_moe} of {plan.n_expert_blocks} blocks in system RAM "
                 f"({size_text(b.weights_ram).strip()}), the rest on the GPU")
    else:
        place = "Everything on the GPU"
    text = (f"{place}: {size_text(b.gpu_total).strip()} of {size_text(plan.budget_bytes).strip()} usable, "
            f"with {ctx} and {kv}.")
    if plan.cpu_moe_blocks:
        text += f" {speed_expectation(plan.n_cpu_moe, plan.n_expert_blocks)}"
    return text


def slots_cost(plan: Plan, one: Plan) -> str:
    """What a plan of several slots gives up against the plan for one, in words ("": nothing)."""
    if not plan.fits:
        return "not fit this machine's memory"
    if plan.n_ctx < one.n_ctx:
        return f"shrink the context to {plan.n_ctx:,} tokens"
    if KV_RANK[plan.type_k] < KV_RANK[one.type_k] or KV_RANK[plan.type_v] < KV_RANK[one.type_v]:
        return f"need a {plan.type_k} KV cache"
    if plan.n_cpu_moe > one.n_cpu_moe:
        more = plan.n_cpu_moe - one.n_cpu_moe
        return f"keep the experts of {more} more block{'s' if more != 1 else ''} in system RAM"
    if one.breakdown.rollback and not plan.breakdown.rollback:
        return "leave out n-gram drafting's rollback snapshots"
    return ""


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


def goal_lines(costs: list[GoalCost], *, narrow: bool = False) -> list[str]:
    """The goal table: aligned columns for a terminal, or one short line per goal for a narrow panel."""
    if not costs:
        return []
    if narrow:
        return ["What each goal costs (share of all-on-GPU speed, scaled from Clover's reported figures; "
                "Tune measures it):"] + [c.short() for c in costs]
    return ["what each goal costs (speeds scaled from Clover's reported figures; Tune measures them)"] + [
        c.line() for c in costs]


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
