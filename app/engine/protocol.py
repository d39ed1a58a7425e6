"""The interface every engine implements: the local llama.cpp one, a remote OpenAI-compatible
server, and the test doubles. Everything that takes an engine (the window's worker, the local
server, the scenario bench, compare) is typed against this Protocol. No Qt."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from app.engine.local import ChatRequest, ModelInfo, Reply
    from app.machine.llama_load import LoadSettings


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
