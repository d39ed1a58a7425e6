"""One engine, several users (the window's reply, the local server, a scenario bench): a model loaded
while a reply streams, or while the server streams, waits for it and nothing crashes."""

from __future__ import annotations

import threading

import openai
import pytest

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.machine.llama_load import LoadSettings
from app.serve.server import LocalServer

SETTINGS = LoadSettings(n_ctx=1024, n_outputs_max=1, n_threads=2)
STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


@pytest.fixture()
def engine(smollm2):
    e = Engine()
    e.load(smollm2, SETTINGS)
    yield e
    e.unload()


def stream_in_thread(fn):
    """Run fn(on_piece) on a thread; returns (thread, started event, outcome dict)."""
    started, outcome = threading.Event(), {}

    def run() -> None:
        try:
            outcome["result"] = fn(lambda *_: started.set())
        except Exception as exc:  # the test asserts there was none
            outcome["error"] = exc
            started.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, started, outcome


@pytest.mark.slow
def test_loading_a_model_while_a_reply_streams_waits_for_it(engine, smollm2):
    request = ChatRequest(STORY, sampling=SamplingParams(temperature=0.0, max_tokens=64))
    thread, started, outcome = stream_in_thread(lambda on: engine.generate(request, on_event=on))
    assert started.wait(60)
    info = engine.load(smollm2, SETTINGS)  # takes the engine's lock: after the reply, not in its middle
    thread.join(120)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].stats.generated_tokens == 64 and info.name and engine.loaded
    again = engine.generate(ChatRequest([{"role": "user", "content": "Hi"}],
                                        sampling=SamplingParams(temperature=0.0, max_tokens=8)))
    assert again.stats.generated_tokens > 0


@pytest.mark.slow
def test_loading_a_model_while_the_server_streams_waits_for_it(engine, smollm2):
    server = LocalServer(engine)
    server.start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)

        def stream(on_piece):
            pieces = []
            for chunk in client.chat.completions.create(model="local", messages=STORY, temperature=0.0,
                                                        max_tokens=64, stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                    on_piece()
            return "".join(pieces)

        thread, started, outcome = stream_in_thread(stream)
        assert started.wait(60)
        engine.load(smollm2, SETTINGS)
        thread.join(120)
        assert "error" not in outcome, outcome.get("error")
        assert len(outcome["result"]) > 20
        after = client.chat.completions.create(model="local", messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=8, temperature=0.0)
        assert after.choices[0].message.content is not None
    finally:
        server.stop()


@pytest.mark.slow
def test_unloading_while_a_reply_streams_waits_too(engine):
    request = ChatRequest(STORY, sampling=SamplingParams(temperature=0.0, max_tokens=32))
    thread, started, outcome = stream_in_thread(lambda on: engine.generate(request, on_event=on))
    assert started.wait(60)
    engine.unload()
    thread.join(120)
    assert "error" not in outcome and outcome["result"].stats.generated_tokens == 32 and not engine.loaded


def test_a_request_that_takes_long_to_render_does_not_hold_the_engine(engine, monkeypatch):
    """Issue 29 item 4: a huge conversation is rendered and tokenized before the engine's lock is
    taken, so a short request asked meanwhile is answered first (before: it waited for the render)."""
    import time

    render = engine.template.render
    rendering = threading.Event()

    def slow_render(messages, **kw):
        if messages and messages[0].get("content") == "huge":
            rendering.set()
            time.sleep(3.0)  # stands for 10,000 messages (3.9 s measured)
        return render(messages, **kw)

    monkeypatch.setattr(engine.template, "render", slow_render)
    done: list[str] = []
    huge = threading.Thread(target=lambda: (engine.generate(ChatRequest(
        [{"role": "user", "content": "huge"}], sampling=SamplingParams(temperature=0, max_tokens=2))),
        done.append("huge")))
    huge.start()
    assert rendering.wait(30)
    engine.generate(ChatRequest([{"role": "user", "content": "Hi"}], sampling=SamplingParams(temperature=0,
                                                                                              max_tokens=2)))
    done.append("short")
    huge.join(60)
    assert done == ["short", "huge"]


def test_unloading_while_a_request_is_prepared_is_said_in_words(engine, monkeypatch):
    from app.engine.contract import EngineError

    render = engine.template.render

    def unload_midway(messages, **kw):
        out = render(messages, **kw)
        engine.unload()
        return out

    monkeypatch.setattr(engine.template, "render", unload_midway)
    with pytest.raises(EngineError, match="unloaded"):
        engine.generate(ChatRequest([{"role": "user", "content": "Hi"}], sampling=SamplingParams(max_tokens=2)))
