"""`bench bfcl` from the command line on real engines: the tiny qwen35moe (Clover's architecture, its
template reads tools: FC mode) with thinking on and off, and SmolLM2 (a template without tools: BFCL's
prompt mode). Each run's verdicts are scored again by BFCL's own code, case by case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.bench.bfcl_store import list_runs
from tests.bench.bfcl_reference import bfcl
from tests.bench.bfcl_rescore import rescore
from tests.helpers.app_process import run_app


def _runs(clover_home: Path):
    return list_runs(clover_home / "data" / "bench" / "bfcl")


def test_bfcl_on_the_tiny_clover_with_thinking_on_and_off(qwen35moe_model, clover_home, tmp_path):
    data = bfcl().data
    out = tmp_path / "cases.json"
    r = run_app("bench", "bfcl", qwen35moe_model, "--quick", "--categories", "simple_python,parallel",
                "--thinking", "both", "--max-tokens", "24", "--data", data, "--json", out, "--ctx", "4096",
                "--csv", tmp_path / "cases.csv", env={"CLOVER_HOME": str(clover_home)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "run 1/2" in r.stdout and "run 2/2" in r.stdout and "Non-live AST" in r.stdout
    runs = _runs(clover_home)
    assert len(runs) == 2 and {run.info.thinking for run in runs} == {True, False}
    for run in runs:
        assert run.info.mode == "fc" and run.state == "complete" and len(run.records) == 10
        compared, differ, errors = rescore(run, data)
        assert (compared, differ, errors) == (10, [], 0)
    for path in (tmp_path / "cases-1.json", tmp_path / "cases-2.json"):
        records = json.loads(path.read_text())
        assert len(records) == 10
        assert set(records[0]) == {"id", "category", "raw", "calls", "valid", "reason"}
    assert len((tmp_path / "cases.csv").read_text().splitlines()) > 20


@pytest.mark.timeout(600)
def test_bfcl_on_smollm2_in_prompt_mode(smollm2, clover_home, tmp_path):
    data = bfcl().data
    r = run_app("bench", "bfcl", smollm2, "--quick", "--categories", "simple_python,irrelevance",
                "--thinking", "off", "--max-tokens", "48", "--data", data, "--json", tmp_path / "cases.json",
                env={"CLOVER_HOME": str(clover_home)}, timeout=560)
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = _runs(clover_home)
    assert run.info.mode == "prompt" and len(run.records) == 10
    assert (rescore(run, data)[1]) == []
    # irrelevance cases where SmolLM2 wrote no Python call are right; some are, at its size
    assert sum(r.valid for r in run.records if r.category == "irrelevance") > 0


def test_bad_input_is_said_and_nothing_runs(clover_home, tmp_path):
    r = run_app("bench", "bfcl", tmp_path / "none.gguf", "--quick", env={"CLOVER_HOME": str(clover_home)})
    assert r.returncode == 2 and "No such file" in r.stderr
    r = run_app("bench", "bfcl", tmp_path, "--categories", "simple,nope", env={"CLOVER_HOME": str(clover_home)})
    assert r.returncode == 2 and "unknown BFCL categories simple, nope" in r.stderr
