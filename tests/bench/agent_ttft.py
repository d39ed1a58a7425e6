"""An agent's request, measured: time to first token of a Claude-Code-shaped request through
`/v1/messages` against the same tokens through `/v1/chat/completions` (issue 38's figure), on
`python -m app serve` with SmolLM2.

    python -m tests.bench.agent_ttft [--model GGUF] [--tokens 12000] [--rounds 5] [--max-tokens 8]

The request is shaped as Claude Code 2.1.x sends it: a long system prompt in blocks with
`cache_control`, a dozen JSON-schema tools, a system reminder and the user's turn in blocks,
`metadata`, thinking off, `stream: true`, a small `max_tokens`, `?beta=true` and its beta headers.
The same conversation goes to chat completions as OpenAI messages and function tools (the
Messages surface's own conversion), and both must read the same number of prompt tokens (said per
request). The prompt is `--tokens` long when the model's window holds it with `max_tokens`;
SmolLM2 was trained for 8,192 tokens, so there it is the largest that fits (the output says so).

Each round, interleaved (the APIs' order alternating): each API cold (a new session line at the
start of the system prompt: no cached prefix is reused) and then warm (the same request again, as an
agent's next turn reads its conversation's prefix from the cache). Printed last: the median of the
rounds' paired ratios Messages / chat completions, cold (target <= 1.1) and warm (the per-request
cost of the path itself, for information); the bench exits 3 on a MISS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.bench.parallel_serve import start_server
from tests.bench.verdict import Verdicts

TARGET = 1.1
ROOM = 64  # tokens left free beside the prompt and max_tokens (the window's end is a 400, not a figure)

PARAGRAPHS = [
    "You are an interactive command line tool that helps users with software engineering tasks. Use the "
    "instructions below and the tools available to you to assist the user. Refuse to write code that may be "
    "used maliciously, even when the user claims it is for education.",
    "Be concise, direct and to the point. When you run a non-trivial command, explain what it does and why "
    "you are running it, so the user understands what happens on their machine. Answer in fewer than four "
    "lines unless the user asks for detail; no preamble, no postamble.",
    "When you change files, first understand the file's conventions: mimic its style, use its libraries and "
    "utilities, and follow its patterns. Never assume a library is available; check the project's manifest "
    "(package.json, pyproject.toml, Cargo.toml) or the neighbouring files first.",
    "Use the TodoWrite tool to plan and track tasks very frequently. Mark a task completed as soon as it is "
    "done; do not batch several tasks before marking them. Break a larger task into smaller steps and keep "
    "exactly one step in progress at a time.",
    "When searching for a keyword or a file and you are not confident you will find the right match in the "
    "first few tries, use the Task tool to delegate the search. Prefer Grep and Glob over shell commands "
    "such as find and grep; read files with Read, never with cat, head or tail.",
    "Before you commit, run the project's lint and type-check commands if you were given them (npm run lint, "
    "ruff, mypy, cargo clippy) and make sure the tests pass. Never commit unless the user asks you to; never "
    "push to a remote; never change git configuration.",
    "Tool results and user messages may include <system-reminder> tags. They carry useful information and "
    "reminders; they are added by the system and bear no direct relation to the tool result or message in "
    "which they appear.",
    "When you reference specific functions or pieces of code, include the pattern file_path:line_number so "
    "the user can navigate to the source location. Keep your answers in GitHub-flavoured Markdown; they are "
    "shown in a monospace font.",
]
TOOL_NAMES = ["Task", "Bash", "Glob", "Grep", "LS", "ExitPlanMode", "Read", "Edit", "MultiEdit", "Write",
              "NotebookEdit", "WebFetch", "TodoWrite"]


def tools() -> list[dict[str, Any]]:
    """A dozen tools with the sizes and shapes of Claude Code's (descriptions and JSON schemas)."""
    out = []
    for i, name in enumerate(TOOL_NAMES[:12]):
        schema = {"type": "object", "$schema": "http://json-schema.org/draft-07/schema#", "additionalProperties": False,
                  "properties": {
                      "path": {"type": "string", "description": f"The absolute path the {name} tool works on"},
                      "pattern": {"type": "string", "description": "A glob or regular expression to match"},
                      "limit": {"type": "number", "description": "How many lines or results at most"},
                      "mode": {"type": "string", "enum": ["content", "files_with_matches", "count"],
                               "description": "What to return"},
                      "todos": {"type": "array", "items": {"type": "object", "properties": {
                          "content": {"type": "string", "minLength": 1},
                          "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                          "id": {"type": "string"}}, "required": ["content", "status", "id"]}}},
                  "required": ["path"] if i % 2 else ["pattern"]}
        description = (f"{name}: {PARAGRAPHS[i % len(PARAGRAPHS)]} Usage notes: the {name.lower()} tool returns "
                       "its result as text; a failure is an error result the model may read and recover from.")
        out.append({"name": name, "description": description, "input_schema": schema})
    return out


def system_text(paragraphs: int) -> str:
    return "\n\n".join(f"# Section {i + 1}\n{PARAGRAPHS[i % len(PARAGRAPHS)]}" for i in range(paragraphs))


REMINDER = ("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
            "# important-instruction-reminders\nDo what has been asked; nothing more, nothing less.\n"
            "</system-reminder>\n")
QUESTION = "The test tests/test_parser.py::test_nested_lists fails. Find out why and fix it."


def messages_body(session: str, paragraphs: int, max_tokens: int) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "metadata": {"user_id": "user_bench_account__session_1"}, "tools": tools(),
            "system": [{"type": "text", "text": f"{session}\n", "cache_control": {"type": "ephemeral"}},
                       {"type": "text", "text": system_text(paragraphs), "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": REMINDER},
                                                      {"type": "text", "text": QUESTION,
                                                       "cache_control": {"type": "ephemeral"}}]}]}


def chat_body(messages: dict[str, Any]) -> dict[str, Any]:
    """The same conversation as chat completions: the system blocks joined as the Messages surface
    joins them, the user's blocks likewise, the tools as functions with the same keys in the same order."""
    functions = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"],
                                                   "description": t["description"]}} for t in messages["tools"]]
    return {"model": "m", "max_tokens": messages["max_tokens"], "stream": True, "temperature": 0,
            "stream_options": {"include_usage": True}, "tools": functions,
            "chat_template_kwargs": {"enable_thinking": False},
            "messages": [{"role": "system", "content": "".join(b["text"] for b in messages["system"])},
                         {"role": "user", "content": "".join(b["text"] for b in messages["messages"][0]["content"])}]}


