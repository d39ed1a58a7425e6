"""Every decode of a loaded model is made on one thread, the scheduler's (app/machine/llama_backend.py,
`on_a_thread_of_its_own`, says why: a second thread that decodes leaves an OpenMP pool behind it, and
every later decode of the process waits on sleeping workers; on this 2-core machine SmolLM2 wrote
100 instead of 145 tok/s by default, where the load timed drafting on its own thread).

llama_decode is wrapped to record the thread of each call: the load's timing decodes (n-gram costs,
the MTP head's step) and the replies' decodes all happen on the scheduler's thread, and tune's
measurements on a thread that has ended by the time they return."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.machine.llama_backend import llama, on_a_thread_of_its_own
from app.machine.llama_load import LoadSettings
from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

BASE = LoadSettings(n_ctx=2048, n_threads=2, n_outputs_max=1)


@pytest.fixture
def decoding_threads(monkeypatch):
    """The threads that called llama_decode (llama-cpp-python binds it in two modules: both wrapped)."""
    llama_cpp = llama()  # the package, its backends loaded (tests/test_layering.py: the one way in)
    bindings = llama_cpp.llama_cpp  # the module the package's names come from
    seen: list[threading.Thread] = []
    real = bindings.llama_decode

    def decode(ctx, batch):
        seen.append(threading.current_thread())
        return real(ctx, batch)

    monkeypatch.setattr(bindings, "llama_decode", decode)
    monkeypatch.setattr(llama_cpp, "llama_decode", decode)
    return seen


@pytest.mark.parametrize("kind", ["smollm2, n-grams", "tiny Clover with its MTP head, 2 slots"])
def test_the_load_and_the_replies_decode_on_the_schedulers_thread_only(kind, smollm2, tmp_path, decoding_threads):
    if kind.startswith("smollm2"):
        path, settings = smollm2, replace(BASE, speculative="auto")
    else:
        path = write_qwen35moe(tmp_path / "mtp.gguf", qwen35_shape(n_ctx_train=4096), mtp=True)
        settings = replace(BASE, speculative="mtp", parallel=2)
    engine = Engine()
    try:
        engine.load(path, settings)
        slots = engine.slots
        assert slots is not None and slots.costs.relative  # the load timed its batches
        loaded = len(decoding_threads)
        assert loaded > 0
        if "MTP" in kind:
            assert slots.head is not None  # its step was timed too
        reply = engine.generate(ChatRequest([{"role": "user", "content": "Hello there"}], enable_thinking=False,
                                            sampling=SamplingParams(temperature=0.0, max_tokens=8)))
        assert reply.stats.generated_tokens > 0 and len(decoding_threads) > loaded
        assert {t.name for t in decoding_threads} == {"slots"}  # the scheduler's thread, and no other
        assert slots.call(threading.current_thread) is slots._thread  # noqa: SLF001
    finally:
        engine.unload()
    with pytest.raises(RuntimeError, match="unloaded"):
        slots.call(lambda: None)


def test_a_call_on_the_schedulers_thread_hands_back_its_error(smollm2_engine):
    def fails():
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        smollm2_engine.slots.call(fails)
    assert smollm2_engine.slots.call(lambda: 41 + 1) == 42  # and the thread goes on


def test_tune_measures_on_a_thread_that_ends_with_the_measurement(smollm2, decoding_threads):
    from app.machine.tune import Measurer

    measurer = Measurer(smollm2, 512)
    try:
        gen, prompt = measurer.measure(replace(BASE, n_ctx=512))
    finally:
        measurer.close()
    assert gen > 0 and prompt > 0
    threads = set(decoding_threads)
    assert threads and threading.main_thread() not in threads and not any(t.is_alive() for t in threads)


def test_a_thread_of_its_own_returns_and_raises():
    assert on_a_thread_of_its_own(lambda: threading.current_thread()) is not threading.current_thread()
    with pytest.raises(KeyError):
        on_a_thread_of_its_own(lambda: {}["missing"])
