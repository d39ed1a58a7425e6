"""The window's engine thread loads a file as planned (app.engine.planned_load): the PlannedFile the
model controller made reaches the engine whole, nothing is read or planned again on the engine
thread, and a plan that does not fit fails the load in the plan's words."""

from __future__ import annotations

from app.engine.planned_load import fit_problem
from app.model import plan as plan_module
from app.model.plan import PlanRequest, plan_for_file
from app.ui.base.engine_worker import EngineWorker
from tests.engine.test_planned_load import CPU_ONLY, TOO_SMALL, RecordingEngine
from tests.helpers.gguf_models import write_deepseek_moe


def test_the_worker_loads_the_planned_file_without_reading_or_planning_again(qtbot, tmp_path, monkeypatch):
    model = write_deepseek_moe(tmp_path / "moe.gguf")
    planned = plan_for_file(model, CPU_ONLY, PlanRequest(n_ctx=512), use_tune=False)
    assert planned.plan.fits

    def refused(*_args, **_kwargs):
        raise AssertionError("the file was read or planned again")

    import app.gguf.gguf_file

    monkeypatch.setattr(app.gguf.gguf_file, "read_header", refused)
    monkeypatch.setattr(plan_module, "make_plan", refused)
    engine = RecordingEngine()
    worker = EngineWorker(engine)
    with qtbot.waitSignal(worker.loaded, timeout=5000) as blocker:
        worker.load(str(model), planned)
    assert [load[:2] for load in engine.loads] == [(str(model), planned.settings)]
    assert blocker.args[0].n_ctx == 512


def test_a_plan_that_does_not_fit_fails_the_load_in_the_plans_words(qtbot, tmp_path):
    model = write_deepseek_moe(tmp_path / "moe.gguf")
    planned = plan_for_file(model, TOO_SMALL, PlanRequest(n_ctx=512), use_tune=False)
    problem = fit_problem(model, planned)
    assert problem is not None
    engine = RecordingEngine()
    worker = EngineWorker(engine)
    with qtbot.waitSignal(worker.load_failed, timeout=5000) as blocker:
        worker.load(str(model), planned)
    assert blocker.args[0] == f"Could not load the model: {problem}"
    assert engine.loads == []
