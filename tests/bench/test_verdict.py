"""The benches' targets: a MISS makes the bench's command exit 3 (not 1: a traceback's), and the figures come last."""

from __future__ import annotations

import pytest

from tests.bench.verdict import MISS_EXIT, Verdicts


def test_a_miss_exits_three_and_the_figures_are_said_last(capsys):
    v = Verdicts()
    assert v.check("engine / llama-bench", 0.993, True, ">= 0.95") == "PASS"
    assert v.check("4 slots / one at a time", 1.21, 1.21 >= 1.4, ">= 1.4", "{:.2f}") == "MISS"
    assert v.finish() == MISS_EXIT
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "MISS: 4 slots / one at a time"
    assert "1.21  (target >= 1.4)  MISS" in out[-2] and "0.993  (target >= 0.95)  PASS" in out[-3]


@pytest.mark.parametrize("rows", [0, 2])
def test_all_met_exits_zero(rows, capsys):
    v = Verdicts()
    for i in range(rows):
        v.check(f"figure {i}", 1.0, True, ">= 0.9")
    assert v.finish() == 0
    if rows:
        assert capsys.readouterr().out.strip().endswith("all targets met")
