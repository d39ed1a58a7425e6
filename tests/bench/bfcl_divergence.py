"""Why a reply of the app and llama-server's to the same BFCL case differ, case by case: the prompt each
renders (llama-server's `/apply-template` against the app's template), then, at the first token where
the texts part, how far apart the two candidates were in the app's own log-probabilities.

    .venv/bin/python -m tests.bench.bfcl_divergence APP_RUN.jsonl SERVER_RUN.jsonl [--model M]

Both runs in the same mode (prompt mode for SmolLM2), thinking off. Two greedy decoders part at a
token whose two best candidates are nearly tied when their kernels round otherwise: llama.cpp's
rounding depends on how a prompt is cut into batches (the app reads a prompt in pieces of its own, at
turn starts; llama-server in batches of 2,048 after what its slot cache holds). A reply that parts
where the app's margin is large, or from a different prompt, would be a real difference.
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from pathlib import Path

from app.bench.bfcl_cases import Case, load_category
from app.bench.bfcl_run import request_for
from app.bench.bfcl_store import load_run
from app.bench.compare import EngineSpec, open_engine
from app.engine.contract import SamplingParams
from app.machine.snapshot import Machine
from tests.bench.bfcl_reference import bfcl
from tests.bench.stock_server import llama_server, llama_tool


def server_prompt(url: str, messages: list[dict]) -> str:
    base = url.removesuffix("/v1")
    body = json.dumps({"messages": messages}).encode()
    req = urllib.request.Request(base + "/apply-template", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)["prompt"]


def margin_at(engine, case: Case, other: str, max_tokens: int) -> tuple[int, str, str, float | None, str]:
    """(the character where the app's reply parts from `other`, the app's token there, the other's text
    there, the app's log-probability of its token less that of the other's first token where it is among
    the app's top 10 (None where it is not), the app's reply)."""
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=0)
    request = request_for(case, "prompt", False, sampling)
    request.logprobs = 10
    reply = engine.generate(request)
    mine = reply.text
    at = next((i for i, (x, y) in enumerate(zip(mine, other, strict=False)) if x != y), min(len(mine), len(other)))
    pos = 0
    for entry in reply.logprobs or []:
        token = entry["token"]
        if pos + len(token) > at:  # the token that holds the first differing character
            prefix = mine[pos:at]  # what the token shares with the other reply before they part
            theirs = [t for t in entry["top_logprobs"] if other[pos:].startswith(t["token"]) and t["token"]
                      and t["token"] != token and t["token"].startswith(prefix)]
            gap = entry["logprob"] - max(t["logprob"] for t in theirs) if theirs else None
            return at, token, other[pos:pos + 12], gap, mine
        pos += len(token)
    return at, "", other[at:at + 12], None, mine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("app_run", type=Path)
    parser.add_argument("server_run", type=Path)
    parser.add_argument("--model", help="the GGUF both ran (default: SmolLM2-135M Q4_1)")
    parser.add_argument("--ctx", type=int, default=8192)
    args = parser.parse_args()
    if args.model is None:
        from tests.helpers.smollm2 import smollm2_path

        args.model = str(smollm2_path())
    app_run, server_run = load_run(args.app_run), load_run(args.server_run)
    data = bfcl().data
    by_id = {c.id: c for cat in app_run.info.categories for c in load_category(data, cat)}
    theirs = {r.id: r for r in server_run.records}
    parted = [r for r in app_run.records if r.id in theirs and r.raw.strip() != theirs[r.id].raw.strip()]
    print(f"{len(app_run.records) - len(parted)} of {len(app_run.records)} replies the same text; "
          f"{len(parted)} part")
    exe = llama_tool("llama-server")
    if exe is None:
        return 1
    same_prompt = 0
    engine, _ = open_engine(EngineSpec("app", path=args.model, n_ctx=args.ctx), Machine.read(), reproducible=True)
    try:
        with llama_server(exe, args.model, "-c", args.ctx, "--jinja", "-t", 2, "-np", 1) as url:
            for r in app_run.records:
                request = request_for(by_id[r.id], "prompt", False, SamplingParams())
                rendered = engine.render_prompt(request)  # type: ignore[attr-defined]
                same_prompt += rendered == server_prompt(url, request.messages)
        print(f"the same prompt text, the app's template against llama-server's /apply-template: "
              f"{same_prompt} of {len(app_run.records)}")
        gaps = []
        for r in parted:
            other = theirs[r.id].raw.strip()
            at, mine_token, their_text, gap, _ = margin_at(engine, by_id[r.id], other, app_run.info.max_tokens)
            gaps.append(gap)
            words = f"margin {gap:.3f}" if gap is not None else "llama-server's token not in the app's top 10"
            print(f"  {r.id}: parts at character {at}: app {mine_token!r}, llama-server {their_text!r}: {words}")
    finally:
        engine.unload()
    known = [g for g in gaps if g is not None]
    if known:
        known.sort()
        print(f"margins (nats) where the texts part: median {known[len(known) // 2]:.3f}, largest {known[-1]:.3f}, "
              f"{sum(g < 0.5 for g in known)} of {len(known)} under 0.5; {len(gaps) - len(known)} not in the top 10")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
