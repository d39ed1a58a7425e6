"""The sampler: a reply's chain picks what llama.cpp's chain picks, with fewer candidates where that
changes nothing, and the seed is the reply's."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.sampler import sampling_shortcut, top_k_candidates


def _kth_or_better(logits: np.ndarray, k: int) -> np.ndarray:
    kth = np.sort(logits)[-k]
    return np.flatnonzero(logits >= kth)


@pytest.mark.parametrize("spread", [0.5, 3.0, 12.0, 60.0])
def test_top_k_candidates_are_exactly_the_logits_top_k_can_keep(spread):
    rng = np.random.default_rng(7)
    for k in (1, 40, 200):
        logits = (rng.standard_normal(248_320) * spread).astype(np.float32)
        got = top_k_candidates(logits, k)
        if got is None:  # too flat to be worth it: only when most of the vocabulary is within reach
            assert spread < 1.0
            continue
        exact = _kth_or_better(logits, k)
        assert np.all(np.diff(got) > 0) and np.all(np.isin(exact, got))  # in id order, none that top-k keeps lost
        assert len(got) <= 4 * k or np.array_equal(got, exact)  # and few: top-k then runs on a short array


def test_ties_at_the_kth_logit_are_all_kept_and_a_flat_vector_goes_to_the_chain():
    logits = np.full(100_000, -20.0, np.float32)
    logits[[3, 10, 500]] = 2.0  # three equal leaders, k = 2: all three stay candidates
    assert list(top_k_candidates(logits, 2)) == [3, 10, 500]
    logits[np.arange(1000, 2000)] = 1.0  # k = 40: the leaders and every one of the 1,000 tied next
    assert len(top_k_candidates(logits, 40)) == 1003
    assert top_k_candidates(np.zeros(100_000, np.float32), 40) is None
    logits[7] = np.nan
    assert top_k_candidates(logits, 40) is None  # NaN ranks nothing: the chain decides (and no endless widening)


def test_the_shortcut_is_taken_only_when_nothing_before_top_k_changes_the_logits():
    base = dict(temperature=0.7, top_k=40, repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0,
                grammar=None, n_vocab=1000)
    assert sampling_shortcut(**base) == "top-k"
    assert sampling_shortcut(**dict(base, temperature=0.0)) == "greedy"
    for change in (dict(repeat_penalty=1.1), dict(frequency_penalty=0.2), dict(presence_penalty=0.1),
                   dict(grammar=object()), dict(top_k=0), dict(top_k=1000), dict(temperature=-1.0)):
        assert sampling_shortcut(**dict(base, **change)) is None, change


def test_a_replys_seed_decides_its_draws_and_the_same_seed_draws_the_same(smollm2):
    """reply_chain seeds the model before the chain takes its seed: two chains with one seed draw the
    same tokens from the same logits, another seed draws others."""
    from app.engine.contract import SamplingParams
    from app.engine.sampler import Picker, reply_chain
    from app.machine.llama_backend import llama
    from app.machine.llama_load import LoadSettings, load_llama

    llm = load_llama(smollm2, LoadSettings(n_ctx=256, n_threads=2, n_threads_batch=2, n_outputs_max=1))
    try:
        llm.eval(llm.tokenize(b"Once upon a time, in a land far away, there lived"))
        llama().llama_synchronize(llm.ctx)
        picker = Picker(llm)

        def draws(seed: int) -> list[int]:
            chain = reply_chain(llm, SamplingParams(temperature=1.5, top_k=200, top_p=1.0, min_p=0.0, seed=seed))
            try:
                return [picker.sample(chain) for _ in range(24)]
            finally:
                chain.close()

        first = draws(7)
        assert draws(7) == first
        assert draws(8) != first
    finally:
        llm.close()
