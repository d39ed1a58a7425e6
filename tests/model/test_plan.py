"""Model facts from headers, the planner on faked GPUs, and the Clover-shaped acceptance figures."""

from __future__ import annotations

import pytest

from app.gguf.gguf_file import read_header
from app.gguf.model_facts import facts_from_header, kv_cells
from app.machine.gpu import probe_with
from app.machine.system_memory import SystemMemory
from app.model.plan import (
    MTP_GAIN,
    GiB,
    MiB,
    PlanRequest,
    expected_tps,
    goal_costs,
    goal_lines,
    make_plan,
    plan_for_file,
    speed_share,
)
from tests.helpers.app_process import run_app
from tests.helpers.clover_shape import write_clover_shaped
from tests.helpers.fakes import FakeGpu, FakeNVML, FakeNVMLError, NVMLError_LibraryNotFound

RAM = SystemMemory(64 * GiB, 56 * GiB)


@pytest.fixture(scope="module")
def clover(tmp_path_factory):
    path = write_clover_shaped(tmp_path_factory.mktemp("clover") / "clover-shape.gguf")
    return facts_from_header(read_header(path))


def gpu(total_gib: float, name: str = "NVIDIA GPU", used_gib: float = 0.4, **kw) -> FakeGpu:
    return FakeGpu(name, total_gib, used_gib=used_gib, **kw)


def plan_for(facts, *gpus, ram=RAM, **request):
    return make_plan(facts, probe_with(FakeNVML(list(gpus))), ram, PlanRequest(**request))


def test_clover_shape_facts(clover):
    assert clover.arch == "qwen35moe" and len(clover.blocks) == 40
    assert clover.attention_blocks == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]
    assert len(clover.expert_blocks) == 40
    assert clover.kv_bytes_per_token() == 20_480  # 10 blocks x 2 x 2 heads x 256 x 2 bytes
    assert clover.kv_bytes(131_072) == 2560 * MiB
    assert clover.kv_bytes_per_token("q8_0", "q8_0") == 10_880
    assert clover.recurrent_state_per_seq == pytest.approx(62.81 * MiB, rel=0.001)
    assert all(432 * MiB <= b.expert_bytes <= 498 * MiB for b in clover.blocks)
    assert 19.4e9 < clover.weights_bytes < 20.0e9  # about the official 19.6 GB file
    assert clover.n_vocab == 248_320 and clover.n_ctx_train == 131_072


def test_24_gb_card_holds_everything_with_the_full_context(clover):
    plan = plan_for(clover, gpu(23.99, "NVIDIA GeForce RTX 4090"))
    assert plan.fits and plan.n_cpu_moe == 0
    assert plan.n_ctx == 131_072 and plan.type_k == "f16"
    assert plan.breakdown.gpu_total / GiB == pytest.approx(21.4, rel=0.05)  # the reported 21.4 "GB" (GiB)
    assert "Everything on the GPU" in plan.reason


def test_16_gb_card_keeps_experts_of_about_ten_blocks_in_ram(clover):
    plan = plan_for(clover, gpu(16.0, "NVIDIA GeForce RTX 4060 Ti 16GB"))
    assert plan.fits
    assert 8 <= plan.n_cpu_moe <= 12, plan.lines()
    assert plan.cpu_moe_blocks == tuple(range(plan.n_cpu_moe))
    assert plan.breakdown.gpu_total <= plan.budget_bytes < 16 * GiB
    assert plan.n_ctx == 131_072  # the context the plan states: the full window, with a q8_0 cache
    assert f"Experts of {plan.n_cpu_moe} of 40 blocks in system RAM" in plan.reason
    settings = plan.settings()
    assert settings.cpu_moe_blocks == plan.cpu_moe_blocks and settings.type_k == plan.type_k
    blocks = "|".join(map(str, plan.cpu_moe_blocks))
    assert settings.override_patterns() == [rf"^blk\.({blocks})\.ffn_(up|down|gate|gate_up)_(ch|)exps"]


