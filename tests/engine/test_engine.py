"""The engine on real models: streaming, stats, stop, context limits, load progress."""

from __future__ import annotations

import pytest

from app.engine.contract import ChatRequest, EngineError, SamplingParams
from app.engine.local import Engine
from app.engine.read_plan import ReadPlan
from app.machine.llama_load import LoadSettings
from tests.helpers.gguf_models import write_deepseek_moe

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
GREEDY = SamplingParams(temperature=0.0, max_tokens=64)
CHUNK = 16  # n_batch: a prompt is read in pieces of at most this from each turn start


@pytest.fixture(scope="module")
def engine(smollm2):
    e = Engine()
    progress = []
    e.load(smollm2, LoadSettings(n_ctx=1024, n_batch=CHUNK, n_ubatch=CHUNK, n_outputs_max=1, n_threads=2),
           progress=lambda f: progress.append(f) or True)
    e.progress_seen = progress
    yield e
    e.unload()


def test_load_reports_progress_and_template(engine):
    assert engine.progress_seen[0] == 0.0 and engine.progress_seen[-1] == 1.0
    assert engine.info.chat_template_from_model and engine.info.n_ctx == 1024


def test_streamed_reply_and_stats(engine):
    events = []
    reply = engine.generate(ChatRequest([SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
                                        sampling=GREEDY), on_event=lambda k, t: events.append((k, t)))
    assert "Paris" in reply.text
    assert "".join(t for k, t in events if k == "answer") == reply.text
    s = reply.stats
    assert s.stop_reason == "end"
    assert s.generated_tokens >= len(events) > 0  # one event per token at most (pieces may merge)
    assert s.prompt_tokens == s.prompt_evaluated > 10 and s.prompt_tps > 0
    assert 0 < s.ttft_seconds < 30 and s.generation_tps > 0
    # llama.cpp's counters are the context's, every slot's: the output speed is the wall clock's
    assert s.eval_tokens == 0 and s.generation_tps == s.wall_tps
    assert reply.prompt.startswith("<|im_start|>system\nYou are a helpful assistant.")


def test_follow_up_reuses_the_cached_prefix(engine):
    first = engine.generate(ChatRequest([SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
                                        sampling=GREEDY))
    follow = engine.generate(ChatRequest([SYSTEM, {"role": "user", "content": "What is the capital of France?"},
                                          {"role": "assistant", "content": first.text},
                                          {"role": "user", "content": "And of Italy?"}], sampling=GREEDY))
    # kept: the prefix up to the follow-up's last read bound (a turn start or a chunk from one) within
    # the first prompt (the reply's tokens, decoded one at a time, are not what a cold read computes)
    tokens = engine.tokenize_prompt(follow.prompt)
    live = engine.tokenize_prompt(first.prompt)
    bounds = engine.slots.plan.bounds(tokens)
    cached = ReadPlan.floor(bounds, len(live))
    assert 0 < cached < len(live) and tokens[cached] == tokens[0]  # the reply's turn start (<|im_start|>)
    assert follow.stats.prompt_evaluated == follow.stats.prompt_tokens - cached


def test_stop_and_length(engine):
    calls = []
    stopped = engine.generate(ChatRequest([{"role": "user", "content": "Tell me a long story."}],
                                          sampling=SamplingParams(temperature=0.8, max_tokens=300)),
                              should_stop=lambda: calls.append(1) or len(calls) >= 3)
    assert stopped.stats.stop_reason == "stopped" and stopped.stats.generated_tokens == 3
    capped = engine.generate(ChatRequest([{"role": "user", "content": "Tell me a long story."}],
                                         sampling=SamplingParams(temperature=0.8, max_tokens=5)))
    assert capped.stats.stop_reason == "length" and capped.stats.generated_tokens == 5


def test_conversation_longer_than_the_context_is_refused(engine):
    with pytest.raises(EngineError, match="more than the 1,024-token context"):
        engine.generate(ChatRequest([{"role": "user", "content": "word " * 2000}]))


def test_missing_file_and_cancelled_load(tmp_path):
    e = Engine()
    with pytest.raises(EngineError, match="not found"):
        e.load(tmp_path / "none.gguf", LoadSettings())
    model = write_deepseek_moe(tmp_path / "m.gguf")
    with pytest.raises(EngineError, match="could not load"):
        e.load(model, LoadSettings(n_ctx=256), progress=lambda f: False)
    assert not e.loaded


def test_generate_without_model():
    with pytest.raises(EngineError, match="no model"):
        Engine().generate(ChatRequest([{"role": "user", "content": "hi"}]))


def test_a_forced_tool_call_is_made_and_is_the_named_tool(tmp_path):
    """tool_choice with a tool's name: the prompt opens that call, so the reply is a call of it, even
    from a model with random weights; 'required' opens a call of any tool."""
    from app.engine.contract import ChatRequest, SamplingParams
    from app.engine.local import Engine
    from app.machine.llama_load import LoadSettings
    from tests.helpers.gguf_models import QWEN_XML_TOOLS_TEMPLATE, write_deepseek_moe

    model = write_deepseek_moe(tmp_path / "xml.gguf", chat_template=QWEN_XML_TOOLS_TEMPLATE)
    engine = Engine()
    engine.load(model, LoadSettings(n_ctx=512, n_outputs_max=1))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    try:
        base = ChatRequest([{"role": "user", "content": "Weather in Oslo?"}], tools=tools,
                           sampling=SamplingParams(temperature=0.0, max_tokens=12))
        free = engine.generate(base)
        forced = engine.generate(ChatRequest(base.messages, tools=tools, sampling=base.sampling,
                                             tool_choice="get_weather"))
        assert forced.prompt.endswith("<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n")
        assert forced.tool_calls and forced.tool_calls[0].name == "get_weather"
        assert forced.raw.startswith("<tool_call>\n<function=get_weather>\n")
        assert not free.prompt.endswith("<tool_call>\n")  # without a choice nothing is forced
        required = engine.generate(ChatRequest(base.messages, tools=tools, sampling=base.sampling,
                                               tool_choice="required"))
        assert required.prompt.endswith("<tool_call>\n") and required.tool_calls
    finally:
        engine.unload()
