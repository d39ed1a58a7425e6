"""Tune's speculative check: a short reply through the engine's own scheduler (drafts included), the
path the chat, the local server and the scenario bench use. Lives here because app.machine.tune
sits below the engine."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from app.machine.tune import SPEC_REQUEST, SpecRun

SPEC_CTX = 2048  # the rewrite (1,126 tokens with the tests' tiny vocabulary, ~330 with SmolLM2's) and its reply fit


class EngineReplies:
    """Loads the model in an Engine with the settings asked for (again only when they change) and
    writes SPEC_REQUEST's greedy reply from a cold cache: tokens per second of output, drafts and
    acceptances (app.machine.tune.Replies)."""

    def __init__(self, path: str | Path, n_ctx: int) -> None:
        self.path, self.n_ctx = str(path), n_ctx
        self._engine: Engine | None = None
        self._settings: LoadSettings | None = None

    def __call__(self, settings: LoadSettings) -> SpecRun:
        from app.machine import tune  # SPEC_TOKENS read when called (a test makes it shorter)

        # the sweep may measure in a short context (--tune-ctx); the rewrite needs room for itself
        wanted = replace(settings, n_ctx=max(self.n_ctx, SPEC_CTX), n_batch=max(settings.n_ubatch, 512),
                         n_outputs_max=1)
        if self._engine is None or self._settings != wanted:
            self.close()
            engine = Engine()
            engine.load(self.path, wanted)
            self._engine, self._settings = engine, wanted
        assert self._engine.slots is not None
        self._engine.slots.forget()  # the same prompt work on both sides: a cold read
        request = ChatRequest([{"role": "user", "content": SPEC_REQUEST}], enable_thinking=False,
                              sampling=SamplingParams(temperature=0.0, max_tokens=tune.SPEC_TOKENS, seed=0))
        stats = self._engine.generate(request).stats
        return SpecRun(settings.speculative, stats.wall_tps, stats.generated_tokens, stats.drafted, stats.accepted)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.unload()
            self._engine, self._settings = None, None

