"""packaging/gpu_check.sh: its dry run here runs every step of the GPU check in the GPU run's order, so
that a typo cannot waste the one call on a lent GPU; and the summary it ends with says what failed."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

STEPS = ["gpu-info", "install", "doctor", "isolation", "gpu-speed", "batch-costs", "ui-stream", "shapes", "followups",
         "speculative", "tune-24gb", "tune-16gb", "gpu-tests", "mtp", "parallel-serve", "audit"]
OPTIONAL = {"mtp": "mtp.py", "parallel-serve": "parallel_serve.py"}  # benches that run when they exist


@pytest.fixture()
def gpu_check():
    spec = importlib.util.spec_from_file_location("clover_gpu_check", ROOT / "packaging" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_wheel():
    spec = importlib.util.spec_from_file_location("clover_bootstrap", ROOT / "packaging" / "bootstrap.py")
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    return bootstrap.cached_wheel(bootstrap.cpu_build("the test's"))  # the wheel the set-up built here


@pytest.mark.slow
@pytest.mark.timeout(900)  # the script's own 10-min limit speaks first
def test_dry_run_runs_every_step_in_order(tmp_path):
    """The dry run on the CPU wheel: every step of the GPU run, in order; those that need no GPU run with
    tiny budgets, the others have their GPU arguments checked by the module's own parser (about 30 s
    on 2 cores)."""
    if not shutil.which("bash") or not shutil.which("timeout"):
        pytest.skip("needs bash and coreutils' timeout")
    carry = tmp_path / "carry"
    wheel = cpu_wheel()
    if wheel:  # the install step checks the carried files with pip, as if this were the CUDA wheel
        (carry / "cuda-wheel").mkdir(parents=True)
        shutil.copy(wheel, carry / "cuda-wheel" / wheel.name)
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), GPU_CHECK_WORK=str(tmp_path / "work"), GPUCHECK_DIR=str(carry),
               GPU_CHECK_PYTHON=sys.executable)
    env.pop("CLOVER_HOME", None)
    done = subprocess.run(["bash", str(ROOT / "packaging" / "gpu_check.sh"), "run", "--dry-run"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["step"]: r for r in summary["steps"]}
    assert [r["step"] for r in summary["steps"]] == STEPS, tail
    assert summary["failed"] == []
    assert rows["gpu-info"]["status"] == "skipped"
    for name in STEPS[1:]:
        if name in OPTIONAL and not (ROOT / "tests" / "bench" / OPTIONAL[name]).exists():
            assert rows[name]["status"] == "skipped" and "not there yet" in rows[name]["note"]
            continue
        # a bench that ran and missed its target (exit 3) is a figure, not a failed step: the tiny
        # models of the dry run cannot meet the GPU's targets
        assert rows[name]["status"] in ("ok", "missed"), (name, rows[name])
    if wheel:
        assert "pip accepts" in rows["install"]["result"] and wheel.name in rows["install"]["result"]
    assert "CUDA compiled in: no" in rows["doctor"]["result"]
    assert "probe model loaded on every device: yes" in rows["isolation"]["result"]
    assert "importing libstdc++ symbols: none" in rows["isolation"]["result"]
    assert "skipped" in rows["gpu-tests"]["result"]  # no GPU here: collected, then skipped with the reason
    for name in ("gpu-speed", "followups", "speculative", "tune-24gb", "tune-16gb"):
        assert "arguments checked" in rows[name]["note"], name
    assert "exact 2 of 2" in rows["speculative"]["result"]
    # the tiny form of the batch-cost step: ratios measured, the drafting figures labelled as expected
    assert "4 slots" in rows["batch-costs"]["result"] and "expected (not measured)" in rows["batch-costs"]["result"]
    assert "worst event-loop stall" in rows["ui-stream"]["result"]  # Qt is here (not on the GPU image)
    assert rows["tune-16gb"]["result"].startswith("chosen:")
    assert "every package the steps imported" in rows["audit"]["result"]
    table = (out / "summary.txt").read_text()
    assert "| step | status |" in table and "all ok or skipped" in table
    assert (out / "logs.tar.gz").stat().st_size > 0


def test_summary_says_which_steps_failed(gpu_check, tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "logs").mkdir(parents=True)
    (work / "steps.tsv").write_text("doctor\tFAILED(1)\t3\t4\t30\t\n"
                                    "gpu-tests\tFAILED(1)\t40\t30\t75\t\n"
                                    "tune-24gb\ttimeout\t85\t70\t85\t\n"
                                    "parallel-serve\tskipped\t0\t45\t60\tnot there yet\n")
    # doctor exits 1 when a section fails; on the GPU machine only Qt (no PySide6) is expected to
    (work / "logs" / "doctor.log").write_text("[Qt]\n  FAILED: PackageNotFoundError: PySide6-Essentials\n"
                                              "[llama.cpp]\n  llama-cpp-python 0.3.36; CUDA compiled in: yes\n")
    (work / "logs" / "gpu-tests.log").write_text("FAILED tests/machine/test_gpu_cuda.py::test_x\n"
                                                 "1 failed, 2 passed in 40s\n")
    assert gpu_check.summary(work, out) == 1
    rows = {r["step"]: r for r in json.loads((out / "summary.json").read_text())["steps"]}
    assert rows["doctor"]["status"] == "ok" and "PySide6" in rows["doctor"]["note"]
    assert rows["gpu-tests"]["result"] == "1 failed, 2 passed in 40s"
    text = (out / "summary.txt").read_text()
    assert "not ok: gpu-tests, tune-24gb" in text
    assert "| parallel-serve | skipped | 0 | 45 | 60 | not there yet |" in text

    (work / "logs" / "doctor.log").write_text("[Qt]\n  FAILED: x\n[NVIDIA GPU]\n  FAILED: NVMLError\n")
    assert gpu_check.summary(work, out) == 1
    rows = {r["step"]: r for r in json.loads((out / "summary.json").read_text())["steps"]}
    assert rows["doctor"]["status"] == "FAILED(1)"  # more than Qt failed


def test_audit_names_a_package_the_gpu_machine_lacks(gpu_check, tmp_path, capsys):
    imports = tmp_path / "imports.txt"
    imports.write_text("os json numpy jsonschema rpds app tests PySide6\n")
    assert gpu_check.audit(imports, tmp_path / "no-wheels") == 0  # numpy: image; jsonschema, rpds: carried
    gpu_check.CARRIED = tuple(n for n in gpu_check.CARRIED if n != "rpds-py")
    assert gpu_check.audit(imports, tmp_path / "no-wheels") == 1
    assert "not in the GPU machine's image and not carried: rpds-py" in capsys.readouterr().out


def test_argcheck_stops_after_the_modules_own_parser(gpu_check, capsys):
    assert gpu_check.argcheck("tests.bench.followups", ["--tokens", "600", "--turns", "3"]) == 0
    assert "arguments accepted" in capsys.readouterr().out
    assert gpu_check.argcheck("tests.bench.followups", ["--tokenz", "600"]) == 2  # argparse's usage error


def test_size_refuses_over_the_carry_limit_and_says_why(tmp_path):
    (tmp_path / "cuda-wheel").mkdir()
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "gguf-0.19.0-py3-none-any.whl").write_bytes(b"x" * 100_000)
    wheel = tmp_path / "cuda-wheel" / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    env = dict(os.environ, GPUCHECK_DIR=str(tmp_path))
    size = ["bash", str(ROOT / "packaging" / "gpu_check.sh"), "size"]
    with open(wheel, "wb") as f:
        f.truncate(40 * 1024 * 1024)
    done = subprocess.run(size, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "40.1 MiB (limit 60 MiB)" in done.stdout, done.stdout
    with open(wheel, "wb") as f:
        f.truncate(61 * 1024 * 1024)
    done = subprocess.run(size, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout
    assert "refused: " in done.stdout and "over the 60 MiB limit" in done.stdout
    assert "61.00 MiB  cuda-wheel/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl" in done.stdout


@pytest.mark.slow  # loads the CPU wheel's libraries in a subprocess
def test_loadcheck_refuses_a_wheel_that_is_not_the_slim_one(gpu_check, capsys):
    """prepare loads the wheel here before carrying it; the CPU wheel (versioned copies, no CUDA module)
    must not pass for the slim CUDA one."""
    wheel = cpu_wheel()
    if not wheel:
        pytest.skip("no cached CPU wheel here")
    assert gpu_check.loadcheck(wheel) == 1
    out = capsys.readouterr().out
    assert "CPU variant" in out  # it did load, on this CPU
    assert "FAILED: no libggml-cuda.so in it" in out and "FAILED: versioned copies mapped" in out
