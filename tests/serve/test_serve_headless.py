"""`python -m app serve`: the server without the window, run as a user runs it (a subprocess), with
parallel slots sharing one context (--parallel auto by default: 4 where the plan's memory allows, said
in the load line); its arguments checked before anything loads (a port outside 0-65535, a host other
than loopback without a key), a --ctx that was cut said in the load line; and the server's queue
bound (429 with Retry-After)."""

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
from tests.helpers.server_post import serve_until_listening


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
        assert len(ids) == 1 and f"model {ids[0]}: 4 slots sharing one 1,024-token context" in lines
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
    (["{missing}"], "error: {missing}: No such file or directory"),
    (["{model}", "--parallel", "0"], "error: --parallel must be auto or 1 to 64, not 0"),
    (["{model}", "--parallel", "many"], "error: --parallel must be auto or 1 to 64, not many"),
    (["{model}", "--speculative", "mtp"], "has no multi-token-prediction head"),  # SmolLM2 has none
    (["{model}", "--speculative", "sometimes"], "--speculative must be one of"),
    (["{model}", "--cache-disk", "-1"], "error: --cache-ram and --cache-disk must be 0 (off) or more"),
    (["{model}", "--port", "70000"], "error: --port must be 1 to 65535 (or 0: any free port), not 70000"),
    (["{model}", "--port", "-5"], "error: --port must be 1 to 65535 (or 0: any free port), not -5"),
    (["{model}", "--host", "0.0.0.0"], "error: --host 0.0.0.0 would let every machine that reaches this one use the "
                                       "model: give --api-key (or $CLOVER_API_KEY), or --insecure-no-key to serve "
                                       "without a key all the same"),
    (["{missing}", "--host", "0.0.0.0", "--api-key", "k"], "error: {missing}: No such file or directory"),
    (["{model}", "--host", "no-such-host.invalid"], "error: --host 'no-such-host.invalid' is not an address"),
    (["{model}", "--chat-template", "nonsense"], "error: --chat-template nonsense: llama.cpp has no such built-in "
                                                 "template (it has: bailing, "),
])
def test_serve_refuses_bad_input_with_exit_code_2_in_one_sentence(smollm2, tmp_path, args, says):
    missing = tmp_path / "missing.gguf"
    argv = [a.format(missing=missing, model=smollm2) for a in args]
    done = run_app("serve", *argv, env={"CLOVER_API_KEY": ""}, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says.format(missing=missing) in done.stdout and done.stdout.count("\n") == 1, done.stdout
    assert done.stderr == "", done.stderr  # no traceback (before: OverflowError from bind() for the ports)


def test_the_key_from_the_environment_lets_serve_listen_beyond_loopback(tmp_path):
    """$CLOVER_API_KEY counts as --api-key: past the host check, the missing file is what is said."""
    missing = tmp_path / "missing.gguf"
    done = run_app("serve", missing, "--host", "0.0.0.0", env={"CLOVER_API_KEY": "sk-env"}, timeout=120)
    assert (done.returncode, done.stdout) == (2, f"error: {missing}: No such file or directory\n")


def test_listen_rules_for_ports_hosts_and_keys():
    from app.serve.headless import is_loopback, listen_problem

    for port in (0, 1, 8080, 65535):
        assert listen_problem("127.0.0.1", port, None) is None
    for port in (-5, 65536, 70000):
        assert listen_problem("127.0.0.1", port, None) == f"--port must be 1 to 65535 (or 0: any free port), not {port}"
    assert listen_problem("127.0.0.1", 70000, None, window=True) == \
        "The local server port must be 1 to 65535, not 70000."
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "LOCALHOST", "::1", "[::1]", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", "192.168.1.5", "example.com"))
    for host in ("0.0.0.0", "::", ""):
        assert "would let every machine that reaches this one use the model" in listen_problem(host, 8080, None)
        assert "would let every machine" in listen_problem(host, 8080, "  ")  # a blank key is no key
        assert listen_problem(host, 8080, "sk-1") is None
        assert listen_problem(host, 8080, None, insecure_no_key=True) is None
    assert listen_problem("0.0.0.0", 8080, None, window=True) == (
        "The local server would listen on 0.0.0.0, where every machine that reaches this one could use the model: "
        "set a Local server API key first.")


def test_ctx_cut_is_said_with_what_it_was_cut_to_and_why():
    from app.serve.headless import ctx_note

    assert ctx_note(None, 8192, 8192) == "" and ctx_note(4096, 4096, 8192) == "" and ctx_note(1000, 1024, 8192) == ""
    assert ctx_note(10**12, 8192, 8192) == (" (--ctx 1,000,000,000,000 cut to 8,192: the model was trained for "
                                            "8,192 tokens)")
    assert ctx_note(131072, 16384, 262144) == \
        " (--ctx 131,072 cut to 16,384: 16,384 is what fits this machine's memory)"
    assert ctx_note(10**6, 16384, 262144) == (" (--ctx 1,000,000 cut to 16,384: the model was trained for 262,144 "
                                              "tokens and 16,384 is what fits this machine's memory)")


def test_the_load_line_says_the_slots_the_context_they_share_and_why_that_many():
    from app.serve.headless import parallel_arg, slots_line

    assert [parallel_arg(v) for v in ("auto", "AUTO", 4, "4", 64, 0, "0", 65, "-1", "many")] == \
        [0, 0, 4, 4, 64, None, None, None, None, None]
    assert slots_line("m", 4, 1024) == "model m: 4 slots sharing one 1,024-token context"
    assert slots_line("m", 1, 8192) == "model m: 1 slot of 8,192 tokens"
    assert slots_line("m", 2, 131072, "automatic: 3 would keep the experts of 1 more block in system RAM") == (
        "model m: 2 slots sharing one 131,072-token context (--parallel auto: 3 would keep the experts of 1 more "
        "block in system RAM)")




def test_serve_says_a_cut_ctx_in_its_load_line_and_warns_when_it_serves_everyone_without_a_key(smollm2):
    """--ctx far past SmolLM2's 8,192-token window: loaded at 8,192 and the load line says so (it used
    to be cut without a word), with the slots --parallel auto chose (4 of 8,192 tokens, one pool: on the
    CPU they cost only RAM); --insecure-no-key on 0.0.0.0: it serves, with a warning."""
    code, lines = serve_until_listening(smollm2, host="0.0.0.0", port=0, ctx=10**12, insecure_no_key=True)
    assert code == 0, lines
    assert ("model SmolLM2-135M-Instruct.Q4_1: 4 slots sharing one 8,192-token context (--parallel auto: 4 at no "
            "cost to the context) (--ctx 1,000,000,000,000 cut to 8,192: the model was trained for 8,192 "
            "tokens)") in lines, lines
    assert ("warning: listening on 0.0.0.0 without an API key (--insecure-no-key): every machine that reaches this "
            "one can use the model") in lines
    # speculative auto: what the load's measured batch costs decided, either way, with the reason
    said = [line for line in lines if line.startswith("speculative decoding: ")]
    assert len(said) == 1 and ("n-gram drafts pay here from " in said[0] or (
        "off on this machine: a batch of 2 tokens costs" in said[0])), lines
    assert lines[-2].startswith("listening on http://0.0.0.0:") and lines[-1] == "stopping"


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
    """--speculative mtp is accepted for a file with a head: it plans, loads the head with the automatic
    slots and serves (stopped once it listens)."""
    from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

    path = write_qwen35moe(tmp_path / "mtp.gguf", qwen35_shape(n_ctx_train=4096), mtp=True)
    code, lines = serve_until_listening(path, port=0, ctx=1024, speculative="mtp")
    assert code == 0, lines
    # --parallel auto: 4 slots, and the head is loaded all the same: it drafts for each
    assert "speculative decoding: the model's MTP head drafts for every slot" in lines, lines
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


def test_a_plan_that_does_not_fit_is_said_once(tmp_path, monkeypatch):
    """The plan's reason is in the error line, not also on a line of its own before it."""
    from app.base.exit_codes import ExitCode
    from app.machine.gpu import probe_with
    from app.machine.snapshot import Machine
    from app.machine.system_memory import SystemMemory
    from app.serve.headless import serve_model
    from tests.helpers.fakes import FakeNVML
    from tests.helpers.gguf_models import write_llama

    too_small = Machine(probe_with(FakeNVML([])), SystemMemory(4 << 20, 1 << 20))  # 1 MiB free: nothing fits
    monkeypatch.setattr(Machine, "read", classmethod(lambda cls, gpus=None: too_small))
    path = write_llama(tmp_path / "tiny.gguf")
    said: list[str] = []
    assert serve_model(path, port=0, say=said.append) == ExitCode.FAILED
    errors = [line for line in said if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: tiny.gguf does not fit this machine. "), said
    reason = errors[0].removeprefix("error: tiny.gguf does not fit this machine. ").split(" To fit:")[0]
    assert reason and sum(line.count(reason) for line in said) == 1, said
