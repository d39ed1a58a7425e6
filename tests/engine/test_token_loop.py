"""The token loop samples what llama.cpp's chain samples, with fewer candidates where that changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine import token_loop
from app.engine.token_loop import TokenLoop, sampling_shortcut, top_k_candidates
from app.machine.llama_load import LoadSettings, load_llama


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


@pytest.fixture(scope="module")
def llm(smollm2):
    model = load_llama(smollm2, LoadSettings(n_ctx=1024, n_threads=2, n_threads_batch=2, n_outputs_max=1))
    yield model
    model.close()


@pytest.mark.parametrize("params", [
    dict(temperature=0.0, top_k=40, top_p=0.9, min_p=0.05),
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    dict(temperature=1.3, top_k=200, top_p=1.0, min_p=0.0),
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1),  # the full chain
])
def test_the_loop_samples_the_same_tokens_as_llama_cpp_python(llm, params, monkeypatch):
    """Same seed, same prompt: llama-cpp-python's generate (every logit through llama_sampler_sample)
    and the token loop give the same 48 tokens, and the top-k shortcut was really taken."""
    shortcuts = []
    real = token_loop.top_k_candidates
    monkeypatch.setattr(token_loop, "top_k_candidates",
                        lambda logits, k: shortcuts.append(r := real(logits, k)) or r)
    prompt = llm.tokenize(b"Once upon a time, in a land far away, there lived")

    def first(stream, n=48):
        out = []
        for t in stream:
            out.append(int(t))
            if len(out) == n:
                break
        stream.close()
        return out

    llm.set_seed(42)
    llm.reset()
    theirs = first(llm.generate(prompt, top_k=params["top_k"], top_p=params["top_p"], min_p=params["min_p"],
                                temp=params["temperature"], repeat_penalty=params.get("repeat_penalty", 1.0)))
    llm.set_seed(42)
    llm.reset()
    ours = first(TokenLoop(llm).tokens(prompt, **params))
    assert ours == theirs
    if params["temperature"] > 0 and "repeat_penalty" not in params:
        assert sum(c is not None for c in shortcuts) >= 40  # candidates found in NumPy, not all 49,152
    else:
        assert not shortcuts


def test_a_follow_up_decodes_what_the_cache_lacks_from_the_last_chunk_boundary(smollm2):
    """The cache holds the first prompt (read in chunks of n_batch) and the reply's tokens (decoded one
    at a time): the follow-up reuses the first prompt's whole chunks and reads the rest in the same
    chunks, so it gives the tokens of a cold read."""
    from app.machine.llama_backend import llama

    lc = llama()
    chunk = 16
    llm = load_llama(smollm2, LoadSettings(n_ctx=1024, n_batch=chunk, n_ubatch=chunk, n_threads=2,
                                           n_threads_batch=2, n_outputs_max=1))
    try:
        loop = TokenLoop(llm)
        assert loop.chunk == chunk
        greedy = dict(temperature=0.0, top_k=40, top_p=1.0, min_p=0.0)
        first = llm.tokenize(b"The capital of France is Paris. The capital of Germany is Berlin. The capital of "
                             b"Italy is")
        stream = loop.tokens(first, **greedy)
        reply = [next(stream) for _ in range(4)]
        stream.close()
        assert len(first) % chunk and loop.exact == len(first) // chunk * chunk
        follow = first + reply[:3] + llm.tokenize(b" And of Spain?", add_bos=False)
        lc.llama_perf_context_reset(llm.ctx)
        stream = loop.tokens(follow, **greedy)
        warm = [next(stream) for _ in range(8)]
        stream.close()
        assert loop.reused == len(first) // chunk * chunk
        assert lc.llama_perf_context(llm.ctx).n_p_eval == len(follow) - loop.reused
        llm.reset()
        stream = loop.tokens(follow, **greedy)
        cold = [next(stream) for _ in range(8)]
        stream.close()
        assert loop.reused == 0 and cold == warm
    finally:
        llm.close()
