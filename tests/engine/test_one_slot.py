"""A reply in one slot of the scheduler samples what llama.cpp's chain samples, with fewer candidates
where that changes nothing, and a follow-up reads only what a cold read would read after its reuse."""

from __future__ import annotations

import pytest

from app.engine import sampler
from app.engine.sampler import chain_for
from app.engine.slots import Job, Scheduler
from app.machine.llama_load import LoadSettings, load_llama


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
def test_a_slot_samples_the_same_tokens_as_llama_cpp_python(llm, params, monkeypatch):
    """Same seed, same prompt: llama-cpp-python's generate (every logit through llama_sampler_sample)
    and one slot of the scheduler give the same 48 tokens, and the top-k shortcut was really taken."""
    shortcuts = []
    real = sampler.top_k_candidates
    monkeypatch.setattr(sampler, "top_k_candidates",
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
    slots = Scheduler(llm, 1)
    try:
        ours = _reply(slots, prompt, chain_for(llm, **params), 48)
    finally:
        slots.close()
    assert ours == theirs
    if params["temperature"] > 0 and "repeat_penalty" not in params:
        assert sum(c is not None for c in shortcuts) >= 40  # candidates found in NumPy, not all 49,152
    else:
        assert not shortcuts


def test_a_follow_up_decodes_what_the_cache_lacks_from_the_last_chunk_boundary(smollm2):
    """The cache holds the first prompt (read in chunks of n_batch) and the reply's tokens (decoded one
    at a time): the follow-up reuses the first prompt's whole chunks and reads the rest in the same
    chunks, so it gives the tokens of a cold read."""
    chunk = 16
    llm = load_llama(smollm2, LoadSettings(n_ctx=1024, n_batch=chunk, n_ubatch=chunk, n_threads=2,
                                           n_threads_batch=2, n_outputs_max=1))
    slots = Scheduler(llm, 1)
    try:
        assert slots.chunk == chunk
        greedy = dict(temperature=0.0, top_k=40, top_p=1.0, min_p=0.0)
        first = llm.tokenize(b"The capital of France is Paris. The capital of Germany is Berlin. The capital of "
                             b"Italy is")
        reply = _reply(slots, first, chain_for(llm, **greedy), 4)
        assert len(first) % chunk and slots.slots[0].exact == len(first) // chunk * chunk
        follow = first + reply[:3] + llm.tokenize(b" And of Spain?", add_bos=False)
        job = Job(follow, chain_for(llm, **greedy), 8, eog=lambda t: False)
        warm = list(slots.stream(slots.submit(job)))
        assert job.reused == len(first) // chunk * chunk
        slots.forget()
        job = Job(follow, chain_for(llm, **greedy), 8, eog=lambda t: False)
        cold = list(slots.stream(slots.submit(job)))
        assert job.reused == 0 and cold == warm
    finally:
        slots.close()
        llm.close()


def _reply(slots: Scheduler, prompt: list[int], chain, n: int) -> list[int]:
    return list(slots.stream(slots.submit(Job(list(prompt), chain, n, eog=lambda t: False))))