def test_what_each_goal_costs_on_a_16_gb_card(clover):
    """Longest context, balanced, fastest: the full window against the fewest blocks in RAM, each with
    its context, KV type and expected share of all-on-GPU speed; none on a card that holds it all."""
    probe = probe_with(FakeNVML([gpu(16.0)]))
    longest, balanced, fastest = goal_costs(clover, probe, RAM)
    plan = make_plan(clover, probe, RAM)
    assert (longest.goal, longest.n_ctx, longest.blocks_in_ram) == ("longest context", 131_072, plan.n_cpu_moe)
    assert fastest.blocks_in_ram < balanced.blocks_in_ram < longest.blocks_in_ram
    assert fastest.n_ctx < balanced.n_ctx < longest.n_ctx
    assert fastest.share > balanced.share > longest.share
    for c in (balanced, fastest):  # each is a plan that fits with that context
        p = make_plan(clover, probe, RAM, PlanRequest(n_ctx=c.n_ctx))
        assert p.fits and p.n_cpu_moe == c.blocks_in_ram and p.type_k == c.type_k
    assert "fastest" in "\n".join(goal_lines([longest, balanced, fastest]))
    narrow = goal_lines([longest, balanced, fastest], narrow=True)[1:]  # the model details popup, 420 px
    assert narrow[2] == f"fastest: {fastest.n_ctx:,} tokens, {fastest.blocks_in_ram} of 40 blocks in RAM, " \
                        f"~{round(fastest.share * 100)} %"
    assert max(map(len, narrow)) <= 64  # no wrap at 420 px (looked at: the longest row is 62)
    assert goal_costs(clover, probe_with(FakeNVML([gpu(48.0)])), RAM) == []


@pytest.mark.parametrize("vram, expect_cpu_moe", [(8, (25, 40)), (12, (15, 30)), (48, (0, 0)), (80, (0, 0))])
def test_plans_across_card_sizes(clover, vram, expect_cpu_moe):
    plan = plan_for(clover, gpu(vram))
    assert plan.fits
    assert expect_cpu_moe[0] <= plan.n_cpu_moe <= expect_cpu_moe[1]
    assert plan.breakdown.gpu_total <= plan.budget_bytes


def test_more_vram_never_means_more_experts_in_ram(clover):
    counts = [plan_for(clover, gpu(v)).n_cpu_moe for v in (6, 8, 10, 12, 16, 20, 24, 32)]
    assert counts == sorted(counts, reverse=True)


def test_smaller_context_request_is_kept(clover):
    plan = plan_for(clover, gpu(16.0), n_ctx=16_384)
    assert plan.n_ctx == 16_384 and plan.fits
    assert plan.n_cpu_moe < plan_for(clover, gpu(16.0)).n_cpu_moe


def test_context_is_reduced_only_when_nothing_else_fits(clover):
    plan = plan_for(clover, gpu(3.0))  # 3 GB: every expert in RAM still leaves too little for 128K
    assert plan.fits and plan.n_cpu_moe == 40
    assert plan.n_ctx < 131_072 and "reduced from 131,072" in plan.reason


def test_too_small_a_gpu_says_what_would_fit(clover):
    plan = plan_for(clover, gpu(2.0))
    assert not plan.fits
    assert "Does not fit" in plan.reason
    assert any("GPU with at least" in s for s in plan.suggestions)


def test_ram_shortage_is_reported(clover):
    plan = plan_for(clover, gpu(8.0), ram=SystemMemory(16 * GiB, 10 * GiB))
    assert not plan.fits
    assert any("system RAM" in s for s in plan.suggestions)


def test_two_gpus_plan_for_the_one_with_most_free_memory(clover):
    plan = plan_for(clover, gpu(12.0, "small"), gpu(24.0, "big"))
    assert plan.gpu.name == "big" and plan.gpu.index == 1 and plan.n_cpu_moe == 0
    assert any("2 GPUs found" in w for w in plan.warnings)
    assert plan_for(clover, gpu(12.0, "small"), gpu(24.0, "big"), gpu_index=0).gpu.name == "small"


def test_mig_is_warned_about(clover):
    plan = plan_for(clover, gpu(80.0, "NVIDIA H100", mig=1))
    assert any("MIG" in w for w in plan.warnings)


@pytest.mark.parametrize("error", [NVMLError_LibraryNotFound("NVML Shared Library Not Found"),
                                   FakeNVMLError("Driver/library version mismatch")])
