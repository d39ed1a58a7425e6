"""Issue 56, item 3: n-gram drafting's rollback snapshots are counted only where drafting is expected to pay
on that GPU (batch costs measured there, acceptance measured on SmolLM2); unknown: the memory goes to experts."""

from __future__ import annotations

import pytest

from app.gguf.gguf_file import read_header
from app.gguf.model_facts import facts_from_header
from app.machine.drafting_gain import VerifyCosts, save_measured
from app.machine.gpu import probe_with
from app.model.plan import PlanRequest, expected_tps, make_plan
from tests.helpers.fakes import FakeNVML
from tests.model.test_plan import CARD_16, CARD_24, RAM, gpu, write_qwen36_ud_q4_k_m

GPU_LIKE = VerifyCosts({1: 1.0, 2: 1.03, 3: 1.05, 4: 1.08, 8: 1.2}, 0.1, "a test curve")  # a batch of 9: 1.2x one
LINEAR = VerifyCosts({1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}, 1.0, "n tokens cost n")  # drafting cannot pay
TIGHT_16 = 0.25  # GiB in use on the 16 GB card: there the snapshots' 251 MiB decide one block of experts


@pytest.fixture(scope="module")
def qwen36(tmp_path_factory):
    path = write_qwen36_ud_q4_k_m(tmp_path_factory.mktemp("qwen36") / "Qwen3.6-35B-A3B-MTP-UD-Q4_K_M.gguf")
    return facts_from_header(read_header(path))


def plan(facts, vram, costs=None, used=0.4, **request):
    return make_plan(facts, probe_with(FakeNVML([gpu(vram, used_gib=used)])), RAM,
                     PlanRequest(n_ctx=131_072, **request), batch_costs=costs)


@pytest.mark.parametrize("costs", [None, GPU_LIKE, LINEAR])
def test_the_issue_figures_24_gb_all_on_the_gpu_f16_and_16_gb_at_most_14_blocks(qwen36, costs):
    big = plan(qwen36, CARD_24, costs)
    assert big.fits and big.n_cpu_moe == 0 and big.type_k == "f16" and big.n_ctx == 131_072
    assert big.breakdown.rollback == 4 * qwen36.recurrent_state_per_seq  # they cost nothing else there
    assert big.ngram is not None and big.ngram.kept and not big.ngram.matters and big.settings().drafts
    assert "n-gram drafts" not in "\n".join(big.lines())  # a choice that changed nothing is not shown
    small = plan(qwen36, CARD_16, costs)
    assert small.fits and small.n_cpu_moe <= 14 and small.n_ctx == 131_072


def test_unknown_costs_keep_the_snapshots_memory_for_experts_and_say_so(qwen36):
    p = plan(qwen36, CARD_16, used=TIGHT_16)
    choice = p.ngram
    assert choice is not None and not choice.kept and choice.gain is None
    assert p.breakdown.rollback == 0 and p.draft_max == 0 and not p.settings().drafts
    assert (choice.with_drafts.blocks_in_ram, choice.without.blocks_in_ram) == (p.n_cpu_moe + 1, p.n_cpu_moe)
    assert "N-gram drafts are off: 251.2 MiB of snapshots would cost" in p.reason
    assert "no batch costs were measured on this GPU" in p.reason and "the memory keeps experts" in p.reason
    text = "\n".join(p.lines())
    assert f"  with snapshots   {p.n_cpu_moe + 1} of 40 blocks in RAM" in text
    assert f"  without          {p.n_cpu_moe} of 40 blocks in RAM" in text and "(nothing drafts)" in text
    assert "gain unknown: no batch costs measured on this GPU" in text
    assert "draft rollback" not in text


def test_measured_costs_where_drafting_pays_keep_the_snapshots_with_the_figures(qwen36):
    p = plan(qwen36, CARD_16, GPU_LIKE, used=TIGHT_16)
    choice = p.ngram
    assert choice is not None and choice.kept and choice.gain is not None and choice.gain > 1.1
    assert p.breakdown.rollback > 0 and p.settings().drafts
    w, wo = choice.with_drafts, choice.without
    assert w.blocks_in_ram == wo.blocks_in_ram + 1 == p.n_cpu_moe
    assert w.tps == pytest.approx(expected_tps(w.blocks_in_ram, 40, choice.gain)) and w.tps > wo.tps
    assert "the batch costs measured on this GPU make them pay" in p.reason
    assert f"~{w.tps:.0f} tok/s expected with them, ~{wo.tps:.0f} without" in p.reason
    assert f"expected gain {choice.gain:.2f}x on the GPU's share, a test curve" in "\n".join(p.lines())
    # the MTP head is weighed against the n-grams at that gain, not against plain decoding
    assert p.drafting is not None and p.drafting.without.tps == pytest.approx(w.tps)


def test_measured_costs_where_drafting_does_not_pay_give_the_memory_to_experts(qwen36):
    p = plan(qwen36, CARD_16, LINEAR, used=TIGHT_16)
    assert p.ngram is not None and not p.ngram.kept and p.ngram.gain == pytest.approx(1.0)
    assert p.breakdown.rollback == 0 and "more than the drafts are expected to gain" in p.reason


def test_speculative_ngram_keeps_the_snapshots_and_says_what_they_cost(qwen36):
    p = plan(qwen36, CARD_16, used=TIGHT_16, speculative="ngram")
    assert p.ngram is not None and p.ngram.kept and p.breakdown.rollback > 0 and p.settings().drafts
    assert f"speculative decoding: ngram; 251.2 MiB of snapshots cost {p.n_cpu_moe} blocks" in p.reason


def test_the_plan_reads_the_costs_the_gpu_check_kept_for_this_gpu_and_shape(qwen36):
    assert plan(qwen36, CARD_16, used=TIGHT_16).breakdown.rollback == 0
    save_measured("NVIDIA GPU", qwen36, GPU_LIKE)  # the fake GPU's name (CLOVER_HOME is the test's own)
    p = plan(qwen36, CARD_16, used=TIGHT_16)
    assert p.ngram is not None and p.ngram.kept and p.breakdown.rollback > 0
