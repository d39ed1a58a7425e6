"""One thinking control for every API (issue 38, item 3): each API's own field maps onto off, on, or
on with a budget in reasoning tokens, and a budget reaches the engine, which forces the end of
thinking past it (tests/engine/test_thinking_budget.py)."""

from __future__ import annotations

import anthropic
import pytest

from app.serve.anthropic_messages import MessagesSurface
from app.serve.openai_responses import ResponsesSurface
from app.serve.response_store import ResponseStore
from app.serve.schema import BadRequest, parse_request

HI = [{"role": "user", "content": "Hi"}]


def chat(**body):
    request, _ = parse_request({"messages": HI, **body})
    return request.enable_thinking, request.thinking_budget


def messages(**body):
    request = MessagesSurface({"max_tokens": 100, "messages": HI, **body}).request
    return request.enable_thinking, request.thinking_budget


def responses(**body):
    request = ResponsesSurface({"input": "Hi", **body}, ResponseStore()).request
    return request.enable_thinking, request.thinking_budget


def test_each_apis_field_maps_onto_the_one_control():
    assert chat() == (None, None)  # nothing said: the chat template's own default
    assert chat(chat_template_kwargs={"enable_thinking": False}) == (False, None)
    assert chat(reasoning_effort="none") == (False, None) and chat(reasoning_effort="minimal") == (False, None)
    assert chat(reasoning_effort="low") == (True, 1024) and chat(reasoning_effort="medium") == (True, 4096)
    assert chat(reasoning_effort="high") == (True, 16384) and chat(reasoning_effort="xhigh") == (True, None)
    assert chat(reasoning_effort="high", chat_template_kwargs={"enable_thinking": True}) == (True, 16384)
    assert messages() == (False, None)  # Anthropic's default: no extended thinking
    assert messages(thinking={"type": "disabled"}, output_config={"effort": "max"}) == (False, None)
    assert messages(thinking={"type": "enabled", "budget_tokens": 2048}) == (True, 2048)
    assert messages(thinking={"type": "adaptive"}) == (True, 16384)  # effort high, Anthropic's default
    assert messages(thinking={"type": "adaptive"}, output_config={"effort": "low"}) == (True, 1024)
    omitted = {"type": "adaptive", "display": "omitted"}
    assert messages(thinking=omitted, output_config={"effort": "max"}) == (True, None)
    assert responses() == (None, None)
    assert responses(reasoning={"effort": "medium", "summary": "auto"}) == (True, 4096)
    assert responses(reasoning={"effort": "none"}) == (False, None)


@pytest.mark.parametrize("parse, body, says", [
    (chat, {"reasoning_effort": "huge"}, "reasoning_effort"),
    (chat, {"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}}, "disagree"),
    (messages, {"thinking": {"type": "enabled", "budget_tokens": -1}}, "budget_tokens"),
    (messages, {"thinking": {"type": "sometimes"}}, "thinking"),
    (messages, {"thinking": {"type": "adaptive"}, "output_config": {"effort": "huge"}}, "effort"),
    (responses, {"reasoning": {"effort": "huge"}}, "reasoning.effort"),
])
def test_unknown_words_are_a_400_naming_the_field(parse, body, says):
    with pytest.raises(BadRequest, match=says):
        parse(**body)


def test_a_budget_over_the_anthropic_sdk_ends_the_thinking(qwen35moe_engine, serve):
    """The tiny Clover (random weights) thinks until it is stopped: 20 tokens, then the answer."""
    s = serve(qwen35moe_engine)
    c = anthropic.Anthropic(base_url=f"http://127.0.0.1:{s.port}", api_key="x", max_retries=0, timeout=120)
    r = c.messages.create(model="m", max_tokens=60, messages=HI, thinking={"type": "enabled", "budget_tokens": 20},
                          extra_body={"temperature": 0})
    assert [b.type for b in r.content] == ["thinking", "text"] and r.content[0].thinking
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 60
