"""Speculative auto decides from the batch costs the GPU check or Tune kept for this GPU and model shape,
where they exist, and says so (issue 56, item 2)."""

from __future__ import annotations

from app.engine.drafting import BatchCosts, auto_drafting, measured_for
from app.machine.drafting_gain import VerifyCosts

CPU_AT_LOAD = BatchCosts([1.0, 1.8, 2.6, 3.4, 4.2])  # what a load times on the 2-core CPU: drafts do not pay
GPU_KEPT = VerifyCosts({1: 1.0, 2: 1.03, 4: 1.08, 8: 1.2}, 0.1, "measured on NVIDIA H200 (clover, 2026-12-07)")


def test_the_loads_own_costs_decide_where_none_were_kept():
    pays, words = auto_drafting(CPU_AT_LOAD, 4)
    assert not pays and words.startswith("off on this machine: a batch of 2 tokens costs 1.80x one")
    assert "from the batch costs" not in words


def test_kept_costs_decide_and_the_note_says_whose_they_are():
    pays, words = auto_drafting(CPU_AT_LOAD, 4, GPU_KEPT)
    assert pays and words.startswith("n-gram drafts pay here from ")
    assert "(from the batch costs measured on NVIDIA H200 (clover, 2026-12-07)" in words
    assert "expected (not measured)" in words and "on copy-heavy work" in words
    dear = VerifyCosts({1: 1.0, 2: 2.0, 4: 4.0}, None, "measured on a slow card")
    pays, words = auto_drafting(BatchCosts([1.0, 1.01, 1.02, 1.03, 1.04]), 4, dear)
    assert not pays and "a batch of 2 tokens costs 2.00x one" in words and "measured on a slow card" in words


def test_nothing_is_read_where_no_costs_were_kept(tmp_path):
    assert measured_for(tmp_path / "no-such-file.gguf", 0) is None  # the test's CLOVER_HOME keeps none
