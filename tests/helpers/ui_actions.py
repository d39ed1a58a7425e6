"""What UI tests do to a main window again and again, in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_model(qtbot: Any, window: Any, path: str | Path, n_ctx: int = 2048, timeout: int = 120_000) -> Any:
    """Load a model in the window and wait until it is loaded; return its plan."""
    with qtbot.waitSignal(window.model.loaded, timeout=timeout):
        plan = window.model.load(path, n_ctx=n_ctx)
        assert plan is not None
    return plan
