"""Expert offload really applied: llama.cpp accepts our tensor_buft_overrides and moves exactly those tensors."""

from __future__ import annotations

import pytest

from app.gguf.gguf_file import read_header
from app.gguf.model_facts import EXPERT_RE, facts_from_header
from app.machine.llama_load import LoadSettings, capture_log, load_llama, parse_buffers, parse_overrides
from tests.helpers.decode import greedy_with
from tests.helpers.gguf_models import ModelShape, write_deepseek_moe


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    # 6 blocks: block 0 dense, 1-5 MoE with routed and shared experts
    return write_deepseek_moe(tmp_path_factory.mktemp("moe") / "moe6.gguf", ModelShape(n_layer=6))


def _load(path, settings):
    with capture_log() as lines:
        llm = load_llama(path, settings, n_threads=2, logits_all=True)
    return llm, lines


def test_overrides_move_exactly_the_planned_expert_tensors(moe):
    settings = LoadSettings(n_ctx=256, cpu_moe_blocks=(1, 3, 4))
    llm, lines = _load(moe, settings)
    try:
        moved = parse_overrides(lines)
        expected = {t.name for t in read_header(moe).tensors
                    if EXPERT_RE.match(t.name) and int(t.name.split(".")[1]) in (1, 3, 4)}
        assert len(expected) == 9
        assert set(moved) == expected  # exactly: not the shared experts, not other blocks
        assert set(moved.values()) <= {"CPU", "CPU_REPACK"}
        tokens = greedy_with(llm, n=8)
    finally:
        llm.close()

    plain, plain_lines = _load(moe, LoadSettings(n_ctx=256))
    try:
        assert parse_overrides(plain_lines) == {}
        assert greedy_with(plain, n=8) == tokens  # same placement on a CPU machine: same tokens
    finally:
        plain.close()


def test_every_expert_block_offloaded(moe):
    facts = facts_from_header(read_header(moe))
    assert facts.expert_blocks == [1, 2, 3, 4, 5]
    llm, lines = _load(moe, LoadSettings(n_ctx=256, cpu_moe_blocks=tuple(facts.expert_blocks)))
    try:
        assert len(parse_overrides(lines)) == 15
        assert parse_buffers(lines).total("compute") > 0
    finally:
        llm.close()


def test_n_outputs_max_reaches_llama_cpp(smollm2):
    """n_outputs_max=1 (only the last token's logits) shrinks the compute buffer by the logits stage."""
    sizes = {}
    for n_out in (0, 1):
        llm, lines = _load(smollm2, LoadSettings(n_ctx=512, n_outputs_max=n_out, speculative="off"))  # drafts: 9
        llm.close()
        sizes[n_out] = parse_buffers(lines).total("compute")
        assert any(f"n_outputs_max         = {n_out or 512}" in line for line in lines)
    assert sizes[1] < sizes[0] / 4  # 96 MiB of logits for 512 outputs x 49,152 tokens are gone

    # and generation still works with one output per batch
    llm = load_llama(smollm2, LoadSettings(n_ctx=512, n_outputs_max=1), n_threads=2)
    try:
        out = llm.create_completion("The capital of France is", max_tokens=6, temperature=0.0, top_k=1)
        assert "Paris" in out["choices"][0]["text"]
    finally:
        llm.close()
