"""The engine's contract: what every engine takes and gives (requests, sampling parameters,
replies and their stats, the loaded model's facts, errors) and the interface the local llama.cpp
engine, the hosted one, the remote OpenAI-compatible one and the test doubles implement. Everything
that takes an engine (the window's worker, the local server, the scenario bench, compare) is typed
against `ChatEngine`. No Qt, no llama.cpp.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from app.base.settings import BY_KEY

if TYPE_CHECKING:
    from app.engine.tool_calls import ToolCall
    from app.machine.llama_load import LoadSettings

APP = ""  # the client name of the app's own requests (the window's chat, benches): its reserved slot
Event = Callable[[str, str], None]  # (kind: one of app.engine.reply_pieces, text)


class AppReplies:
    """The app's own replies under way in an engine (the window's chat, a bench: client APP). The local
    server's line counts them, so that a client waiting for a slot the window holds hears its place in
    line (app/serve/flow.py) instead of waiting unseen inside the engine."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    @contextmanager
    def during(self, request: ChatRequest) -> Iterator[None]:
        if request.client != APP:
            yield
            return
        with self._lock:
            self.count += 1
        try:
            yield
        finally:
            with self._lock:
                self.count -= 1


class EngineError(Exception):
    pass


class ContextOverflow(EngineError):
    """A prompt longer than the context: both numbers, for a server to say in its own words."""

    def __init__(self, n: int, n_ctx: int, at_least: bool = False) -> None:
        super().__init__(f"the conversation is {'at least ' if at_least else ''}{n:,} tokens, more than the "
                         f"{n_ctx:,}-token context; start a new chat or load the model with a longer context")
        self.n, self.n_ctx, self.at_least = n, n_ctx, at_least


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = BY_KEY["sampling.temperature"].default
    top_p: float = BY_KEY["sampling.top_p"].default
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    max_tokens: int = BY_KEY["sampling.max_tokens"].default
    stop: tuple[str, ...] = ()  # the reply ends before the first of these strings
    seed: int | None = None  # None: a random seed for each reply
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit), as OpenAI's logit_bias


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    enable_thinking: bool | None = True  # None: left undefined for the template (an API client sent none)
    tools: list[dict[str, Any]] | None = None  # OpenAI-style function definitions
    sampling: SamplingParams = field(default_factory=SamplingParams)
    json_schema: dict[str, Any] | None = None  # structured output: generation constrained to this schema
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # other chat template variables
    tool_choice: str | None = None  # None: the model decides; "required" or a tool's name: a call must be made
    logprobs: int | None = None  # report each token's log-probability, with this many alternatives
    client: str = APP  # who asks: the app itself (its reserved slot) or "api" (the local server's clients)
    thinking_budget: int | None = None  # reasoning tokens before the end of thinking is forced (None: no limit)
    keep_cache: bool = False  # the client marked its prefixes to keep (cache_control, prompt_cache_key)


@dataclass
class ReplyStats:
    prompt_tokens: int = 0  # tokens in the rendered prompt
    prompt_evaluated: int = 0  # of those, evaluated now (the rest reused from the cache)
    prompt_restored: int = 0  # of the reused ones, those restored from the prompt cache (RAM or disk)
    prompt_seconds: float = 0.0
    ttft_seconds: float = 0.0  # from the request to the first generated token
    generated_tokens: int = 0
    eval_tokens: int = 0  # generated tokens llama.cpp evaluated (its counters: the speed it reports)
    eval_seconds: float = 0.0
    wall_seconds: float = 0.0  # first to last generated token, as the user sees it
    stop_reason: str = ""  # "end" (end-of-generation token), "length", "stopped"
    drafted: int = 0  # speculative decoding: draft tokens verified
    accepted: int = 0  # of those, kept (each one a decode saved)
    stop_sequence: str = ""  # the request's stop string that ended the reply ("" when none did)
    reasoning_tokens: int = 0  # of the generated tokens, those written while the reply was thinking

    @property
    def prompt_tps(self) -> float:
        return self.prompt_evaluated / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def generation_tps(self) -> float:
        """llama.cpp's own figure (evaluated tokens per second of evaluation), else the wall clock."""
        if self.eval_tokens > 0 and self.eval_seconds > 0:
            return self.eval_tokens / self.eval_seconds
        return self.wall_tps

    @property
    def wall_tps(self) -> float:
        return (self.generated_tokens - 1) / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(prompt_tps=self.prompt_tps, generation_tps=self.generation_tps, wall_tps=self.wall_tps)
        return d


@dataclass
class Reply:
    text: str  # the answer, without tool-call blocks
    reasoning: str
    raw: str  # everything generated, tags included
    prompt: str
    stats: ReplyStats
    tool_calls: list[ToolCall] = field(default_factory=list)  # validated against the request's tools
    json_value: Any = None  # structured output, parsed
    json_errors: list[str] = field(default_factory=list)  # schema violations (empty: valid)
    logprobs: list[dict[str, Any]] | None = None  # OpenAI's shape: token, logprob, bytes, top_logprobs


@dataclass(frozen=True)
class ModelInfo:
    path: str
    name: str
    arch: str
    n_ctx: int
    chat_template_from_model: bool
    thinking_switch: bool  # the template reacts to enable_thinking
    settings: LoadSettings
    tools_in_template: bool = True  # the template reads `tools` (else offered tools never reach the model)
    parallel: int = 1  # replies written at once (parallel slots), sharing n_ctx (one pool) unless partitioned
    n_vocab: int = 0  # tokens in the model's vocabulary (0: unknown)
    drafting: str = ""  # speculative decoding as loaded, in words ("off on this machine: ..." where auto chose off)
    template_note: str = ""  # how the chat format was chosen where the file has none (or the user chose), in words


@runtime_checkable
class ChatEngine(Protocol):
    kind: str  # "local", "remote" or a double's name
    info: ModelInfo | None

    @property
    def loaded(self) -> bool: ...

    def load(self, path: str | Path, settings: LoadSettings,
             progress: Callable[[float], bool] | None = None) -> ModelInfo: ...

    def generate(self, request: ChatRequest, on_event: Callable[[str, str], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 on_logprob: Callable[[dict[str, Any]], None] | None = None, prepared: Any = None) -> Reply: ...
    # prepared: the request's prompt as the engine made it beforehand (the local engine's `prepare`,
    # for a server that checked the request): not rendered or tokenized again. Engines without
    # `prepare` are never given one.

    def count_tokens(self, request: ChatRequest) -> int: ...

    def unload(self) -> None: ...
