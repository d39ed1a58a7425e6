"""Two clients on `python -m app serve MODEL` with its default settings (issue 39, item 5): one long reply
streaming, and meanwhile a short request; how long the short one takes.

    python -m tests.bench.two_clients [--model GGUF] [--parallel N] [--long 2000] [--every 2]

The server starts with no --parallel and no --ctx (the defaults a new user gets: --parallel auto, the
plan's context); its load line says how many slots it chose. Client A streams a story of --long tokens
(max_tokens, the end-of-text tokens biased away so that it runs that long); once A is writing, client B
sends a request of max_tokens 2 every --every seconds until A ends (the later ones beside a longer
reply). Printed:
each probe's latency, from sending to its whole answer, and A's decode rate. Target: every probe
answers within 1 s (with one slot, today's default before this, B waited for A's whole reply: 78.6 s
for 4,000 tokens). `--parallel 1` measures that old default (a probe then waits for A: one probe).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request
from pathlib import Path

from tests.bench.parallel_serve import start_server
from tests.bench.verdict import Verdicts

TARGET_S = 1.0
LONG_PROMPT = "Write a very long story about a lighthouse keeper, the sea and the town below the cliffs."
SHORT_PROMPT = "Say hello."


def _post(url: str, body: dict) -> urllib.request.Request:
    return urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                  headers={"Content-Type": "application/json"})


def long_reply(url: str, tokens: int, banned: list[int], seen: list[float], done: threading.Event) -> None:
    """Client A: a streaming story; the arrival time of each piece goes into `seen`."""
    body = {"model": "m", "stream": True, "temperature": 0, "max_tokens": tokens,
            "logit_bias": {str(t): -100 for t in banned},
            "messages": [{"role": "user", "content": LONG_PROMPT}]}
    try:
        with urllib.request.urlopen(_post(url, body), timeout=1800) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[6:]).get("choices", []):
                    if (choice.get("delta") or {}).get("content"):
                        seen.append(time.perf_counter())
    finally:
        done.set()


def short_request(url: str) -> tuple[float, int]:
    """Client B: max_tokens 2, not streamed: (seconds from sending to the whole answer, tokens)."""
    body = {"model": "m", "temperature": 0, "max_tokens": 2, "messages": [{"role": "user", "content": SHORT_PROMPT}]}
    sent = time.perf_counter()
    with urllib.request.urlopen(_post(url, body), timeout=1800) as resp:
        answer = json.loads(resp.read())
    return time.perf_counter() - sent, int(answer["usage"]["completion_tokens"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a GGUF (default: SmolLM2-135M)")
    ap.add_argument("--parallel", help="serve's --parallel (default: none given, serve's own default)")
    ap.add_argument("--long", type=int, default=2000, help="client A's max_tokens")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between client B's requests while A writes")
    args = ap.parse_args()
    if args.model:
        model = args.model
    else:
        from tests.helpers.smollm2 import smollm2_path

        model = str(smollm2_path())
    from app.gguf.gguf_file import read_header

    header = read_header(model)
    banned = sorted({int(t) for t in (header.get("tokenizer.ggml.eos_token_id"),
                                      header.get("tokenizer.ggml.eot_token_id")) if t is not None})
    extra = ["--parallel", args.parallel] if args.parallel else []
    print(f"model {Path(model).name}, serve {' '.join(extra) or 'with its defaults'}; client A: {args.long} tokens "
          f"streamed, client B: max_tokens 2 every {args.every:g} s while A writes", flush=True)
    proc, url = start_server(model, *extra)
    latencies: list[float] = []
    seen: list[float] = []
    try:
        short_request(url)  # warm-up
        done = threading.Event()
        a_started = time.perf_counter()
        a = threading.Thread(target=long_reply, args=(url, args.long, banned, seen, done), daemon=True)
        a.start()
        while len(seen) < 20 and not done.is_set():  # A is writing
            time.sleep(0.01)
        i = 0
        while not done.is_set():
            i += 1
            seconds, tokens = short_request(url)
            during = not done.is_set()
            latencies.append(seconds)
            print(f"  probe {i}: {seconds:.3f} s for {tokens} tokens; A had written {len(seen)} tokens"
                  + ("" if during else " and had ended (it waited for A)"), flush=True)
            if not during:
                break
            done.wait(args.every)
        a.join(1800)
        rate = (len(seen) - 1) / (seen[-1] - seen[0]) if len(seen) > 1 else float("nan")
        print(f"  client A: {len(seen)} tokens in {seen[-1] - a_started:.1f} s ({rate:.1f} tok/s once writing)"
              if seen else "  client A wrote nothing", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    verdicts = Verdicts()
    if not latencies:
        print("  no probe was made while A wrote")
        verdicts.check("2-token request beside a long reply (s)", float("nan"), False, f"< {TARGET_S:g}")
        return verdicts.finish()
    worst = max(latencies)
    verdict = verdicts.check("2-token request beside a long reply, worst (s)", worst, worst < TARGET_S,
                             f"< {TARGET_S:g}")
    print(f"\n  2-token request beside a long reply: median {statistics.median(latencies):.3f} s, worst "
          f"{worst:.3f} s of {len(latencies)} (target < {TARGET_S:g} s)  {verdict}")
    return verdicts.finish()


if __name__ == "__main__":
    raise SystemExit(main())
