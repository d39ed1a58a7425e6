"""Rendering the model's own chat template in a sandbox, with enable_thinking and tools."""

from __future__ import annotations

import pytest

from app.engine.chat_template import ChatTemplate, TemplateError
from tests.helpers.gguf_models import CHATML_TEMPLATE

QWEN_LIKE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
MESSAGES = [{"role": "user", "content": "Is it warmer in Lisbon or in Oslo?"}]


def test_thinking_off_renders_the_empty_think_block():
    t = ChatTemplate(QWEN_LIKE)
    assert t.supports_thinking_switch
    off = t.render(MESSAGES, enable_thinking=False)
    on = t.render(MESSAGES, enable_thinking=True)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n") and "<think>" not in on


def test_tools_reach_the_template_as_json_keeping_unicode():
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Wetter für eine Stadt",
                                             "parameters": {"type": "object",
                                                            "properties": {"city": {"type": "string"}}}}}
    text = ChatTemplate(QWEN_LIKE).render(MESSAGES, tools=[tool])
    assert '"name": "get_weather"' in text and "Wetter für eine Stadt" in text


def test_sandbox_refuses_unsafe_templates():
    t = ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateError):
        t.render(MESSAGES)


def test_raise_exception_and_fallback():
    with pytest.raises(TemplateError, match="no system role"):
        ChatTemplate("{{ raise_exception('no system role') }}").render(MESSAGES)
    fallback = ChatTemplate(None)
    assert fallback.is_fallback and fallback.render(MESSAGES).startswith("<|im_start|>user\n")
    assert ChatTemplate(CHATML_TEMPLATE).render(MESSAGES, enable_thinking=False).endswith("</think>\n\n")


def test_broken_template_is_a_clear_error():
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for x in %}")
