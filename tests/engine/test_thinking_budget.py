"""A thinking budget (issue 38, item 3): past the budget, the engine writes the end of thinking for
the model and the reply goes on as the answer, in one sequence and in parallel slots. The tiny
Clover has random weights and, greedy, never ends its thinking by itself within these limits."""

from __future__ import annotations

import pytest

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings

GREEDY = SamplingParams(temperature=0.0, max_tokens=60, seed=1)
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def slots_engine(qwen35moe_model):
    engine = Engine()
    engine.load(qwen35moe_model, LoadSettings(n_ctx=2048, n_outputs_max=1, n_threads=2, parallel=2))
    yield engine
    engine.unload()


@pytest.mark.parametrize("which", ["one sequence", "slots"])
def test_past_the_budget_the_end_of_thinking_is_forced(which, qwen35moe_engine, slots_engine):
    engine = qwen35moe_engine if which == "one sequence" else slots_engine
    free = engine.generate(ChatRequest(HI, enable_thinking=True, sampling=GREEDY))
    assert free.stats.reasoning_tokens == 60 and "</think>" not in free.raw and not free.text  # thinks throughout
    events: list[tuple[str, str]] = []
    capped = engine.generate(ChatRequest(HI, enable_thinking=True, sampling=GREEDY, thinking_budget=20),
                             on_event=lambda kind, text: events.append((kind, text)))
    assert capped.stats.reasoning_tokens == 20 and capped.stats.generated_tokens == 60
    assert capped.stats.stop_reason == "length" and capped.text
    assert "\n</think>\n\n" in capped.raw and capped.reasoning.strip() == free.reasoning[:len(capped.reasoning.strip())]
    kinds = [k for k, _ in events]
    assert kinds.index("answer") > max(i for i, k in enumerate(kinds) if k == "reasoning")  # reasoning, then answer
    assert capped.stats.prompt_tokens == free.stats.prompt_tokens


def test_a_structured_answer_after_a_forced_end_fits_its_schema(qwen35moe_engine):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    reply = qwen35moe_engine.generate(ChatRequest(HI, enable_thinking=True, sampling=GREEDY, thinking_budget=10,
                                                  json_schema=schema))
    assert reply.stats.reasoning_tokens == 10 and isinstance(reply.json_value, dict) and not reply.json_errors
