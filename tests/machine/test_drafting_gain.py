"""The expected gain of drafting from measured batch costs and measured acceptance (app/machine/drafting_gain.py)."""

from __future__ import annotations

import json

import pytest

from app.gguf.gguf_file import read_header
from app.gguf.model_facts import facts_from_header
from app.machine.drafting_gain import (
    PROFILE,
    FixedLength,
    Profile,
    VerifyCosts,
    expected_tokens,
    load_measured,
    load_profile,
    mtp_table,
    mtp_tps,
    ngram_lines,
    save_measured,
)
from tests.bench.ngram_acceptance import replay
from tests.helpers.clover_shape import write_clover_shaped

FREE = VerifyCosts({1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 9: 1.0})  # a verify batch as cheap as one token
LINEAR = VerifyCosts({1: 1.0, 2: 2.0})  # n tokens cost n: drafting can never pay


def test_costs_interpolate_between_measured_sizes_and_carry_the_last_slope_beyond():
    costs = VerifyCosts({1: 1.0, 2: 1.1, 4: 1.3, 8: 2.1})
    assert costs.cost(3) == pytest.approx(1.2)
    assert costs.cost(6) == pytest.approx(1.7)
    assert costs.cost(10) == pytest.approx(2.1 + 0.2 * 2)
    assert VerifyCosts({1: 1.0}).cost(3) == 3.0  # only one token measured: no batch discount assumed
    assert VerifyCosts.from_dict(json.loads(json.dumps(costs.to_dict()))) == costs


def test_expected_tokens_is_the_accepted_run_plus_the_models_own_token():
    assert expected_tokens(0.0, 3) == 1.0
    assert expected_tokens(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    assert expected_tokens(1.0, 2) == pytest.approx(3.0, abs=0.01)


def test_a_fixed_length_replay_gives_the_speed_up_at_any_costs():
    # 10 reply tokens: 2 plain steps, 2 verifies of 3 drafted tokens (one held all 3, one held 1)
    run = FixedLength(3, 10, 2, {3: 2}, 6, 4)
    assert run.rate == pytest.approx(4 / 6)
    assert run.speedup(FREE) == pytest.approx(10 / 4)
    assert run.speedup(LINEAR) == pytest.approx(10 / (2 + 2 * 4))


def test_replay_walks_the_engines_lookup_over_a_repeating_reply():
    prompt = [5, 6, 7, 8, 9, 10, 11, 12]
    tokens = prompt + [5, 6, 7, 8, 9, 10, 11, 12, 99]  # the reply copies the prompt, then leaves it
    run = replay(tokens, len(prompt), 4)
    assert run.tokens == len(tokens) - len(prompt) - 1 == 8
    # 6 follows 5 only once: no 2-gram yet, a plain step; then (5, 6) guesses 7-10, all held; then
    # (10, 11) guesses 12 (cut to leave the reply's last token to the model): it holds, then 99
    assert (run.plain_steps, run.verifies, run.drafted, run.accepted) == (1, {4: 1, 1: 1}, 5, 5)
    # every reply token is walked exactly once: kept from a guess, sampled after one, or a plain step
    verifies = sum(run.verifies.values())
    assert run.accepted + verifies + run.plain_steps == run.tokens
    nothing = replay(prompt + [40, 41, 42, 43], len(prompt), 4)
    assert nothing.drafted == 0 and nothing.plain_steps == nothing.tokens == 3


def test_the_profile_picks_the_best_length_and_none_where_no_length_pays():
    runs = {"copy": {1: FixedLength(1, 100, 20, {1: 50}, 50, 30), 4: FixedLength(4, 100, 20, {4: 25}, 100, 55)}}
    profile = Profile(runs, "test")
    assert profile.best("copy", FREE) == (4, pytest.approx(100 / 45))
    assert profile.best("copy", LINEAR) == (0, 1.0)
    assert profile.best("copy", VerifyCosts({1: 1.0, 2: 1.0, 4: 1.0})) == (1, pytest.approx(100 / 70))  # 5 not measured
    lines = ngram_lines(profile, FREE)
    assert lines[0].startswith("n-gram drafting, expected (not measured)")
    assert "2.22x at draft length 4" in lines[1]


def test_mtp_tps_counts_the_heads_steps_and_the_verify():
    costs = VerifyCosts({1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3}, head_step=0.1)
    assert mtp_tps(100.0, 0.8, 1, costs) == pytest.approx(100 * 1.8 / (1.1 + 0.1))
    assert mtp_tps(100.0, 0.8, 3, costs) == pytest.approx(100 * expected_tokens(0.8, 3) / (1.3 + 0.3))
    table = mtp_table(100.0, costs)
    assert table[0].startswith("MTP head, expected (not measured)")
    assert len(table) == 2 + 5 and table[-1].split()[0] == "0.9"
    assert mtp_table(100.0, VerifyCosts({1: 1.0, 2: 1.1}))[-1].split()[2:] == ["-", "-"]  # 3, 4 not measured


def test_the_committed_profile_is_small_and_says_how_it_was_made():
    assert PROFILE.stat().st_size < 8_000
    profile = load_profile()
    assert profile is not None and "tests.bench.ngram_acceptance" in profile.made
    assert {"copy-heavy", "nothing to copy"} <= set(profile.runs)
    for by_k in profile.runs.values():
        assert sorted(by_k) == list(range(1, 9))
        for run in by_k.values():
            assert run.accepted <= run.drafted
            assert run.accepted + sum(run.verifies.values()) + run.plain_steps == run.tokens
    # the copy-heavy rewrite repeats the prompt: its guesses hold more often than the story's
    prose = profile.runs.get("nothing to copy, before its loop", profile.runs["nothing to copy"])
    assert profile.runs["copy-heavy"][4].rate > prose[4].rate


def test_measured_costs_are_kept_per_gpu_and_model_shape(tmp_path, monkeypatch):
    monkeypatch.setenv("CLOVER_HOME", str(tmp_path / "home"))
    facts = facts_from_header(read_header(write_clover_shaped(tmp_path / "a.gguf")))
    costs = VerifyCosts({1: 1.0, 2: 1.02, 4: 1.06}, 0.12, "measured on a test GPU")
    assert load_measured("NVIDIA H200", facts) is None
    save_measured("NVIDIA H200", facts, costs)
    assert load_measured("NVIDIA H200", facts) == costs
    assert load_measured("NVIDIA GeForce RTX 4090", facts) is None
    other = facts_from_header(read_header(write_clover_shaped(tmp_path / "b.gguf", n_blocks=8)))
    assert load_measured("NVIDIA H200", other) is None
    # the same shape in another file (with its MTP block, as the check times it) reads the same costs
    headed = facts_from_header(read_header(write_clover_shaped(tmp_path / "c.gguf", mtp=True)))
    assert load_measured("NVIDIA H200", headed) == costs
