"""Every user setting, declared once: key, type, default, title, range. Saved as JSON in the config
folder with a schema version and an upgrade step per version (qutebrowser's configdata and
Picard's option upgrades are the model). No Qt.

Sampling settings are kept per model: a model's first load takes the catalog's `recommended`
values (SmolLM2 at temperature 0.2, Clover at 0.6), and what the user changes afterwards is kept
for that model. Everything else is global. Unknown keys in the file are dropped, with a note.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.base.fileio import write_text_atomic
from app.base.paths import app_dirs

log = logging.getLogger(__name__)
SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Option:
    key: str
    type: type
    default: Any
    title: str
    description: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    per_model: bool = False  # kept for each model (sampling)
    hidden: bool = False  # not shown in the settings panel (window state)

    def check(self, value: Any) -> Any:
        """The value converted to this option's type, or ValueError saying why it is not acceptable."""
        if self.type is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.key} must be true or false, not {value!r}")
            return value
        if self.type in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{self.key} must be a number, not {value!r}")
            if self.type is int and float(value) != int(value):
                raise ValueError(f"{self.key} must be a whole number, not {value!r}")
            value = self.type(value)
            if self.minimum is not None and value < self.minimum or self.maximum is not None and value > self.maximum:
                raise ValueError(f"{self.key} must be between {self.minimum} and {self.maximum}, not {value}")
            return value
        if not isinstance(value, str):
            raise ValueError(f"{self.key} must be text, not {value!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.key} must be one of {', '.join(self.choices)}, not {value!r}")
        return value


OPTIONS: tuple[Option, ...] = (
    Option("sampling.temperature", float, 0.7, "Temperature", "Randomness of the next token; 0 is greedy.",
           0.0, 2.0, per_model=True),
    Option("sampling.top_p", float, 0.9, "Top-p", "Sample only from the most likely tokens that add up to this.",
           0.05, 1.0, per_model=True),
    Option("sampling.max_tokens", int, 4096, "Max tokens", "Longest reply, in tokens.", 16, 1 << 20, per_model=True),
    Option("chat.thinking", bool, True, "Thinking", "Let the model reason before it answers.", per_model=True),
    Option("chat.thinking_budget", int, 0, "Thinking budget",
           "Most tokens the model reasons before it answers; past them the end of thinking is written for it "
           "and it answers. 0: no limit.", 0, 1 << 20, per_model=True),
    Option("chat.template", str, "", "Chat template",
           "How a conversation is written for this model: its file's own template, or one of llama.cpp's "
           "built-in ones where the file has none or a wrong one (a file without one gets its architecture's). "
           "Takes effect at the next model load.",
           choices=("", "chatml", "llama3", "llama2", "mistral-v7", "gemma", "phi3", "gpt-oss", "deepseek3",
                    "command-r", "llama4", "granite", "vicuna", "zephyr"), per_model=True),
    Option("chat.system_prompt", str, "You are a helpful assistant.", "System prompt"),
    Option("chat.enter_sends", bool, True, "Enter sends", "Enter sends the message and Shift+Enter starts a new line "
                                                          "(off: the other way round)."),
    Option("chat.highlight_code", bool, True, "Highlight code", "Syntax colours in code blocks."),
    Option("engine.threads", int, 0, "CPU threads", "Threads for generation and prompts; 0: one per physical core.",
           0, 1024),
    Option("engine.speculative", str, "auto", "Speculative decoding",
           "Guess tokens and check the guesses in one batch: the same text, faster. MTP: the model's own "
           "multi-token-prediction head guesses (files that carry one, such as the Qwen3.6 MTP files). "
           "N-grams: guesses from what came before, faster where answers repeat the prompt (code, JSON, "
           "tool arguments). Auto: MTP where the file has a head, else n-grams, on where it pays on this "
           "machine. Takes effect at the next model load.", choices=("auto", "mtp", "ngram", "off")),
    Option("engine.reproducible", bool, True, "Reproducible replies",
           "A reply at temperature 0 is the same, token for token, whatever else the model answers at the same "
           "time and whatever it answered before; costs about a tenth of the speed with several replies at "
           "once (0.89x measured, 2-core CPU, SmolLM2). Each reply gets its own part of the context (a "
           "context's memory per slot: the plan counts it), read in steps of its own, without speculative "
           "decoding. Takes effect at the next model load."),
    Option("cache.ram_mb", int, 0, "Prompt cache in RAM (MB)",
           "Conversation and system-prompt states kept in memory, so that a conversation you switch back to "
           "or a new agent session with the same instructions starts at once. 0: as planned (a quarter of "
           "the RAM the model leaves free, at most 4 GB). Takes effect at the next model load.", 0, 1 << 20),
    Option("cache.disk_gb", int, 10, "Prompt cache on disk (GB)",
           "The same states kept on disk, found again after a restart; the least recently used go first. "
           "0: none on disk. Takes effect at the next model load.", 0, 10_000),
    Option("engine.tune_goal", str, "fastest", "Plan goal", "What the plan favours when it is tuned.",
           choices=("fastest", "longest-context", "balanced")),
    Option("model.reload_last", bool, True, "Load the last model at start"),
    Option("model.last_path", str, "", "Last model", hidden=True),
    Option("server.port", int, 8080, "Local server port", "The next free port is used when this one is taken.",
           1024, 65535),
    Option("server.parallel", int, 0, "Requests at once",
           "How many requests from apps using the local server the model answers at the same time, all in "
           "the model's one context (a lone conversation keeps all of it). 0: automatic, three beside the "
           "chat's own where the memory allows them at no cost, fewer otherwise. Above 1 the chat keeps one "
           "more for itself. Takes effect at the next model load.", 0, 16),
    Option("ui.theme", str, "system", "Theme", "Light, dark, or as the system is.",
           choices=("system", "light", "dark")),
    Option("ui.font_scale", float, 1.0, "Text size", "How large the window's text is, 1 as designed "
           "(Ctrl+= larger, Ctrl+- smaller, Ctrl+0 as designed).", 0.8, 1.6),
    Option("ui.geometry", str, "", "Window geometry", hidden=True),
    Option("ui.state", str, "", "Window layout", hidden=True),
)
BY_KEY = {o.key: o for o in OPTIONS}
# catalog `recommended` names -> option keys
RECOMMENDED_KEYS = {"temperature": "sampling.temperature", "top_p": "sampling.top_p",
                    "max_tokens": "sampling.max_tokens", "thinking": "chat.thinking"}


