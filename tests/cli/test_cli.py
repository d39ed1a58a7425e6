"""The headless command line, run as a user runs it: `python -m app ...` in a subprocess."""

from __future__ import annotations

import re
import sys

import pytest

from tests.helpers.app_process import run_app


def test_help_lists_commands():
    result = run_app("--help")
    assert result.returncode == 0, result.stderr
    assert "doctor" in result.stdout and "gui" in result.stdout


def test_unknown_command_is_a_clear_error():
    result = run_app("frobnicate")
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr


def test_doctor_prints_real_values(clover_home):
    from app.machine.llama_backend import build_info

    result = run_app("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"Python {sys.version.split()[0]}" in out
    assert re.search(r"PySide6 6\.\d+\.\d+, Qt runtime 6\.\d+\.\d+", out)
    cuda = "yes" if build_info().cuda else "no"
    assert "llama-cpp-python 0.3.36; backends: " in out
    assert f"CUDA compiled in: {cuda}" in out
    assert "system info: CPU : " in out  # llama_print_system_info() verbatim
    assert re.search(r"device CPU \[cpu\]: .+ GiB free", out)
    assert re.search(r"NVML: (ok|nvml-missing|driver-error|no-gpu) - ", out)
    assert f"data    {clover_home / 'data'}" in out
    assert re.search(r"\(\d+\.\d GiB free on its disk\)", out)
    assert "FAILED" not in out


def test_commands_leave_a_trace_in_the_log(clover_home, tmp_path):
    from app.base.logs import log_file

    result = run_app("plan", str(tmp_path / "missing.gguf"))
    assert result.returncode != 0
    log = log_file().read_text(encoding="utf-8")
    assert f"python -m app plan {tmp_path / 'missing.gguf'}" in log


@pytest.mark.parametrize("command", [("serve", "{m}"), ("plan", "{m}"), ("tune", "{m}"), ("patch", "{m}"),
                                     ("bench", "scenarios", "{m}"), ("setup", "{m}"),
                                     ("compare", "{m}", "{m}", "--prompt", "hi")])
def test_a_missing_model_file_is_one_sentence_for_every_command_that_takes_one(clover_home, tmp_path, command):
    missing = tmp_path / "missing.gguf"
    result = run_app(*(a.format(m=missing) for a in command), timeout=120)
    said = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, said
    assert said == f"error: {missing}: No such file or directory", said  # one line: the path once, no Errno


def test_only_is_refused_where_it_would_be_ignored(clover_home):
    """`compare --prompt` runs no scenarios: an --only there used to be dropped without a word."""
    result = run_app("compare", "a.gguf", "b.gguf", "--prompt", "hi", "--only", "capital")
    assert result.returncode == 2
    assert "--only picks scenarios: it goes with --scenarios" in result.stderr


def test_only_names_known_scenarios_for_bench_and_compare_alike():
    from app.bench.scenarios import load_scenarios
    from app.cli.bench_commands import select_scenarios

    suite = load_scenarios()
    first, last = suite[0].id, suite[-1].id
    assert [s.id for s in select_scenarios(suite, f"{last},{first}")] == [first, last]  # the suite's order
    assert select_scenarios(suite, None) == suite
    try:
        select_scenarios(suite, f"{first},no-such-scenario")
    except ValueError as exc:
        assert "unknown scenario(s) no-such-scenario; known: " in str(exc)
    else:
        raise AssertionError("an unknown id was accepted")


def test_exit_codes_keep_their_numbers():
    """docs/command-line.md documents these numbers; the enums name them."""
    from app.cli import ExitCode, HubExit, PatchExit

    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 130]  # 3: mcp, timed out
    assert [int(c) for c in PatchExit] == [0, 1, 2, 3, 130]
    assert [int(c) for c in HubExit] == [0, 1, 2, 3]


def test_one_progress_printer_throttles_percentages_but_never_a_step_or_its_end():
    import io

    from app.cli.common import ProgressPrinter

    out = io.StringIO()
    printer = ProgressPrinter(out, every=60.0)
    printer("download", 0.0, "start")
    printer("download", 0.5, "half")  # within the minute: dropped
    printer("download", None, "a note")  # no fraction: always said
    printer("download", 1.0, "all")  # the end: always said
    printer("verify", 0.2, "next step")
    assert out.getvalue().splitlines() == ["[download ]   0.0% start", "[download ]    ...   a note",
                                           "[download ] done   all", "[verify   ]  20.0% next step"]


def test_only_that_names_nothing_is_an_error_not_all_scenarios():
    import pytest

    from app.bench.scenarios import load_scenarios
    from app.cli.bench_commands import select_scenarios

    with pytest.raises(ValueError, match="names no scenario"):
        select_scenarios(load_scenarios(), " , ")


@pytest.mark.slow
def test_tune_on_a_vendor_dialect_file_measures_every_trial(clover_home, tmp_path):
    """Issue 27: tune used the plan's settings without the load-time patch, so on a file in the Clover
    vendor's dialect every trial failed to load and the command still exited 0."""
    from tests.helpers.gguf_models import write_glm4_moe

    model = write_glm4_moe(tmp_path / "vendor.gguf", dialect="vendor")
    result = run_app("tune", model, "--budget-s", "5", "--tune-ctx", "256", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "chosen:" in result.stdout and "auto failed" not in result.stdout, result.stdout
    # the double's heads are too narrow for a q8_0 cache (llama.cpp refuses the context): that trial alone may fail
    failed = [line for line in result.stdout.splitlines() if "failed" in line]
    assert all("KV q8_0" in line for line in failed), failed


def test_doctor_says_what_the_last_load_chose_for_speculative_decoding(clover_home, smollm2):
    """Under auto a load measures this machine's batch costs and may choose no drafts (issue 39: said in
    the load line and in doctor); doctor loads no model, so it reports the last load's choice."""
    from app.engine.local import Engine
    from app.machine.llama_load import LoadSettings

    before = run_app("doctor")
    assert "[Speculative decoding]" in before.stdout and "no model loaded yet" in before.stdout
    engine = Engine()
    try:
        info = engine.load(smollm2, LoadSettings(n_ctx=1024, n_threads=2, speculative="auto"))
    finally:
        engine.unload()
    assert info.drafting.startswith(("n-gram drafts pay here from ", "off on this machine: "))
    after = run_app("doctor")
    assert after.returncode == 0, after.stdout + after.stderr
    assert re.search(r"last load \(SmolLM2-135M-Instruct\.Q4_1\.gguf, \d{4}-\d\d-\d\d \d\d:\d\d, speculative "
                     r"auto\): " + re.escape(info.drafting), after.stdout), after.stdout