def test_no_nvml_means_a_cpu_plan(clover, error):
    plan = make_plan(clover, probe_with(FakeNVML(init_error=error)), RAM)
    assert plan.device == "cpu" and plan.fits and plan.settings().n_gpu_layers == 0
    assert "CPU mode" in plan.reason


def test_vram_what_if(clover):
    plan = make_plan(clover, probe_with(FakeNVML([])), RAM, PlanRequest(vram_bytes=24 * GiB))
    assert plan.device == "gpu" and plan.n_cpu_moe == 0 and "what-if" in plan.device_label


def test_dense_model_facts(smollm2):
    facts = facts_from_header(read_header(smollm2))
    assert facts.arch == "llama" and facts.expert_blocks == [] and len(facts.attention_blocks) == 30
    assert facts.kv_bytes(512) == 11.25 * MiB  # llama.cpp: "CPU KV buffer size = 11.25 MiB"
    assert kv_cells(300) == 512


def test_cli_plan(tmp_path):
    path = write_clover_shaped(tmp_path / "c.gguf")
    r = run_app("plan", path, "--vram-gb", "24")
    assert r.returncode == 0, r.stderr
    assert "qwen35moe" in r.stdout and "Everything on the GPU" in r.stdout and "KV cache" in r.stdout
    r = run_app("plan", path, "--vram-gb", "1")
    assert r.returncode == 1 and "Does not fit" in r.stdout
    r = run_app("plan", path, "--vram-gb", "16")
    assert "what each goal costs" in r.stdout and "fastest" in r.stdout, r.stdout + r.stderr
    r = run_app("plan", tmp_path / "none.gguf")
    assert r.returncode == 2 and "No such file" in r.stderr


@pytest.mark.slow
def test_a_multi_token_prediction_head_is_not_planned_as_a_block(tmp_path, clover):
    """Held-out check: Qwen3.6 MTP files say block_count 41 and nextn_predict_layers 1. llama.cpp runs
    40 layers, sizes KV for the 10 attention ones and ignores block 40's tensors; so does the plan."""
    import re

    from app.machine.llama_load import LoadSettings, simulate

    path = write_clover_shaped(tmp_path / "qwen3.6-mtp-shape.gguf", mtp=True)
    facts = facts_from_header(read_header(path))
    assert facts.n_layer == 40 and len(facts.blocks) == 40 and facts.extra_blocks == (40,)
    assert facts.kv_bytes_per_token() == 20_480 and facts.weights_bytes == clover.weights_bytes
    _, lines = simulate(path, LoadSettings(n_ctx=131_072, n_outputs_max=1, speculative="off"))
    text = "\n".join(lines)
    _, drafting = simulate(path, LoadSettings(n_ctx=131_072, n_outputs_max=1))  # auto: the head is loaded (load_mtp)
    assert "unused tensor blk.40" not in "\n".join(drafting) and "unused tensor blk.40" in text
    assert re.search(r"n_layer\s+= 40\b", text)
    kv = re.search(r"llama_kv_cache: size = +([\d.]+) MiB \(131072 cells, +(\d+) layers", text)
    assert kv and int(kv.group(2)) == 10 and float(kv.group(1)) * MiB == facts.kv_bytes(131_072)
    unused = sum(int(n) for n in re.findall(r"unused tensor blk\.40\.\S+ \(size = (\d+) bytes\)", text))
    assert unused == facts.unused_bytes > 400 * MiB
    for vram, ctx in ((23.99, 131_072), (16.0, 131_072)):
        with_mtp = plan_for(facts, gpu(vram), n_ctx=ctx, speculative="off")
        without = plan_for(clover, gpu(vram), n_ctx=ctx)
        assert (with_mtp.n_cpu_moe, with_mtp.type_k) == (without.n_cpu_moe, without.type_k), vram
        assert with_mtp.n_expert_blocks == 40 and any("multi-token-prediction" in w for w in with_mtp.warnings)
        assert "of 40 blocks" in "\n".join(with_mtp.lines()) or with_mtp.n_cpu_moe == 0
        # where the head drafts (mtp forces it; auto weighs it, below), the plan counts it: 457 MiB of
        # block 40, its draft context's KV (one attention block) and compute, the other blocks on the GPU
        drafting = plan_for(facts, gpu(vram), n_ctx=ctx, speculative="mtp")
        b = drafting.breakdown
        assert b.mtp_blocks == (40,) and not any("multi-token" in w for w in drafting.warnings)
        assert b.mtp > facts.unused_bytes + facts.mtp_kv_bytes(drafting.n_ctx, drafting.type_k, drafting.type_v)
        assert drafting.n_cpu_moe >= with_mtp.n_cpu_moe and b.gpu_total <= drafting.budget_bytes
        assert "MTP head" in "\n".join(drafting.lines())
    full = plan_for(facts, gpu(23.99), speculative="off")
    assert full.n_cpu_moe == 0 and full.type_k == "f16"