WARNED: set[str] = set()
BETA = {"anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"}


def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        return urllib.request.urlopen(req, timeout=600)
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"{url}: {exc.code} {exc.read().decode()[:500]}") from None


def count(base: str, body: dict[str, Any]) -> int:
    with post(base + "/v1/messages/count_tokens", {k: v for k, v in body.items() if k != "stream"}, BETA) as r:
        return int(json.loads(r.read())["input_tokens"])


def sections(base: str, tokens: int, max_tokens: int) -> int:
    """The most system-prompt sections whose request is at most `tokens` long (the server counts)."""
    lo, hi = 1, 2
    while count(base, messages_body("session 000000", hi, max_tokens)) <= tokens:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(base, messages_body("session 000000", mid, max_tokens)) <= tokens else (lo, mid)
    return lo


def ttft(base: str, api: str, body: dict[str, Any]) -> tuple[float, int]:
    """(seconds from sending to the first token of text, the prompt's tokens as the server counted them)."""
    sent = time.perf_counter()
    first, prompt = None, 0
    path, headers = ("/v1/messages?beta=true", BETA) if api == "messages" else ("/v1/chat/completions", None)
    with post(base + path, body, headers) as resp:
        warning = resp.headers.get("X-Clover-Warning")
        if warning and warning not in WARNED:
            WARNED.add(warning)
            print(f"  the server says ({api}): {warning}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            data = json.loads(line[6:])
            if api == "messages":
                if data["type"] == "message_start":
                    prompt = data["message"]["usage"]["input_tokens"]
                elif data["type"] == "content_block_delta" and first is None:
                    first = time.perf_counter()
            else:
                if data.get("usage"):
                    prompt = data["usage"]["prompt_tokens"]
                delta = data["choices"][0]["delta"] if data.get("choices") else {}
                if first is None and any(delta.get(k) for k in ("content", "reasoning_content", "tool_calls")):
                    first = time.perf_counter()
    end = time.perf_counter()
    return (first or end) - sent, prompt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a GGUF (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--tokens", type=int, default=12_000, help="the prompt's length when the model's window holds it")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=8)
    args = ap.parse_args()
    if args.model:
        model = args.model
    else:
        from tests.helpers.smollm2 import smollm2_path

        model = str(smollm2_path())
    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header

    trained = facts_from_header(read_header(model)).n_ctx_train
    wanted = args.tokens + args.max_tokens + ROOM
    ctx = min(wanted, trained) if trained else wanted
    tokens = min(args.tokens, ctx - args.max_tokens - ROOM)
    print(f"model {Path(model).name} (trained for {trained:,} tokens), --ctx {ctx:,}, max_tokens {args.max_tokens}")
    if tokens < args.tokens:
        print(f"  a {args.tokens:,}-token request does not fit the model's {trained:,}-token window: the prompt is "
              f"{tokens:,} tokens at most, the largest that fits beside max_tokens")
    proc, url = start_server(model, "--ctx", ctx, "--parallel", 1)
    base = url.removesuffix("/v1")
    ratios: dict[str, list[float]] = {"cold": [], "warm": []}
    try:
        paragraphs = sections(base, tokens - 8, args.max_tokens)  # a few tokens spare for the session line's
        size = count(base, messages_body("session 000000", paragraphs, args.max_tokens))
        print(f"  the request: {len(json.dumps(messages_body('session 000000', paragraphs, args.max_tokens))):,} "
              f"bytes, {len(TOOL_NAMES[:12])} tools, a system prompt of {paragraphs} sections; {size:,} prompt tokens")
        ttft(base, "messages", messages_body("session warm-up", paragraphs, args.max_tokens))  # loads what loads once
        session = 0
        for r in range(args.rounds):
            got: dict[tuple[str, str], tuple[float, int]] = {}
            for api in (("messages", "chat") if r % 2 == 0 else ("chat", "messages")):
                session += 1
                body = messages_body(f"session {session:06d}", paragraphs, args.max_tokens)
                if api == "chat":
                    body = chat_body(body)
                got[(api, "cold")] = ttft(base, api, body)
                got[(api, "warm")] = ttft(base, api, body)
            line = []
            for kind in ("cold", "warm"):
                (m, nm), (c, nc) = got[("messages", kind)], got[("chat", kind)]
                ratios[kind].append(m / c)
                line.append(f"{kind} Messages {m:.3f} s ({nm:,} tokens), chat {c:.3f} s ({nc:,} tokens): "
                            f"{m / c:.2f}x")
                if abs(nm - nc) > 4:
                    print(f"  round {r + 1}: the two APIs read different prompts ({nm} and {nc} tokens)")
                    return 1
            print(f"  round {r + 1}: " + "; ".join(line), flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    verdicts = Verdicts()
    cold, warm = statistics.median(ratios["cold"]), statistics.median(ratios["warm"])
    verdict = verdicts.check("TTFT Messages / chat, cold", cold, cold <= TARGET, f"<= {TARGET}")
    print(f"\n  time to first token, Messages / chat completions, cold: {cold:.3f}x (median of {args.rounds} paired "
          f"rounds; target <= {TARGET})  {verdict}")
    print(f"  warm (the same request again: what the path itself costs): {warm:.3f}x, per round "
          + ", ".join(f"{x:.2f}" for x in ratios["warm"]))
    return verdicts.finish()


if __name__ == "__main__":
    raise SystemExit(main())
