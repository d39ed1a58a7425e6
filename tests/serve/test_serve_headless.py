"""`python -m app serve`: the server without the window, run as a user runs it (a subprocess), with
parallel slots; and the server's queue bound (429 with Retry-After)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from tests.helpers.app_process import run_app, start_app


def _start(*args: str, env_extra: dict | None = None) -> tuple[subprocess.Popen, str, list[str]]:
    proc = start_app("serve", *args, env=env_extra)
    lines: list[str] = []
    seen: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            seen.put(line)
        seen.put("")

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            line = seen.get(timeout=1)
        except queue.Empty:
            continue
        if line.startswith("listening on "):
            return proc, line.split()[-1], lines
        if line == "":
            break
    proc.kill()
    raise AssertionError("the server did not say it was listening:\n" + "\n".join(lines))


def test_serve_answers_four_clients_at_once_and_stops_cleanly_on_sigterm(smollm2):
    proc, url, lines = _start(str(smollm2), "--port", "0", "--ctx", "1024", "--parallel", "4",
                              "--api-key", "sk-headless")
    try:
        client = openai.OpenAI(base_url=url, api_key="sk-headless")
        ids = [m.id for m in client.models.list().data]
        assert len(ids) == 1 and f"model {ids[0]}: 4 slots of 1,024 tokens" in lines
        replies: list[str] = []

        def ask(i: int) -> None:
            stream = client.chat.completions.create(
                model="any", stream=True, temperature=0, max_tokens=12,
                messages=[{"role": "user", "content": f"Count to {i + 3}."}])
            replies.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(replies) == 4 and all(replies)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong").models.list()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0
    assert lines[-1] == "stopping"


@pytest.mark.parametrize(("args", "says"), [
    (["{missing}"], "error:"),
    (["{model}", "--parallel", "0"], "--parallel must be"),
    (["{model}", "--speculative", "mtp"], "has no multi-token-prediction head"),  # SmolLM2 has none
    (["{model}", "--speculative", "sometimes"], "--speculative must be one of"),
])
def test_serve_refuses_bad_input_with_exit_code_2(smollm2, tmp_path, args, says):
    argv = [a.format(missing=tmp_path / "missing.gguf", model=smollm2) for a in args]
    done = run_app("serve", *argv, timeout=120)
    assert done.returncode == 2
    assert says in done.stdout


def test_past_the_queue_bound_a_request_gets_429_with_retry_after(smollm2_engine, serve):
    """One slot, one request allowed to wait: the third is refused at once, saying when to retry."""
    server = serve(smollm2_engine, max_queue=1)
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 200, "temperature": 0,
                       "messages": [{"role": "user", "content": "Write a long story about the sea."}]}).encode()

    def post() -> urllib.request.Request:
        return urllib.request.Request(server.url + "/chat/completions", data=body,
                                      headers={"Content-Type": "application/json"})

    first = urllib.request.urlopen(post(), timeout=60)
    first.readline()  # it is being written
    second = urllib.request.urlopen(post(), timeout=60)
    assert second.readline().startswith(b": queued, position 1")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post(), timeout=60)
    assert refused.value.code == 429
    assert refused.value.headers["Retry-After"] == "1"
    assert "busy" in json.loads(refused.value.read())["error"]["message"]
    first.close()
    second.close()


@pytest.mark.slow  # loads a model with an MTP head in a subprocess
def test_serve_drafts_with_the_mtp_head_of_a_file_that_has_one(tmp_path):
    """--speculative mtp is accepted for a file with a head: it plans, loads the head and serves (stopped
    once it listens)."""
    from app.serve.headless import serve_model
    from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

    path = write_qwen35moe(tmp_path / "mtp.gguf", qwen35_shape(n_ctx_train=4096), mtp=True)
    lines: list[str] = []
    stop = threading.Event()

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("listening on"):
            stop.set()

    assert serve_model(path, port=0, ctx=1024, speculative="mtp", say=say, stop=stop) == 0, lines
    assert "speculative decoding: the model's multi-token-prediction head drafts" in lines
    assert lines[-1] == "stopping"


def test_a_client_that_disconnects_frees_its_slot_at_once(smollm2, serve):
    """Two slots: a streaming client that goes away mid-reply leaves its slot within a step, and a
    non-streaming one too, while the other slot goes on writing."""
    import socket

    from app.engine.local import Engine
    from app.machine.llama_load import LoadSettings

    engine = Engine()
    engine.load(smollm2, LoadSettings(n_ctx=1024, n_outputs_max=1, n_threads=2, parallel=2))
    try:
        server = serve(engine)
        host, port = server.url.removeprefix("http://").removesuffix("/v1").split(":")
        for stream in (True, False):
            body = json.dumps({"model": "m", "stream": stream, "max_tokens": 400, "temperature": 0,
                               "messages": [{"role": "user", "content": "Write a long story about the sea."}]})
            sock = socket.create_connection((host, int(port)))
            sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
            deadline = time.monotonic() + 60
            while not engine.slots.busy() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # a few tokens written
            assert engine.slots.busy() == 1
            steps = engine.slots.steps
            sock.close()
            deadline = time.monotonic() + 60  # a few steps (seconds on a loaded 2-core machine)
            while engine.slots.busy() and time.monotonic() < deadline:
                time.sleep(0.005)
            assert engine.slots.busy() == 0, f"stream={stream}: the slot is still busy after its client left"
            # a stream notices at its next write or two; a plain request at its next check (every 0.2 s)
            assert engine.slots.steps - steps <= (4 if stream else 40), engine.slots.steps - steps
    finally:
        engine.unload()