def test_experts_in_ram_come_with_a_speed_expectation_scaled_from_the_reported_figure():
    from app.model.plan import speed_expectation

    assert speed_expectation(10, 40).startswith("Expect about half of the speed")  # the reported 102 vs 208
    assert speed_expectation(11, 40).startswith("Expect about half")
    assert speed_expectation(1, 40).startswith("Expect about 90 %")
    assert speed_expectation(20, 40).startswith("Expect about 30 %")


def test_clover_keeps_16_context_checkpoints_in_ram_and_the_plan_says_so(clover, smollm2):
    """62.81 MiB of recurrent state per checkpoint: 16 fit the 1 GiB bound; a model that can cut its
    cache back (SmolLM2, no recurrent state) keeps none."""
    plan = plan_for(clover, gpu(23.99, "NVIDIA GeForce RTX 4090"))
    assert plan.n_checkpoints == 16 and plan.settings().ctx_checkpoints == 16
    assert plan.breakdown.checkpoints == 16 * clover.recurrent_state_per_seq
    assert plan.breakdown.ram_total >= plan.breakdown.checkpoints  # host copies, whatever the device
    assert any("checkpoints" in line and "16 x 62.81 MiB" in line for line in plan.lines())
    small = facts_from_header(read_header(smollm2))
    cpu = plan_for(small)
    assert cpu.n_checkpoints == 0 and cpu.breakdown.checkpoints == 0
    assert not any("checkpoints" in line for line in cpu.lines())


def test_draft_rollback_snapshots_are_counted_on_the_device(clover):
    """Speculative decoding on a hybrid model: llama.cpp keeps a snapshot of the recurrent state per
    draft token (n_rs_seq). Four of Clover's 62.81 MiB go with the GPU's state; the plan loads with
    that draft length."""
    plan = plan_for(clover, gpu(23.99, "NVIDIA GeForce RTX 4090"))
    assert plan.breakdown.rollback == 4 * clover.recurrent_state_per_seq
    assert plan.draft_max == 4 and plan.settings().draft_max == 4
    assert plan.breakdown.gpu_total >= plan.breakdown.rollback + plan.breakdown.recurrent
    assert any("draft rollback" in line and "4 snapshots" in line for line in plan.lines())


# --- issue 39, item 9: the MTP head's memory only where it pays ------------------------------------------

QWEN36_MTP_BYTES = 528_857_088  # the MTP head (block 40, 20 tensors) of the public UD-Q4_K_M file
Q4_K, Q5_K, Q6_K, Q8_0 = 12, 13, 14, 8


def _more_bits(il: int, n: int = 40) -> bool:
    """llama.cpp's use_more_bits (llama-quant.cpp): the layers whose ffn_down Q4_K_M raises to Q6_K."""
    return il < n // 8 or il >= 7 * n // 8 or (il - n // 8) % 3 == 2


