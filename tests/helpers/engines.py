"""Engines for tests and benches: one loaded for the length of a `with` block."""

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
