"""Render a model's own chat template (from its GGUF) with Jinja2 in a sandbox. No Qt.

llama-cpp-python's chat formatter does not pass `enable_thinking` (nor arbitrary template
variables), so the engine renders the prompt itself, the way Hugging Face's `apply_chat_template`
does: an immutable sandbox (a template is code from the model file), `trim_blocks` and
`lstrip_blocks`, `raise_exception` and `strftime_now` available, `tojson` keeping non-ASCII text.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class TemplateError(Exception):
    pass


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source or CHATML
        self.is_fallback = source is None
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        try:
            self._template = env.from_string(self.source)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the model's chat template does not compile: {exc}") from None
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: list[dict[str, Any]], *, enable_thinking: bool | None = True,
               tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool = True,
               extra: dict[str, Any] | None = None) -> str:
        """The prompt. `enable_thinking=None` leaves the variable undefined, as a client that does not
        send it expects (templates differ in what undefined means); `extra` are other template
        variables (`preserve_thinking`, ...)."""
        variables: dict[str, Any] = dict(extra or {})
        variables.update(messages=messages, tools=tools or None, add_generation_prompt=add_generation_prompt,
                         bos_token=self.bos_token, eos_token=self.eos_token)
        if enable_thinking is not None:
            variables["enable_thinking"] = enable_thinking
        try:
            return self._template.render(**variables)
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the model's chat template failed: {exc}") from None
        except Exception as exc:  # a template is code: a bad message shape can raise anything in it
            raise TemplateError(f"the model's chat template failed on these messages: "
                                f"{type(exc).__name__}: {exc}") from None

    @property
    def xml_tool_calls(self) -> bool:
        """Qwen3.5/3.6-style calls (<function=NAME><parameter=...>) rather than JSON in <tool_call>."""
        return "<function=" in self.source

    @property
    def tagged_tool_calls(self) -> bool:
        return "<tool_call>" in self.source

    @property
    def supports_thinking_switch(self) -> bool:
        return "enable_thinking" in self.source

    @property
    def supports_tools(self) -> bool:
        """Whether the template reads `tools` at all: one that does not drops offered tools silently."""
        return "tools" in self.source