def write_qwen36_ud_q4_k_m(path):
    """The header of Qwen3.6-35B-A3B UD-Q4_K_M with its MTP block, rebuilt: the Clover shape's tensors
    (qwen35moe, 40 blocks and block 40 with its nextn.* tensors), Q4_K_M's mix (ffn_down_exps at Q6_K in
    the 20 use_more_bits blocks: 498 MiB of experts there, 432 in the others; about 19.7 GiB of weights,
    the published size of Q4_K_M files of this shape), and the head at the published 528,857,088 bytes
    (to within 1 MiB: ffn_down_exps Q5_K, attn_q, attn_output and nextn.eh_proj Q8_0)."""
    from app.gguf.gguf_file import TensorInfo, encode_header
    from tests.helpers.clover_shape import clover_kvs, clover_tensors

    def retype(name: str, ggml_type: int) -> int:
        if not name.startswith("blk."):
            return ggml_type
        il = int(name.split(".")[1])
        if il == 40:
            if name.endswith("ffn_down_exps.weight"):
                return Q5_K
            return Q8_0 if name.endswith(("attn_q.weight", "attn_output.weight", "eh_proj.weight")) else ggml_type
        return Q6_K if name.endswith("ffn_down_exps.weight") and _more_bits(il) else ggml_type

    infos, offset = [], 0
    for name, shape, ggml_type in clover_tensors(40, mtp=True):
        info = TensorInfo(name, shape, retype(name, ggml_type), offset)
        infos.append(info)
        offset += -(-info.n_bytes // 32) * 32
    head = encode_header(3, clover_kvs(n_blocks=40, mtp=True), infos, 32)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    return path


@pytest.fixture(scope="module")
def qwen36_path(tmp_path_factory):
    return write_qwen36_ud_q4_k_m(tmp_path_factory.mktemp("qwen36") / "Qwen3.6-35B-A3B-MTP-UD-Q4_K_M.gguf")


@pytest.fixture(scope="module")
def qwen36(qwen36_path):
    return facts_from_header(read_header(qwen36_path))


CARD_24, CARD_16 = 23.99, 16.0  # an RTX 4090 and a 16 GB card, 0.4 GiB in use by the desktop


def test_the_rebuilt_qwen36_header_gives_the_reported_starting_point(qwen36):
    """The issue's figures with the head reserved unconditionally (mtp forces it now): 919 MiB of MTP head
    at 131,072 tokens with a q8_0 cache (504 MiB of block 40, 136 MiB of its draft KV, 279 MiB of compute),
    251 MiB of rollback, the 24 GB plan down to q8_0, the 16 GB one at 16-17 blocks in RAM."""
    assert qwen36.extra_blocks == (40,) and len(qwen36.blocks) == 40
    assert abs(qwen36.unused_bytes - QWEN36_MTP_BYTES) < MiB
    assert qwen36.weights_bytes / GiB == pytest.approx(19.7, abs=0.1)
    assert {round(b.expert_bytes / MiB) for b in qwen36.blocks} == {432, 498}
    big = plan_for(qwen36, gpu(CARD_24), speculative="mtp")
    assert big.fits and big.n_cpu_moe == 0 and big.type_k == "q8_0" and big.n_ctx == 131_072
    assert big.breakdown.mtp / MiB == pytest.approx(919, abs=3)
    assert big.breakdown.rollback / MiB == pytest.approx(251.25, abs=0.1)
    small = plan_for(qwen36, gpu(CARD_16), speculative="mtp")
    assert small.fits and 16 <= small.n_cpu_moe <= 17 and small.n_ctx == 131_072


def test_24_gb_keeps_the_f16_cache_and_not_the_mtp_head_that_would_cost_it(qwen36):
    """Auto: with the head the cache must drop to q8_0; without, f16 fits with nothing in RAM. The plan
    keeps f16 (drafting changes only the speed; a quantized cache changes the text) and says so, both
    options side by side; n-grams draft, so the rollback snapshots stay."""
    plan = plan_for(qwen36, gpu(CARD_24, "NVIDIA GeForce RTX 4090"), n_ctx=131_072)
    b = plan.breakdown
    assert plan.fits and plan.n_ctx == 131_072 and plan.n_cpu_moe == 0 and plan.type_k == "f16"
    assert b.mtp == 0 and b.mtp_blocks == () and b.rollback == 4 * qwen36.recurrent_state_per_seq
    settings = plan.settings()
    assert plan.speculative == settings.speculative == "ngram" and not settings.mtp and settings.drafts
    choice = plan.drafting
    assert choice is not None and not choice.kept and not choice.forced
    w, wo = choice.with_head, choice.without
    assert (w.blocks_in_ram, w.type_k, wo.blocks_in_ram, wo.type_k) == (0, "q8_0", 0, "f16")
    assert w.tps > wo.tps  # drafting alone would be faster: the plan says why it is still off
    assert w.settings.mtp and w.settings.type_k == "q8_0" and not wo.settings.mtp  # for Tune to measure both
    text = "\n".join(plan.lines())
    assert "The MTP head is kept off: it would cost a q8_0 KV cache instead of f16" in plan.reason
    assert f"~{w.tps:.0f} tok/s expected with it, ~{wo.tps:.0f} without" in plan.reason
    assert "drafting         MTP head kept off" in text
    assert "  with the head    no experts in RAM, 131,072 tokens, KV q8_0, ~229 tok/s" in text
    assert "  without          no experts in RAM, 131,072 tokens, KV f16, ~208 tok/s (n-grams draft)" in text
    assert "MTP head         " not in text and not any("multi-token" in w for w in plan.warnings)


def test_16_gb_keeps_at_most_14_blocks_in_ram_where_the_head_costs_more_than_it_gains(qwen36):
    """Auto: the head's 919 MiB and its snapshots put two more blocks' experts in RAM; the speed the
    plan expects with its drafts (+10 % on the GPU's share) is below the plan without it."""
    plan = plan_for(qwen36, gpu(CARD_16, "NVIDIA GeForce RTX 4060 Ti 16GB"), n_ctx=131_072)
    assert plan.fits and plan.n_ctx == 131_072 and plan.n_cpu_moe <= 14
    assert plan.breakdown.mtp_blocks == () and plan.settings().speculative == "ngram"
    assert plan.breakdown.rollback > 0  # n-grams draft: rollback snapshots are still needed
    choice = plan.drafting
    assert choice is not None and not choice.kept
    w, wo = choice.with_head, choice.without
    assert w.blocks_in_ram > wo.blocks_in_ram == plan.n_cpu_moe and w.type_k == wo.type_k == plan.type_k
    assert w.tps < wo.tps and wo.tps == pytest.approx(208 * speed_share(wo.blocks_in_ram, 40))
    assert (f"The MTP head is kept off: it costs more than it gains, {w.blocks_in_ram} blocks of experts in RAM "
            f"instead of {wo.blocks_in_ram}") in plan.reason
    assert f"experts in RAM   {plan.n_cpu_moe} of 40 blocks" in plan.lines()[5]
    assert plan.settings().cpu_moe_blocks == tuple(range(plan.n_cpu_moe))  # no head block among them


@pytest.mark.parametrize("vram", [CARD_24, CARD_16])
def test_speculative_mtp_forces_the_head_and_says_what_it_costs(qwen36, vram):
    plan = plan_for(qwen36, gpu(vram), n_ctx=131_072, speculative="mtp")
    auto = plan_for(qwen36, gpu(vram), n_ctx=131_072)
    assert plan.fits and plan.breakdown.mtp_blocks == (40,) and plan.settings().mtp
    assert plan.settings().speculative == "mtp"
    choice = plan.drafting
    assert choice is not None and choice.kept and choice.forced
    assert (choice.without.blocks_in_ram, choice.without.type_k) == (auto.n_cpu_moe, auto.type_k)
    cost = ("a q8_0 KV cache instead of f16" if vram == CARD_24
            else f"{plan.n_cpu_moe} blocks of experts in RAM instead of {auto.n_cpu_moe}")
    assert f"The MTP head drafts (speculative decoding: mtp): it costs {cost}" in plan.reason
    assert "MTP head         " in "\n".join(plan.lines())


@pytest.mark.parametrize("vram", [CARD_24, CARD_16, 48.0])
def test_speculative_off_never_reserves_the_head(qwen36, vram):
    plan = plan_for(qwen36, gpu(vram), n_ctx=131_072, speculative="off")
    b = plan.breakdown
    assert plan.fits and b.mtp == 0 and b.mtp_blocks == () and plan.drafting is None
    assert plan.draft_max == 0 and plan.settings().speculative == "off" and not plan.settings().drafts
    assert not plan.settings().mtp and "MTP head" not in "\n".join(plan.lines()) + plan.reason
    assert any("not loaded" in w and "speculative decoding: off" in w for w in plan.warnings)


def test_the_head_is_kept_where_it_costs_nothing_else(qwen36, tmp_path):
    """On a 48 GB card, and for the lighter Q4_K_M-style file on a 24 GB card, the head fits beside the
    f16 cache with nothing in RAM: auto keeps it (the engine drafts only where drafting pays)."""
    lighter = facts_from_header(read_header(write_clover_shaped(tmp_path / "mtp.gguf", mtp=True)))
    for facts, vram in ((qwen36, 48.0), (lighter, CARD_24)):
        plan = plan_for(facts, gpu(vram), n_ctx=131_072)
        assert plan.breakdown.mtp_blocks == (40,) and plan.n_cpu_moe == 0 and plan.type_k == "f16", vram
        assert plan.settings().speculative == "auto" and plan.settings().mtp
        assert plan.drafting is not None and plan.drafting.kept
        assert "that costs nothing else here (~229 tok/s expected with it, ~208 without)" in plan.reason


def test_drafting_choice_weighs_expected_speed_and_never_trades_context_or_kv_precision():
    from app.machine.llama_load import LoadSettings
    from app.model.plan import DraftOption, drafting_choice

    def option(head, blocks, ctx=131_072, kv="q8_0", fits=True, tps=None):
        tps = tps or expected_tps(blocks, 40, MTP_GAIN if head else 1.0)
        settings = LoadSettings(speculative="auto" if head else "ngram")
        return DraftOption(head, ctx, kv, blocks, 40, fits, tps, 0, settings)

    # at +10 % on the GPU's share, one more block in RAM already costs more than the head gains
    assert not drafting_choice(option(True, 1), option(False, 0)).kept
    assert not drafting_choice(option(True, 11), option(False, 10)).kept
    gains = drafting_choice(option(True, 11, tps=110.0), option(False, 10))  # a head that would gain more
    assert gains.kept and gains.why == "it gains more than it costs, 11 blocks of experts in RAM instead of 10"
    off = drafting_choice(option(True, 16), option(False, 14))
    assert not off.kept and off.why == "it costs more than it gains, 16 blocks of experts in RAM instead of 14"
    assert not drafting_choice(option(True, 0, ctx=65_536), option(False, 0)).kept
    assert not drafting_choice(option(True, 0, kv="q8_0"), option(False, 0, kv="f16")).kept
    assert not drafting_choice(option(True, 0, fits=False), option(False, 0)).kept
    forced = drafting_choice(option(True, 16), option(False, 14), forced=True)
    assert forced.kept and forced.why == "it costs 16 blocks of experts in RAM instead of 14"


def test_expected_speed_scales_the_reported_figures_and_drafting_gains_only_on_the_gpu_share():
    assert expected_tps(0, 40) == 208 and expected_tps(10, 40) == pytest.approx(102)
    assert expected_tps(7, 40) == pytest.approx(208 * speed_share(7, 40))
    assert expected_tps(0, 40, MTP_GAIN) == pytest.approx(208 * MTP_GAIN)
    # experts read from RAM are read for every token a verify batch checks: no gain on that share
    assert expected_tps(10, 40, MTP_GAIN) < 102 * MTP_GAIN
    assert 1 < MTP_GAIN <= 1.2  # conservative: the low end of the public +10-20 % on CUDA


def test_plan_for_file_loads_the_head_exactly_where_the_plan_reserved_it(qwen36_path, tmp_path):
    """The setting auto, passed as the window and serve pass it, must not load a head the plan kept off."""
    from app.machine.snapshot import Machine

    for vram, kept in ((CARD_24, False), (CARD_16, False), (48.0, True)):
        machine = Machine(probe_with(FakeNVML([gpu(vram)])), RAM)
        for speculative in ("", "auto"):
            planned = plan_for_file(qwen36_path, machine, use_tune=False, speculative=speculative)
            assert bool(planned.plan.breakdown.mtp_blocks) == kept, (vram, speculative)
            assert planned.settings.mtp == kept and planned.settings.drafts, (vram, speculative)
        forced = plan_for_file(qwen36_path, machine, use_tune=False, speculative="mtp")
        assert forced.settings.mtp and forced.plan.breakdown.mtp_blocks == (40,)
        off = plan_for_file(qwen36_path, machine, use_tune=False, speculative="off")
        assert not off.settings.mtp and not off.settings.drafts and off.plan.breakdown.mtp == 0


def test_parallel_slots_share_one_kv_pool_and_each_keeps_its_recurrent_state(clover):
    """llama.cpp's unified cache: 4 slots cost the KV of one context, and 4 recurrent states with their
    rollback snapshots (the checkpoints' RAM is shared out among them)."""
    one, four = plan_for(clover, gpu(23.99)), plan_for(clover, gpu(23.99), parallel=4)
    assert four.parallel == 4 and four.n_ctx == one.n_ctx == 131_072
    assert four.breakdown.kv == one.breakdown.kv == clover.kv_bytes(131_072)
    assert four.breakdown.recurrent == 4 * one.breakdown.recurrent
    assert four.breakdown.rollback == 4 * one.breakdown.rollback
    assert four.breakdown.checkpoints == one.breakdown.checkpoints
    assert "4 parallel slots sharing the full 131,072-token context" in four.reason
    assert "context          131,072 tokens shared by 4 slots, KV cache f16/f16, flash attention on" in four.lines()
    assert four.settings().parallel == 4


@pytest.mark.parametrize(("vram", "slots", "why"), [
    (23.99, 4, "automatic: 4 at no cost to the context, the KV precision or the experts on the GPU"),
    # no batch costs measured for this GPU: n-grams keep no rollback snapshots on 12 GB (they would cost a
    # block of experts; app/model/plan_drafting.ngram_choice), so a slot costs its recurrent state alone
    (12.0, 3, "automatic: 4 would keep the experts of 1 more block in system RAM"),
    (16.0, 1, "automatic: 2 would leave out n-gram drafting's rollback snapshots"),
])
def test_automatic_slots_are_four_where_they_cost_nothing_the_plan_for_one_keeps(clover, vram, slots, why):
    """parallel=0 (serve's --parallel auto, the window's automatic setting): as many slots as cost no
    context, KV precision or experts on the GPU against one slot, 4 at most: each adds a 62.81 MiB
    recurrent state and 4 rollback snapshots of it (314 MiB, most of a block's experts), so a 16 GB card
    that already keeps experts in RAM gets one."""
    one, auto = plan_for(clover, gpu(vram)), plan_for(clover, gpu(vram), parallel=0)
    assert auto.parallel == slots and auto.slots_note == why
    assert (auto.n_ctx, auto.type_k, auto.n_cpu_moe) == (one.n_ctx, one.type_k, one.n_cpu_moe)
    more = plan_for(clover, gpu(vram), parallel=slots + 1) if slots < 4 else None
    assert more is None or more.n_cpu_moe > one.n_cpu_moe or more.breakdown.rollback < one.breakdown.rollback
    assert f"slots            {slots} ({why})" in auto.lines()


def test_automatic_slots_on_the_cpu_and_with_the_mtp_head_forced(clover, tmp_path):
    cpu = make_plan(clover, probe_with(FakeNVML([])), RAM, PlanRequest(parallel=0))
    assert cpu.device == "cpu" and cpu.parallel == 4 and cpu.slots_note == "automatic: 4 at no cost to the context"
    small = make_plan(clover, probe_with(FakeNVML([])), SystemMemory(64 * GiB, 22 * GiB), PlanRequest(parallel=0))
    assert small.parallel < 4 and small.n_ctx == make_plan(clover, probe_with(FakeNVML([])),
                                                            SystemMemory(64 * GiB, 22 * GiB)).n_ctx
    facts = facts_from_header(read_header(write_clover_shaped(tmp_path / "mtp.gguf", mtp=True)))
    # the head drafts for the first slot whatever the count: the plan reserves it once, and chooses the
    # slots as for a file without one (each more slot costs its recurrent state and rollback snapshots)
    forced = plan_for(facts, gpu(23.99), parallel=0, speculative="mtp")
    one = plan_for(facts, gpu(23.99), parallel=1, speculative="mtp")
    assert forced.parallel > 1 and forced.breakdown.mtp_blocks == (40,) and forced.settings().mtp
    assert forced.breakdown.mtp == one.breakdown.mtp and forced.settings().parallel == forced.parallel
    assert forced.parallel == 3 and forced.slots_note == "automatic: 4 would need a q8_0 KV cache"
