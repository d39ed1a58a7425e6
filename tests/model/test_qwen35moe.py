"""Clover's own architecture on the CPU: a tiny `qwen35moe` (gated delta nets and full attention, routed
and shared experts, the Qwen3.5/3.6 template) through the paths the other doubles prove: the plan
against llama.cpp's buffers, expert overrides, the Clover patch at load and as a copy, the thinking
switch, XML tool calls through the real template, the scenario bench and tune."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.contract import ChatRequest, SamplingParams
from app.gguf.gguf_file import read_header
from app.gguf.model_facts import EXPERT_RE, facts_from_header
from app.machine.llama_backend import llama
from app.machine.llama_load import LoadSettings, capture_log, load_llama, parse_buffers, parse_overrides
from app.model.patch import patch_file
from app.model.plan import load_time_patch
from tests.helpers.decode import CHAT_PROMPT, greedy_with
from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

MiB = 1024 * 1024
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def test_the_tiny_model_is_clovers_architecture(qwen35moe_model):
    facts = facts_from_header(read_header(qwen35moe_model))
    assert facts.arch == "qwen35moe"
    assert [b.recurrent for b in facts.blocks] == [True, True, True, False]  # every 4th block: full attention
    assert [b.has_kv for b in facts.blocks] == [False, False, False, True]
    assert all(b.expert_bytes and b.shared_bytes for b in facts.blocks)  # routed experts plus a shared one
    llm = load_llama(qwen35moe_model, LoadSettings(n_ctx=256))
    try:
        assert llm._is_hybrid and not llm._is_recurrent
    finally:
        llm.close()


@pytest.mark.parametrize("n_ctx", [512, 4096])
def test_the_plan_matches_llama_cpps_kv_and_recurrent_buffers(qwen35moe_model, n_ctx):
    facts = facts_from_header(read_header(qwen35moe_model))
    with capture_log() as lines:
        llm = load_llama(qwen35moe_model, LoadSettings(n_ctx=n_ctx, draft_max=4), n_threads=2)
    llm.close()
    report = parse_buffers(lines)
    assert report.total("RS") > 0 and report.total("KV") > 0
    # the state and a snapshot per draft token (n_rs_seq = 4: the plan's rollback for a hybrid model)
    assert abs(report.total("RS") - 5 * facts.recurrent_state_per_seq) <= 0.005 * MiB  # printed with 2 decimals
    assert abs(report.total("KV") - facts.kv_bytes(n_ctx)) <= max(0.05 * report.total("KV"), 0.005 * MiB)
    assert abs(report.total("model") - facts.weights_bytes) <= 0.05 * report.total("model")


def test_expert_overrides_move_exactly_the_planned_blocks(qwen35moe_model):
    with capture_log() as lines:
        llm = load_llama(qwen35moe_model, LoadSettings(n_ctx=256, cpu_moe_blocks=(1, 3)), n_threads=2, logits_all=True)
    try:
        moved = parse_overrides(lines)
        expected = {t.name for t in read_header(qwen35moe_model).tensors
                    if EXPERT_RE.match(t.name) and int(t.name.split(".")[1]) in (1, 3)}
        assert len(expected) == 6 and set(moved) == expected  # a recurrent and an attention block, not the shared
        tokens = greedy_with(llm, n=8)
    finally:
        llm.close()
    plain = load_llama(qwen35moe_model, LoadSettings(n_ctx=256), n_threads=2, logits_all=True)
    try:
        assert greedy_with(plain, n=8) == tokens
    finally:
        plain.close()


def _logits(path, overrides=None) -> np.ndarray:
    llm = llama().Llama(model_path=str(path), n_ctx=256, n_threads=2, logits_all=True, verbose=False,
                        kv_overrides=overrides)
    try:
        llm.eval(llm.tokenize(CHAT_PROMPT.encode(), add_bos=False, special=True))
        return np.array(llm.scores[:llm.n_tokens])
    finally:
        llm.close()


def test_the_clover_patch_fixes_a_vendor_dialect_qwen35moe_at_load_and_as_a_copy(tmp_path):
    shape = qwen35_shape()
    upstream = write_qwen35moe(tmp_path / "upstream.gguf", shape)
    vendor = write_qwen35moe(tmp_path / "vendor.gguf", shape, dialect="vendor")
    overrides, said = load_time_patch(vendor, read_header(vendor))  # what the window and `serve` load with
    assert said == "Clover patch applied at load (2 fixes)"
    assert set(overrides) == {"qwen35moe.rope.dimension_count", "tokenizer.ggml.eos_token_id"}  # no shared count:
    # llama.cpp's qwen35moe loader does not read it
    copy = tmp_path / "patched.gguf"
    patch_file(vendor, copy)
    reference = _logits(upstream)
    assert np.array_equal(_logits(vendor, overrides), reference)
    assert np.array_equal(_logits(copy), reference)
    assert not np.allclose(_logits(vendor), reference)  # unpatched, the rotary width is wrong


@pytest.fixture
def engine(qwen35moe_engine):
    return qwen35moe_engine


def test_the_thinking_switch_reaches_the_template_and_the_reply(engine):
    assert engine.info.thinking_switch and engine.info.tools_in_template
    question = [{"role": "user", "content": "What is the capital of France?"}]
    on = engine.generate(ChatRequest(question, enable_thinking=True, sampling=GREEDY))
    off = engine.generate(ChatRequest(question, enable_thinking=False, sampling=GREEDY))
    assert on.prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert off.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # random weights never close the think block: with thinking on all of it is reasoning, off none
    assert on.reasoning and not on.text
    assert off.text and not off.reasoning


def test_a_forced_xml_tool_call_through_the_qwen_template(engine):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    reply = engine.generate(ChatRequest([{"role": "user", "content": "Weather in Oslo?"}], tools=tools,
                                        tool_choice="get_weather", sampling=GREEDY))
    assert "<tools>" in reply.prompt and '"get_weather"' in reply.prompt  # the template described the tool
    assert reply.raw.startswith("</think>\n\n<tool_call>\n<function=get_weather>\n")
    assert [c.name for c in reply.tool_calls] == ["get_weather"]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "c1", "content": "3 C"}]
    prompt = engine.render_prompt(ChatRequest(history, tools=tools))
    assert "<function=get_weather>\n<parameter=city>\nOslo\n</parameter>" in prompt
    assert "<tool_response>\n3 C\n</tool_response>" in prompt


@pytest.mark.slow
def test_a_scenario_runs_on_the_hybrid(engine, clover_home):
    from app.bench.scenarios import load_scenarios, run_all

    scenario = next(s for s in load_scenarios() if s.id == "capital-australia")
    scenario.max_tokens = 32
    (result,) = run_all(engine, [scenario])
    assert result.seconds > 0 and result.detail and isinstance(result.passed, bool)


@pytest.mark.slow
def test_tune_measures_every_trial_on_the_hybrid(qwen35moe_model):
    from app.machine.tune import Measurer, tune

    result = tune(qwen35moe_model, LoadSettings(n_ctx=512), expert_blocks=[], on_gpu=False, gpu="cpu", build="real",
                  budget_s=30, measurer=Measurer(qwen35moe_model, 512))
    assert result.trials and all(t.error is None for t in result.trials), [(t.settings, t.error) for t in result.trials]
    assert result.best is not None
