"""Stock llama.cpp through HTTP: `llama-server`, built by `python3 packaging/bootstrap.py llama-bench`
from the same vendored source and flags as the wheel, started on a free port for a bench to compare
the app's server (or engine) with, on the same machine in the same round.

Its replies carry llama.cpp's own clock (`timings`: decode tokens/s, drafted and accepted tokens), so a
bench reads stock speculative decoding's speed-up without trusting its own clock.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.mcp_servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def llama_tool(tool: str) -> str | None:
    """llama.cpp's `tool` (llama-bench, llama-batched-bench or llama-server) as bootstrap.py builds it
    (same vendored source and flags as the wheel; once per machine, long on 2 cores): its path, or
    None when it cannot be built here (said why)."""
    built = subprocess.run([sys.executable, str(ROOT / "packaging" / "bootstrap.py"), "llama-bench", tool],
                           capture_output=True, text=True)
    if built.returncode != 0:
        print(f"  {tool} could not be built: {built.stderr.strip()[-300:]}")
        return None
    return built.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def llama_server(exe: str, model: str, *options: object, ready_s: float = 120.0) -> Iterator[str]:
    """llama-server on `model` with `options` (e.g. "-np", 4): its /v1 URL while the block runs. Its
    log goes nowhere; a server that exits or does not answer /health in `ready_s` is an error with the
    log's tail."""
    port = free_port()
    log = subprocess.Popen([exe, "-m", model, "--host", "127.0.0.1", "--port", str(port), *map(str, options)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: [lines.append(line) for line in log.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if log.poll() is not None:
                raise RuntimeError(f"llama-server exited ({log.returncode}): {''.join(lines[-15:])}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not answer /health in {ready_s:.0f} s: {''.join(lines[-15:])}")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        log.terminate()
        try:
            log.wait(30)
        except subprocess.TimeoutExpired:
            log.kill()
            log.wait()


def timed_reply(url: str, prompt: str, tokens: int) -> dict:
    """A whole temperature-0 chat completion from llama-server: its text and llama.cpp's `timings`
    (predicted_per_second; draft_n and draft_n_accepted when it drafted)."""
    body = json.dumps({"model": "m", "temperature": 0, "max_tokens": tokens,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    req = urllib.request.Request(url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        answer = json.load(resp)
    return {"text": answer["choices"][0]["message"].get("content") or "", "timings": answer.get("timings", {})}
