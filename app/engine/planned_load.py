"""Load a file as planned: the one way from a `PlannedFile` to a loaded engine. No Qt.

The window, `serve`, `bench scenarios` and `compare` each hold the `PlannedFile` they made (or the
set-up handed them: its header read and its plan made once, a load-time patch already in its settings)
and load from it: the file is refused in the same words when the plan does not fit, and loaded with the
plan's settings, its slots included. Tune's trial loads (app.machine.tune, app.engine.tune_replies)
load settings a trial asks for, not a plan's, and stay their own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.engine.contract import ChatEngine, EngineError, ModelInfo
from app.model.plan import PlannedFile


def fit_problem(path: str | Path, planned: PlannedFile) -> str | None:
    """Why the file cannot be loaded as planned, in words a user can act on; None when it fits."""
    plan = planned.plan
    if plan.fits:
        return None
    fix = f" To fit: {'; '.join(plan.suggestions)}." if plan.suggestions else ""
    return f"{Path(path).name} does not fit this machine. {plan.reason}{fix}"


def load_as_planned(engine: ChatEngine, path: str | Path, planned: PlannedFile,
                    progress: Callable[[float], bool] | None = None) -> ModelInfo:
    """Load `path` into `engine` with `planned`'s settings; nothing is read or planned again.
    `progress` gets the fraction loaded and cancels the load by answering False.
    Raises EngineError (the plan does not fit, or the load failed)."""
    problem = fit_problem(path, planned)
    if problem is not None:
        raise EngineError(problem)
    return engine.load(path, planned.settings, progress=progress)
