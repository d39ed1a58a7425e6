"""Engines for tests and benches: one loaded for the length of a `with` block, and one whose prompt
cache is ready to write to disk."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from app.engine.local import Engine
from app.machine.llama_load import LoadSettings


@contextlib.contextmanager
def loaded_engine(path: Path | str, settings: LoadSettings) -> Iterator[Engine]:
    """An engine with `path` loaded as `settings` say, unloaded when the block ends."""
    engine = Engine()
    engine.load(path, settings)
    try:
        yield engine
    finally:
        engine.unload()


def wait_for_disk_tier(engine: Engine) -> None:
    """Until the prompt cache's disk tier has its folder (the model file's SHA-256, read once in the background)."""
    import time

    cache = engine.prompt_cache
    assert cache is not None
    deadline = time.monotonic() + 30
    while cache.folder is None and time.monotonic() < deadline:  # the model file's SHA-256, read once
        time.sleep(0.02)
    assert cache.folder is not None
