"""Checks that need an NVIDIA GPU and the CUDA build (skipped elsewhere, with the reason).

Run on a lent GPU machine by packaging/gpu_check.sh. They use generated models only (that
machine reaches no package registry).
"""

from __future__ import annotations

import pytest

from app.gguf.gguf_file import read_header
from app.gguf.model_facts import facts_from_header
from app.machine.gpu import probe
from app.machine.llama_backend import build_info
from app.machine.llama_load import LoadSettings, capture_log, load_llama, parse_buffers, parse_overrides
from app.machine.system_memory import system_memory
from app.model.plan import CUDA_COMPUTE_FACTOR, make_plan
from tests.helpers.clover_shape import write_clover_shaped
from tests.helpers.decode import greedy_with
from tests.helpers.gguf_models import ModelShape, write_deepseek_moe

pytestmark = pytest.mark.gpu
MiB = 1024 * 1024


def test_cuda_build_sees_the_gpu():
    info = build_info()
    assert info.cuda and info.gpu_offload
    assert any(d.kind == "gpu" for d in info.devices), info.devices
    assert probe().has_gpu


def test_moe_double_on_the_gpu_with_experts_in_ram(tmp_path):
    model = write_deepseek_moe(tmp_path / "moe.gguf", ModelShape(n_layer=6, n_embd=256, n_head=8, n_ff=512,
                                                                 n_ff_exp=128))
    with capture_log() as lines:
        llm = load_llama(model, LoadSettings(n_ctx=512, cpu_moe_blocks=(1, 2)), logits_all=True)
    try:
        moved = parse_overrides(lines)
        assert {n.split(".")[1] for n in moved} == {"1", "2"} and len(moved) == 6
        buffers = parse_buffers(lines)
        assert buffers.total("model", lambda n: n.startswith("CUDA")) > 0
        assert buffers.total("KV", lambda n: n.startswith("CUDA")) > 0
        tokens = greedy_with(llm, n=8)
        assert len(tokens) == 8
    finally:
        llm.close()


def test_clover_shape_plan_against_cuda_buffers(tmp_path, capsys):
    """The plan for this GPU loads, and llama.cpp's CUDA buffers match the estimates."""
    path = write_clover_shaped(tmp_path / "clover.gguf", n_ctx=131_072)
    facts = facts_from_header(read_header(path))
    plan = make_plan(facts, probe(), system_memory())
    assert plan.fits
    with capture_log() as lines:
        llm = load_llama(path, plan.settings())
    llm.close()
    b = parse_buffers(lines)
    cuda = lambda n: n.startswith("CUDA") and "Host" not in n  # noqa: E731
    measured = {"model": b.total("model", cuda), "KV": b.total("KV", cuda), "RS": b.total("RS", cuda),
                "compute": b.total("compute", cuda)}
    # llama.cpp's RS buffer holds the recurrent state and its rollback snapshots for drafting (n_rs_seq):
    # the plan's "recurrent" and "draft rollback" lines (314 MiB = 63 + 4 x 63 on the first H200 run)
    estimate = {"model": plan.breakdown.weights_gpu, "KV": plan.breakdown.kv,
                "RS": plan.breakdown.recurrent + plan.breakdown.rollback, "compute": plan.breakdown.compute}
    with capsys.disabled():
        print("\n  CUDA buffers vs plan (MiB): " + ", ".join(
            f"{k} {measured[k] / MiB:.0f} / {estimate[k] / MiB:.0f}" for k in measured)
              + f"; measured CUDA/CPU compute factor "
                f"{measured['compute'] / facts.compute_bytes(plan.n_ctx, n_outputs=1):.2f} "
                f"(planner uses {CUDA_COMPUTE_FACTOR:.2f})")
    for kind in ("model", "KV", "RS"):
        assert measured[kind] == pytest.approx(estimate[kind], rel=0.05), kind
    assert measured["compute"] <= estimate["compute"] * 1.5