def _upgrade_1(data: dict) -> dict:
    """Version 1 kept sampling globally under `sampling_*` names; version 2 keeps it per model."""
    values = dict(data.get("values", {}))
    for old, new in (("sampling_temperature", "sampling.temperature"), ("sampling_top_p", "sampling.top_p"),
                     ("max_tokens", "sampling.max_tokens"), ("thinking", "chat.thinking")):
        if old in values:
            values[new] = values.pop(old)
    return {"version": 2, "values": values, "models": {}}


UPGRADES: dict[int, Callable[[dict], dict]] = {1: _upgrade_1}


@dataclass
class Settings:
    path: Path
    values: dict[str, Any] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what loading had to drop or repair

    @classmethod
    def load(cls, path: Path | None = None) -> Settings:
        path = path or app_dirs().config / "settings.json"
        s = cls(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return s
        except (OSError, ValueError) as exc:
            s.notes.append(f"{path} could not be read ({exc}); defaults are used and it is kept as {path.name}.bad")
            try:
                os.replace(path, path.with_name(path.name + ".bad"))
            except OSError:
                pass
            return s
        version = int(data.get("version", 1))
        while version < SCHEMA_VERSION and version in UPGRADES:
            data = UPGRADES[version](data)
            version = int(data["version"])
        s.values = s._clean(data.get("values", {}), "")
        s.models = {m: s._clean(v, f"model {m}: ", per_model_only=True) for m, v in data.get("models", {}).items()}
        return s

    def _clean(self, values: dict, where: str, per_model_only: bool = False) -> dict:
        out = {}
        for key, value in values.items():
            option = BY_KEY.get(key)
            if option is None or (per_model_only and not option.per_model):
                self.notes.append(f"{where}unknown setting {key!r} dropped")
                continue
            try:
                out[key] = option.check(value)
            except ValueError as exc:
                self.notes.append(f"{where}{exc}; the default is used")
        return out

    def get(self, key: str, model: str | None = None) -> Any:
        option = BY_KEY[key]
        if model is not None and option.per_model and key in self.models.get(model, {}):
            return self.models[model][key]
        return self.values.get(key, option.default)

    def set(self, key: str, value: Any, model: str | None = None) -> None:
        option = BY_KEY.get(key)
        if option is None:
            raise KeyError(f"no setting {key!r}")
        value = option.check(value)
        if model is not None and option.per_model:
            self.models.setdefault(model, {})[key] = value
        else:
            self.values[key] = value

    def knows_model(self, model: str) -> bool:
        return model in self.models

    def first_load(self, model: str, recommended: dict[str, Any] | None) -> bool:
        """The first time a model loads, its sampling starts from the catalog's recommended values.
        Returns True when it was the first time."""
        if model in self.models:
            return False
        self.models[model] = {}
        for name, value in (recommended or {}).items():
            key = RECOMMENDED_KEYS.get(name)
            if key is not None:
                try:
                    self.models[model][key] = BY_KEY[key].check(value)
                except ValueError as exc:
                    self.notes.append(f"the catalog's recommended {name}: {exc}")
        return True

    def save(self) -> None:
        write_text_atomic(self.path, json.dumps({"version": SCHEMA_VERSION, "values": self.values,
                                                 "models": self.models}, indent=2, sort_keys=True))

