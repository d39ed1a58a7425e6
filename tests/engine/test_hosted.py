"""The window's engine in a process of its own (app/engine/hosted.py, app/engine/host.py): the same
replies as the engine in-process, stop, errors as themselves, several calls at once, and a crash of the
engine's process (a real signal) that ends the reply with what stopped, leaves the caller alive and is
followed by a restart that answers again."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import replace

import pytest

from app.base import crash_trail
from app.base.logs import log_file
from app.engine.contract import ChatRequest, ContextOverflow, EngineError, SamplingParams
from app.engine.hosted import EngineCrashed, HostedEngine
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from tests.helpers.gguf_models import write_qwen35moe

SETTINGS = LoadSettings(n_ctx=1024, n_threads=2, n_outputs_max=1)
GREEDY = SamplingParams(temperature=0.0, max_tokens=24)
PROMPTS = ["What is the capital of France?", "Write a haiku about rain.", "List three colors.",
           "Tell me a story about a cat."]


def request(text: str, **kw) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], sampling=kw.pop("sampling", GREEDY), **kw)


def _loaded(engine, path):
    engine.load(path, SETTINGS)
    yield engine
    engine.unload()


@pytest.fixture(scope="module")
def hosted(smollm2):
    yield from _loaded(HostedEngine(), smollm2)


@pytest.fixture(scope="module")
def local(smollm2):
    yield from _loaded(Engine(), smollm2)


def test_replies_and_streams_are_the_in_process_engines(hosted, local):
    assert hosted.loaded and hosted.pid not in (None, os.getpid())
    # the same model info, but for auto drafting's choice: each process measures its own batch costs
    assert replace(hosted.info, drafting="") == replace(local.info, drafting="")
    for text in PROMPTS:
        streamed: list[tuple[str, str]] = []
        ticks: list[int] = []
        got = hosted.generate(request(text), on_event=lambda k, t, s=streamed: s.append((k, t)),
                              should_stop=lambda n=ticks: n.append(1) is not None)
        want = local.generate(request(text))
        assert (got.text, got.reasoning, got.raw, got.prompt) == (want.text, want.reasoning, want.raw, want.prompt)
        assert got.stats.generated_tokens == want.stats.generated_tokens > 0
        assert "".join(t for k, t in streamed if k == "answer") == got.text
        assert len(ticks) >= got.stats.generated_tokens - 1  # one poll a token: the window's readout counts them
        assert hosted.count_tokens(request(text)) == local.count_tokens(request(text)) == got.stats.prompt_tokens


def test_stop_logprobs_and_errors_cross_as_themselves(hosted):
    polls = []
    story = request("Tell me a long story.", sampling=SamplingParams(temperature=0.8, max_tokens=300))
    stopped = hosted.generate(story, should_stop=lambda: polls.append(1) or len(polls) >= 3)
    # the stop crosses the pipe while the host goes on: a token or two more than in-process, never many
    assert stopped.stats.stop_reason == "stopped" and 3 <= stopped.stats.generated_tokens <= 3 + 4
    entries = []
    reply = hosted.generate(request("Say hi.", logprobs=2), on_logprob=entries.append)
    assert reply.logprobs and entries == reply.logprobs and len(entries[0]["top_logprobs"]) == 2
    with pytest.raises(ContextOverflow) as overflow:
        hosted.generate(request("word " * 2000))
    assert overflow.value.n_ctx == 1024 and overflow.value.n > 1024 and "1,024-token context" in str(overflow.value)
    assert hosted.loaded  # an error is an answer: the process goes on


def test_calls_at_once_from_several_threads_each_get_their_own_reply(smollm2):
    engine = HostedEngine(reserve_app=True)
    try:
        engine.load(smollm2, LoadSettings(n_ctx=2048, n_threads=2, n_outputs_max=4, parallel=3))
        alone = {t: engine.generate(request(t, client="api")).text for t in PROMPTS[:3]}
        got: dict[str, str] = {}

        def ask(text: str) -> None:
            got[text] = engine.generate(request(text, client="api")).text

        threads = [threading.Thread(target=ask, args=(t,)) for t in PROMPTS[:3]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert set(got) == set(alone) and all(got[t] for t in got)
    finally:
        engine.unload()


def test_a_crash_mid_reply_says_what_stopped_and_a_restart_answers_the_same(smollm2, clover_home):
    engine = HostedEngine()
    try:
        engine.load(smollm2, SETTINGS)
        before = engine.generate(request(PROMPTS[3]))
        first_pid = engine.pid
        streamed: list[str] = []

        def on_event(kind, text):
            streamed.append(text)
            if len(streamed) == 4:
                os.kill(first_pid, signal.SIGSEGV)

        with pytest.raises(EngineCrashed) as crashed:
            engine.generate(request(PROMPTS[3], sampling=SamplingParams(temperature=0.0, max_tokens=400)),
                            on_event=on_event)
        assert len(streamed) >= 4 and before.text.startswith("".join(streamed[:4]))  # kept by the caller
        crash = crashed.value.crash
        assert crash.signal == "SIGSEGV" and crash.pid == first_pid and crash.stack
        assert str(crashed.value) == "The engine stopped (SIGSEGV)"  # the user's line; the rest in details
        details = crashed.value.details
        assert details.startswith(f"The engine (pid {first_pid}) stopped with SIGSEGV ")
        assert details.endswith(f"Log: {log_file()}")
        assert not engine.loaded and engine.info is None
        last = json.loads((crash_trail.runs_dir() / "last-crash.json").read_text())
        assert last["pid"] == first_pid and last["signal"] == "SIGSEGV"  # doctor shows it
        assert not list(crash_trail.runs_dir().glob(f"run-{first_pid}.*"))  # the trail was read once

        info = engine.restart()
        assert engine.loaded and engine.pid not in (None, first_pid) and info.path == str(smollm2)
        assert engine.generate(request(PROMPTS[3])).text == before.text
    finally:
        engine.unload()
    assert engine.pid is None


def test_a_crash_between_replies_is_said_at_the_next_call(smollm2):
    engine = HostedEngine()
    try:
        engine.load(smollm2, SETTINGS)
        pid = engine.pid
        os.kill(pid, signal.SIGKILL)  # no word from the process itself (the OOM killer's way)
        deadline = time.monotonic() + 30
        while engine.loaded and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(EngineCrashed, match="SIGKILL"):
            engine.generate(request("Hi"))
        engine.restart()
        assert engine.generate(request("Hi")).stats.generated_tokens > 0
    finally:
        engine.unload()


def test_load_errors_cancel_and_unload_end_the_process(smollm2, tmp_path):
    engine = HostedEngine()
    with pytest.raises(EngineError, match="not found"):
        engine.load(tmp_path / "none.gguf", SETTINGS)
    assert not engine.loaded and not engine.loading
    with pytest.raises(EngineError):
        engine.load(smollm2, SETTINGS, progress=lambda f: False)  # cancelled at its first step
    assert not engine.loaded
    engine.load(smollm2, SETTINGS)
    pid = engine.pid
    engine.unload()
    assert engine.pid is None and not engine.loaded
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(EngineError, match="No model loaded"):
        engine.generate(request("Hi"))


def test_the_tiny_clover_in_the_host_gives_the_in_process_tokens(tmp_path):
    """A hybrid (qwen35moe: recurrent state, checkpoints) through the host: the same greedy text."""
    model = write_qwen35moe(tmp_path / "clover-tiny.gguf")
    settings = LoadSettings(n_ctx=2048, n_threads=2, n_outputs_max=1, ctx_checkpoints=4)
    hosted, local = HostedEngine(), Engine()
    try:
        hosted.load(model, settings)
        local.load(model, settings)
        for text in PROMPTS[:2]:
            assert hosted.generate(request(text)).raw == local.generate(request(text)).raw
    finally:
        hosted.unload()
        local.unload()


def test_the_windows_server_answers_through_the_hosted_engine(hosted):
    """The window's local server runs on the window's engine: chat completions and Anthropic Messages
    through the engine host, and a prompt past the context refused with its numbers."""
    import anthropic
    import openai

    from app.serve.server import LocalServer

    server = LocalServer(hosted, api_key="sk-test")
    server.start()
    try:
        oa = openai.OpenAI(base_url=server.url, api_key="sk-test", max_retries=0, timeout=120)
        r = oa.chat.completions.create(model="local", messages=[{"role": "user", "content": PROMPTS[0]}],
                                       temperature=0.0, max_tokens=24)
        assert r.choices[0].message.content and r.usage.completion_tokens > 0
        an = anthropic.Anthropic(base_url=server.url.removesuffix("/v1"), api_key="sk-test", max_retries=0)
        m = an.messages.create(model="local", max_tokens=24, messages=[{"role": "user", "content": PROMPTS[0]}])
        assert m.content[0].text and m.usage.output_tokens > 0 and m.stop_reason in ("end_turn", "max_tokens")
        with pytest.raises(openai.BadRequestError, match="1,024"):
            oa.chat.completions.create(model="local", messages=[{"role": "user", "content": "word " * 2000}],
                                       max_tokens=8)
    finally:
        server.stop()
