"""A chat format for a model file without `tokenizer.chat_template`: one of llama.cpp's built-in
templates (`llama_chat_apply_template` by name), chosen for the file's architecture, or by the
special tokens its vocabulary holds where the architecture does not say (llama, mistral); ChatML
where nothing matches. A base model (no template, nothing in its name that says instruct or chat)
is named as such. The user may name another template per model (`LoadSettings.chat_template`).
No Qt."""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.engine.chat_template import ChatTemplate, TemplateError
from app.machine.llama_backend import llama

# the architectures whose chat format is one of llama.cpp's built-ins, by their GGUF name
BY_ARCH = {
    "gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma", "gpt-oss": "gpt-oss",
    "phi3": "phi3", "command-r": "command-r", "cohere2": "command-r", "llama4": "llama4",
    "deepseek2": "deepseek3", "chatglm": "chatglm4", "exaone": "exaone3", "exaone4": "exaone4",
    "granite": "granite", "granitemoe": "granite", "hunyuan-moe": "hunyuan-moe", "minicpm": "minicpm",
    "qwen2": "chatml", "qwen2moe": "chatml", "qwen3": "chatml", "qwen3moe": "chatml", "qwen35": "chatml",
    "qwen35moe": "chatml", "smollm3": "chatml",
}
# where the architecture does not tell (llama, mistral...): the built-in whose turn markers the
# vocabulary holds as single tokens, in this order
BY_TOKENS = (("llama3", "<|start_header_id|>"), ("chatml", "<|im_start|>"), ("gemma", "<start_of_turn>"),
             ("phi3", "<|assistant|>"), ("mistral-v7", "[SYSTEM_PROMPT]"), ("llama2", "[INST]"))
CHAT_ONLY = frozenset({"gpt-oss"})  # released only as chat models: no base model to name
_CHAT_WORDS = re.compile(r"instruct|chat|\bit\b|-it\b|sft|dpo|rlhf|assistant|tool", re.IGNORECASE)


@dataclass(frozen=True)
class TemplateChoice:
    name: str  # the built-in's name ("" where the file's own template is used)
    note: str  # one sentence for the load line, the window and serve ("" for the file's own)


def choose(meta: dict[str, Any], has_token: Callable[[str], bool], wanted: str = "") -> TemplateChoice:
    """The template for a file with header `meta`: `wanted` (a built-in name) over everything, else
    the file's own, else the built-in its architecture or vocabulary implies, else ChatML."""
    arch = str(meta.get("general.architecture", "?"))
    if wanted:
        return TemplateChoice(wanted, f"Chat template: llama.cpp's built-in {wanted} template, as chosen in the "
                                      f"settings instead of the file's own.")
    if meta.get("tokenizer.chat_template"):
        return TemplateChoice("", "")
    name = BY_ARCH.get(arch, "")
    what = f"llama.cpp's built-in {name} template (the {arch} architecture's)"
    if not name:
        name, token = next(((n, t) for n, t in BY_TOKENS if has_token(t)), ("", ""))
        what = f"llama.cpp's built-in {name} template (its vocabulary holds {token})"
    if not name:
        name, what = "chatml", "ChatML (nothing in the file points to another)"
    label = " ".join(str(meta.get(k, "")) for k in ("general.name", "general.finetune", "general.basename"))
    if arch not in CHAT_ONLY and not _CHAT_WORDS.search(label):
        return TemplateChoice(name, f"A base model, made to continue text, not to chat: the file has no chat "
                                    f"template and its name says nothing of instruct or chat; replies use {what}.")
    return TemplateChoice(name, f"The file has no chat template: using {what}; another can be picked for this "
                                f"model in the settings.")


class BuiltinTemplate(ChatTemplate):
    """One of llama.cpp's built-in chat formats, rendered by llama.cpp itself. It reads no tools and
    has no thinking switch: the file gave no template that would."""

    def __init__(self, name: str) -> None:  # no Jinja source to compile: llama.cpp renders it
        self.source = ""  # what the properties read: no tool or thinking markers
        self.is_fallback = False
        self.bos_token = self.eos_token = ""
        self.name = name

    def render(self, messages: list[dict[str, Any]], *, enable_thinking: bool | None = True,
               tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool = True,
               extra: dict[str, Any] | None = None) -> str:
        lc = llama().llama_cpp
        texts = [(str(m.get("role", "user")).encode(), _text(m.get("content")).encode()) for m in messages]
        chat = (lc.llama_chat_message * max(len(texts), 1))(*[lc.llama_chat_message(r, c) for r, c in texts])
        size = 2 * sum(len(c) + len(r) for r, c in texts) + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = lc.llama_chat_apply_template(self.name.encode(), chat, len(texts), add_generation_prompt, buf, size)
            if n < 0:
                raise TemplateError(f"llama.cpp has no built-in chat template {self.name!r}")
            if n <= size:
                return buf.raw[:n].decode("utf-8", errors="replace")
            size = n + 1
        raise TemplateError(f"the built-in chat template {self.name!r} did not fit its buffer")


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def builtin_names() -> tuple[str, ...]:
    """Every built-in chat template this llama.cpp knows, by name."""
    lc = llama().llama_cpp
    n = lc.llama_chat_builtin_templates((ctypes.c_char_p * 1)(), 0)
    names = (ctypes.c_char_p * n)()
    lc.llama_chat_builtin_templates(names, n)
    return tuple(sorted(v.decode() for v in names if v))
