"""A bench's `--docs`: its figures replace their marked block in docs/benchmarks.md, and only that;
a page without the block is refused, never appended to."""

from __future__ import annotations

import argparse
import datetime

import pytest

from tests.bench import docs_table
from tests.bench.docs_table import MissingBlock, markers, replace_block, verdicts_table, write_verdicts
from tests.bench.verdict import Verdicts

PAGE = """# Benchmarks

<!-- bench:engine_speed -->
an old table
<!-- /bench:engine_speed -->

<!-- bench:speculative -->
kept as it is
<!-- /bench:speculative -->
"""


def test_a_block_is_replaced_and_nothing_else():
    out = replace_block(PAGE, "engine_speed", "| figure |\n| --- |\n")
    assert "an old table" not in out
    assert "<!-- bench:engine_speed -->\n| figure |\n| --- |\n<!-- /bench:engine_speed -->" in out
    assert out.replace("| figure |\n| --- |", "an old table") == PAGE  # the rest of the page as it was
    assert replace_block(out, "engine_speed", "an old table") == PAGE  # and again: a run replaces, not adds


@pytest.mark.parametrize("page", [PAGE.replace("<!-- bench:engine_speed -->\n", ""),
                                  PAGE.replace("<!-- /bench:engine_speed -->", ""),
                                  PAGE + "<!-- bench:engine_speed -->\n<!-- /bench:engine_speed -->\n",
                                  "<!-- /bench:engine_speed -->\n<!-- bench:engine_speed -->\n"])
def test_a_missing_or_doubled_block_is_refused(page):
    with pytest.raises(MissingBlock):
        replace_block(page, "engine_speed", "x")
    with pytest.raises(MissingBlock):
        replace_block(PAGE, "parallel_serve", "x")


def test_the_table_says_what_was_measured_where_and_when():
    v = Verdicts()
    v.check("engine / llama-bench", 0.993, True, ">= 0.95")
    v.check("4 at once | one at a time", 1.21, False, ">= 1.4", "{:.2f}")
    table = verdicts_table(v, "python -m tests.bench.engine_speed --docs", when=datetime.date(2026, 12, 7),
                           where="AMD EPYC, 2 cores").splitlines()
    assert table[0] == "Written by `python -m tests.bench.engine_speed --docs` on 2026-12-07 (AMD EPYC, 2 cores)."
    assert table[-2:] == ["| engine / llama-bench | 0.993 | >= 0.95 | PASS |",
                          "| 4 at once / one at a time | 1.21 | >= 1.4 | MISS |"]


def test_the_flag_writes_the_page_and_without_it_nothing_is_written(tmp_path, capsys):
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE)
    v = Verdicts()
    v.check("engine / raw", 0.986, True, ">= 0.97")
    parser = argparse.ArgumentParser()
    docs_table.add_docs_flag(parser)
    write_verdicts("engine_speed", v, parser.parse_args([]), page)
    assert page.read_text() == PAGE
    write_verdicts("engine_speed", v, parser.parse_args(["--docs"]), page)
    text = page.read_text()
    assert "| engine / raw | 0.986 | >= 0.97 | PASS |" in text and "an old table" not in text
    assert "kept as it is" in text and "block engine_speed" in capsys.readouterr().out


def test_the_real_page_has_a_block_for_every_bench_that_writes_one():
    text = docs_table.PAGE.read_text()
    for name in ("engine_speed", "parallel_serve", "speculative"):
        start, end = markers(name)
        assert text.count(start) == 1 and text.count(end) == 1, name
        source = (docs_table.PAGE.parents[1] / "tests" / "bench" / f"{name}.py").read_text()
        assert f'write_verdicts("{name}", verdicts, args)' in source and "add_docs_flag(" in source, name


def test_the_gpu_checks_returned_summary_is_written_into_its_page(tmp_path):
    import importlib.util

    script = docs_table.PAGE.parents[1] / "packaging" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", script)
    assert spec is not None and spec.loader is not None
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    summary = tmp_path / "summary.txt"
    summary.write_text("gpu: NVIDIA H200\n\n| step | status |\n| --- | --- |\n| doctor | ok |\n\n1 steps in 3 s\n")
    page = tmp_path / "gpu-check.md"
    page.write_text("# GPU check\n\n<!-- bench:gpu_check -->\nold\n<!-- /bench:gpu_check -->\n")
    assert gpu_check.docs(summary, page) == 0
    assert page.read_text() == ("# GPU check\n\n<!-- bench:gpu_check -->\n" + summary.read_text().strip()
                                + "\n<!-- /bench:gpu_check -->\n")
    assert "<!-- bench:gpu_check -->" in (docs_table.PAGE.parent / "gpu-check.md").read_text()
