"""Load a file as planned: the PlannedFile's settings reach the engine whole, nothing is read or planned
again, and a plan that does not fit is refused in words before anything loads."""

from __future__ import annotations

import pytest

from app.engine.contract import EngineError
from app.engine.local import Engine
from app.engine.planned_load import fit_problem, load_as_planned
from app.machine.gpu import probe_with
from app.machine.snapshot import Machine
from app.machine.system_memory import SystemMemory
from app.model import plan as plan_module
from app.model.plan import PlanRequest, plan_for_file
from tests.helpers.fakes import FakeNVML, ScriptedEngine
from tests.helpers.gguf_models import ModelShape, write_glm4_moe

GiB = 1 << 30
CPU_ONLY = Machine(probe_with(FakeNVML([])), SystemMemory(64 * GiB, 56 * GiB))
TOO_SMALL = Machine(probe_with(FakeNVML([])), SystemMemory(4 << 20, 1 << 20))  # 1 MiB free: nothing fits


class RecordingEngine(ScriptedEngine):
    """The engine double, recording what each load was given."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[tuple[str, object, object]] = []

    def load(self, path, settings, progress=None):
        self.loads.append((str(path), settings, progress))
        return super().load(path, settings, progress)


@pytest.fixture(scope="module")
def vendor(tmp_path_factory):
    """A file in a vendor dialect: its plan carries the load-time patch (metadata overrides)."""
    return write_glm4_moe(tmp_path_factory.mktemp("planned") / "clover-vendor.gguf",
                          ModelShape(n_embd=256, n_head=4, n_head_kv=2, n_layer=3, n_ff=512, n_ff_exp=128),
                          dialect="vendor")


def no_second_look(monkeypatch) -> None:
    """From here on, reading a header or making a plan fails the test."""
    def refused(*_args, **_kwargs):
        raise AssertionError("the file was read or planned again")

    import app.gguf.gguf_file

    monkeypatch.setattr(app.gguf.gguf_file, "read_header", refused)
    monkeypatch.setattr(plan_module, "make_plan", refused)


def test_the_planned_settings_reach_the_engine_and_nothing_is_planned_again(vendor, monkeypatch):
    planned = plan_for_file(vendor, CPU_ONLY, PlanRequest(n_ctx=1024), use_tune=False)
    assert planned.plan.fits and planned.overlay and planned.settings.kv_overrides  # patched at load time
    no_second_look(monkeypatch)
    engine = RecordingEngine()

    def progress(fraction: float) -> bool:
        return True

    info = load_as_planned(engine, vendor, planned, progress=progress)
    assert engine.loads == [(str(vendor), planned.settings, progress)]
    assert info.n_ctx == planned.settings.n_ctx == 1024
    assert fit_problem(vendor, planned) is None


def test_a_plan_that_does_not_fit_is_refused_before_anything_loads(vendor):
    planned = plan_for_file(vendor, TOO_SMALL, PlanRequest(n_ctx=1024), use_tune=False)
    assert not planned.plan.fits
    problem = fit_problem(vendor, planned)
    assert problem is not None and problem.startswith("clover-vendor.gguf does not fit this machine.")
    assert planned.plan.reason in problem
    engine = RecordingEngine()
    with pytest.raises(EngineError) as caught:
        load_as_planned(engine, vendor, planned)
    assert str(caught.value) == problem
    assert engine.loads == [] and not engine.loaded


def test_a_real_model_loads_as_planned(moe_model, monkeypatch):
    planned = plan_for_file(moe_model, CPU_ONLY, PlanRequest(n_ctx=512), use_tune=False, threads=2)
    no_second_look(monkeypatch)
    engine = Engine()
    seen: list[float] = []
    try:
        info = load_as_planned(engine, moe_model, planned, progress=lambda f: seen.append(f) or True)
        assert engine.loaded and info.n_ctx == planned.plan.n_ctx == 512
        assert info.parallel == planned.plan.parallel
        assert seen and seen[-1] == pytest.approx(1.0)
    finally:
        engine.unload()
