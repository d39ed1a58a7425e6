"""The planner's estimates against llama.cpp's own figures for the same load.

Real loads on the CPU of SmolLM2 and the MoE test double at several contexts, flash attention on
and off: model buffers, KV cache and compute buffer as llama.cpp prints them, each within 5% of
the estimate from the header alone. And llama.cpp's no-alloc sizing of a Clover-shaped header at
the full 131,072-token window (recurrent state and compute buffer).
"""

from __future__ import annotations

import pytest

from app.gguf.gguf_file import read_header
from app.gguf.model_facts import facts_from_header
from app.machine.llama_load import LoadSettings, capture_log, load_llama, parse_buffers, simulate
from tests.helpers.clover_shape import write_clover_shaped
from tests.helpers.gguf_models import write_deepseek_moe

MiB = 1024 * 1024
PRINT_RESOLUTION = 0.005 * MiB  # llama.cpp prints MiB with two decimals


def close(estimate: int, measured: int, rel: float = 0.05) -> bool:
    return abs(estimate - measured) <= max(rel * measured, PRINT_RESOLUTION)


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm2):
    return {"smollm2": smollm2, "moe": write_deepseek_moe(tmp_path_factory.mktemp("cal") / "moe.gguf")}


CASES = [(m, ctx, fa) for m in ("smollm2", "moe") for ctx in (512, 2048, 8192) for fa in (True, False)]


@pytest.mark.parametrize("model, n_ctx, flash_attn", CASES)
def test_estimates_match_llama_cpp(models, model, n_ctx, flash_attn, capsys):
    path = models[model]
    facts = facts_from_header(read_header(path))
    with capture_log() as lines:
        llm = load_llama(path, LoadSettings(n_ctx=n_ctx, flash_attn=flash_attn), n_threads=2)
    llm.close()
    report = parse_buffers(lines)
    measured = {"model": report.total("model"), "KV": report.total("KV"), "compute": report.total("compute")}
    estimate = {"model": facts.weights_bytes, "KV": facts.kv_bytes(n_ctx),
                "compute": facts.compute_bytes(n_ctx, n_outputs=512, flash_attn=flash_attn)}
    with capsys.disabled():
        print(f"\n  {model} ctx={n_ctx} fa={flash_attn}: " + ", ".join(
            f"{k} est {estimate[k] / MiB:.2f} / llama.cpp {measured[k] / MiB:.2f} MiB" for k in measured))
    for kind in measured:
        assert measured[kind] > 0
        assert close(estimate[kind], measured[kind]), (kind, estimate[kind] / MiB, measured[kind] / MiB)
    assert close(sum(estimate.values()), sum(measured.values()))


@pytest.mark.slow
def test_clover_shape_full_window_matches_llama_cpp_sizing(tmp_path):
    path = write_clover_shaped(tmp_path / "clover-shape.gguf")
    facts = facts_from_header(read_header(path))
    report, lines = simulate(path, LoadSettings(n_ctx=131_072, n_outputs_max=1, flash_attn=True, speculative="off"))
    assert any("qwen35moe" in line for line in lines)
    assert close(facts.recurrent_state_per_seq, report.total("RS"))
    # with drafts, the plan's 4 rollback snapshots of the state (n_rs_seq) come on top
    drafting, _ = simulate(path, LoadSettings(n_ctx=131_072, n_outputs_max=1, flash_attn=True, draft_max=4))
    assert close(5 * facts.recurrent_state_per_seq, drafting.total("RS"))
    assert close(facts.compute_bytes(131_072, n_outputs=1, flash_attn=True), report.total("compute"))
    report512, _ = simulate(path, LoadSettings(n_ctx=131_072, n_outputs_max=512, flash_attn=True, speculative="off"))
    assert close(facts.compute_bytes(131_072, n_outputs=512, flash_attn=True), report512.total("compute"))
