"""The plan under "Reproducible replies" (issue 54, item 3): each slot its own n_ctx of KV cells (the
partitioned cache llama.cpp makes of n_ctx x slots, padded to 256 cells a slot), no flash attention on
the CPU, nothing drafting; its KV figure against the buffers llama.cpp allocates for tiny models of
three attention kinds (full attention beside recurrent blocks, a sliding window in most blocks, in every
other block); and the load line of `serve --reproducible`."""

from __future__ import annotations

import pytest

from app.gguf.gguf_file import read_header
from app.gguf.model_facts import facts_from_header
from app.machine.gpu import probe_with
from app.machine.llama_load import LoadSettings, capture_log, load_llama, parse_buffers
from app.machine.system_memory import SystemMemory
from app.model.plan import PlanRequest, breakdown, make_plan, reproducible_layout
from tests.helpers.fakes import FakeNVML
from tests.helpers.server_post import serve_until_listening

GIB = 1024**3
MIB = 1024**2


@pytest.mark.parametrize("fixture", ["qwen35moe_model", "gemma3_model", "gpt_oss_model"])
def test_the_plan_counts_a_set_of_kv_cells_a_slot_as_llama_cpp_allocates_them(fixture, request):
    path = request.getfixturevalue(fixture)
    facts = facts_from_header(read_header(path))
    n_ctx = 1000  # not a multiple of 256: llama.cpp pads each slot's share
    planned = breakdown(facts, n_ctx, (), "f16", "f16", on_gpu=False, parallel=4, flash_attn=False,
                        reproducible=True)
    shared = breakdown(facts, n_ctx, (), "f16", "f16", on_gpu=False, parallel=4)
    assert planned.kv == 4 * shared.kv > 0 and planned.rollback == 0
    settings = reproducible_layout(LoadSettings(n_ctx=n_ctx, parallel=4, ctx_checkpoints=0))
    assert not settings.kv_unified and not settings.flash_attn and settings.speculative == "off"
    with capture_log() as lines:
        llm = load_llama(path, settings, n_threads=2)
    llm.close()
    allocated = parse_buffers(lines).total("KV")
    assert abs(allocated - planned.kv) <= max(0.01 * planned.kv, 0.01 * MIB), (allocated, planned.kv)


def test_a_reproducible_plan_loads_the_layout_it_counted(qwen35moe_model):
    facts = facts_from_header(read_header(qwen35moe_model))
    ram, cpu_only = SystemMemory(64 * GIB, 48 * GIB), probe_with(FakeNVML([]))
    shared = make_plan(facts, cpu_only, ram, PlanRequest(n_ctx=4096, parallel=4))
    plan = make_plan(facts, cpu_only, ram, PlanRequest(n_ctx=4096, parallel=4, reproducible=True))
    assert plan.breakdown.kv == 4 * shared.breakdown.kv and plan.breakdown.reproducible
    assert "4 parallel slots each with a 4,096-token context" in plan.reason
    s = plan.settings()
    assert (s.reproducible, s.kv_unified, s.flash_attn, s.speculative, s.parallel) == (True, False, False, "off", 4)
    assert shared.settings().kv_unified and not shared.settings().reproducible


def test_on_a_gpu_the_plan_pays_for_the_cells_with_context_or_experts(tmp_path):
    """The Clover shape on a 24 GB card, 4 slots: the partitioned cache costs 4 x the KV, so the plan
    gives up context, KV precision or experts on the GPU where the shared pool did not; flash attention
    stays on."""
    from tests.helpers.clover_shape import write_clover_shaped
    from tests.helpers.fakes import FakeGpu

    facts = facts_from_header(read_header(write_clover_shaped(tmp_path / "c.gguf")))
    probe, ram = probe_with(FakeNVML([FakeGpu("NVIDIA GPU", 24, used_gib=0.4)])), SystemMemory(64 * GIB, 56 * GIB)
    shared = make_plan(facts, probe, ram, PlanRequest(n_ctx=131_072, parallel=4))
    plan = make_plan(facts, probe, ram, PlanRequest(n_ctx=131_072, parallel=4, reproducible=True))
    assert plan.fits and plan.device == "gpu" and plan.flash_attn and plan.settings().flash_attn
    assert plan.breakdown.kv == 4 * facts.kv_bytes(plan.n_ctx, plan.type_k, plan.type_v)
    assert plan.breakdown.gpu_total <= plan.budget_bytes
    # it cost something: context, KV precision or experts on the GPU
    assert plan.n_ctx < shared.n_ctx or plan.type_k != shared.type_k or plan.n_cpu_moe > shared.n_cpu_moe
    assert "4 parallel slots each with" in plan.reason and "sharing" not in plan.reason


@pytest.mark.slow
def test_serve_reproducible_says_so_in_its_load_line(smollm2):
    code, lines = serve_until_listening(smollm2, port=0, ctx=1024, parallel=4, reproducible=True, cache_disk_gb=0)
    assert code == 0, lines
    assert any("4 slots, each with its own 1,024-token context, reproducible replies" in line for line in lines), lines
    assert "speculative decoding: off: reproducible replies" in lines
