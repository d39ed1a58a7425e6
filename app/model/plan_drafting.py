"""The drafting choices: a plan with the MTP head's memory against the plan without it, and a plan with
n-gram drafting's rollback snapshots against one without; which ones the memory plan keeps (each is
kept where it costs no context, no KV precision and no fit, and its expected tokens/s beats the plan
without it: the head's gain is assumed, the n-grams' comes from batch costs measured on this GPU,
app/machine/drafting_gain.py, and without them the snapshots' memory goes to experts). No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app.machine.llama_load import LoadSettings
from app.model.plan_memory import KV_RANK, MTP_GAIN, REPORTED_TPS, expected_tps
from app.model.plan_words import size_text

if TYPE_CHECKING:
    from app.model.plan import Plan

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
    def of(cls, plan: Plan, head: bool, gain: float | None = None) -> DraftOption:
        """`gain`: the drafting speed-up expected on the GPU's share (default: the head's assumed one)."""
        b = plan.breakdown
        gain = gain if gain is not None else MTP_GAIN if head else 1.0
        return cls(head, plan.n_ctx, plan.type_k, plan.n_cpu_moe, plan.n_expert_blocks, plan.fits,
                   expected_tps(plan.n_cpu_moe, plan.n_expert_blocks, gain), b.mtp + b.rollback, plan.settings())

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
        return option_costs(self.with_head, self.without)

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
                f"+{round((MTP_GAIN - 1) * 100)} % assumed on the GPU's share"
                + ("" if self.without.tps == expected_tps(self.without.blocks_in_ram, self.without.expert_blocks)
                   else ", without it the n-grams' gain from measured batch costs") + "; Tune measures)"]


def option_costs(w: DraftOption, wo: DraftOption) -> str:
    """What option w costs against option wo, in words ("" where nothing)."""
    out = []
    if w.n_ctx < wo.n_ctx:
        out.append(f"a {w.n_ctx:,}-token context instead of {wo.n_ctx:,}")
    if KV_RANK.get(w.type_k, 0) < KV_RANK.get(wo.type_k, 0):
        out.append(f"a {w.type_k} KV cache instead of {wo.type_k}")
    if w.blocks_in_ram > wo.blocks_in_ram:
        out.append(f"{w.blocks_in_ram} blocks of experts in RAM instead of {wo.blocks_in_ram}")
    if wo.fits and not w.fits:
        out.append("a plan that does not fit")
    return ", ".join(out)


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
    if KV_RANK.get(w.type_k, 0) < KV_RANK.get(wo.type_k, 0):
        return replace(choice, kept=False, why=f"it would cost {costs}, and drafting changes only the speed "
                                               "while a quantized KV cache changes the text")
    if w.tps > wo.tps:
        return replace(choice, why=f"it gains more than it costs, {costs}" if costs
                       else f"{size_text(w.drafting_bytes - wo.drafting_bytes).strip()} that costs nothing else here")
    return replace(choice, kept=False, why=f"it costs more than it gains, {costs}")


@dataclass(frozen=True)
class NgramChoice:
    """A plan with n-gram drafting's rollback snapshots (a recurrent model takes back a rejected draft
    from them) against the plan without, and which one the plan keeps."""

    with_drafts: DraftOption
    without: DraftOption
    kept: bool
    why: str
    gain: float | None  # the n-gram speed-up expected on the GPU's share (None: no batch costs measured here)
    source: str = ""  # where the batch costs were measured, in words

    @property
    def matters(self) -> bool:
        """The choice changed the plan: the snapshots were left out, or kept at a cost (said in its words)."""
        return not self.kept or bool(option_costs(self.with_drafts, self.without))

    def sentence(self) -> str:
        w, wo = self.with_drafts, self.without
        speeds = (f"~{w.tps:.0f} tok/s expected with them, ~{wo.tps:.0f} without" if self.gain is not None
                  else f"~{wo.tps:.0f} tok/s expected without them, their gain unknown")
        verdict = "N-gram drafts keep their rollback snapshots" if self.kept else "N-gram drafts are off"
        return f"{verdict}: {self.why} ({speeds})."

    def lines(self) -> list[str]:
        verdict = "n-grams draft" if self.kept else "n-grams off"
        gain = ("gain unknown: no batch costs measured on this GPU (the GPU check or Tune measures them)"
                if self.gain is None else f"expected gain {self.gain:.2f}x on the GPU's share, {self.source}")
        return [f"n-gram drafts    {verdict}: {self.why}",
                self.with_drafts.line("with snapshots"), self.without.line("without"),
                f"  ({gain}; acceptance from SmolLM2, resources/drafting/; expected, not measured)"]


def ngram_choice(with_drafts: DraftOption, without: DraftOption, gain: float | None, *, source: str = "",
                 forced: bool = False) -> NgramChoice:
    """Keep n-gram drafting's rollback snapshots where they cost nothing else; where they cost experts on
    the GPU (never context or KV precision), only where the batch costs measured on this GPU make the
    expected speed with drafts beat the plan without (`gain`; None: unknown, the memory goes to
    experts); `forced` (the setting says ngram) keeps them and says what they cost."""
    w, wo = with_drafts, without
    choice = NgramChoice(w, wo, True, "", gain, source)
    costs = option_costs(w, wo)
    snapshots = size_text(w.drafting_bytes - wo.drafting_bytes).strip()
    if forced:
        return replace(choice, why=f"speculative decoding: ngram; {snapshots} of snapshots cost "
                                   f"{costs or 'nothing else here'}")
    if not costs:
        return replace(choice, why=f"{snapshots} of snapshots that cost nothing else here; the engine drafts "
                                   "where its measured costs say drafts pay")
    if gain is None:
        return replace(choice, kept=False, why=f"{snapshots} of snapshots would cost {costs}, and no batch costs "
                                               "were measured on this GPU, so whether n-gram drafts pay here "
                                               "is unknown: the memory keeps experts on the GPU")
    if w.n_ctx < wo.n_ctx or KV_RANK.get(w.type_k, 0) < KV_RANK.get(wo.type_k, 0) or (wo.fits and not w.fits):
        return replace(choice, kept=False, why=f"{snapshots} of snapshots would cost {costs}")
    if w.tps > wo.tps:
        return replace(choice, why=f"the batch costs measured on this GPU make them pay: {snapshots} of "
                                   f"snapshots cost {costs}")
    return replace(choice, kept=False, why=f"{snapshots} of snapshots would cost {costs}, more than the "
                                           "drafts are expected to gain at the batch costs measured here")
