"""The request inspector's record: every request the local server answered on its three APIs (chat
completions, Messages, Responses), newest first, the last LIMIT kept in memory and nothing written to
disk. Each entry says who asked (named from its User-Agent), which API, which model, the prompt's
tokens and how many the cache gave, the time to first token, tok/s, why the reply stopped, its tool
calls with whether each one's arguments fit the tool's schema, and holds the body as sent, so that
its messages and tools can be shown and the request sent again as a curl command. The server feeds
it through app/serve/recorder.py; the window reads it on its own thread. No Qt."""

from __future__ import annotations

import functools
import json
import shlex
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

LIMIT = 500
BODY_BUDGET = 256 << 20  # bodies kept in all: an agent resends its whole conversation each turn (100s of KB)
APIS = {"/v1/chat/completions": "Chat completions", "/v1/messages": "Messages", "/v1/responses": "Responses"}
# (what the User-Agent holds, lower case; the client's name), the first match wins: Claude Code's
# Anthropic SDK inside it and Codex's own words come before the SDKs they build on
CLIENTS = (("claude-cli/", "Claude Code"), ("claude-code", "Claude Code"), ("codex", "Codex"),
           ("openai/python", "OpenAI Python SDK"), ("openai/js", "OpenAI JS SDK"),
           ("anthropic/python", "Anthropic Python SDK"), ("anthropic/js", "Anthropic JS SDK"),
           ("curl/", "curl"), ("mozilla/", "Browser"))
STOPS = {"end": "end", "length": "max tokens", "stopped": "stopped"}


def client_name(user_agent: str) -> str:
    """The client as users name it, else the User-Agent's first product token (`python-httpx/0.28.1`)."""
    lowered = user_agent.lower()
    for needle, name in CLIENTS:
        if needle in lowered:
            return name
    return user_agent.split()[0] if user_agent.strip() else "unknown (no User-Agent)"


@dataclass(frozen=True)
class CallSeen:
    """A tool call in a reply: its arguments and what breaks the tool's schema (empty: they fit)."""

    name: str
    arguments: dict[str, Any]
    errors: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class Entry:
    """One request answered. Figures the reply did not produce (an error answer) are None."""

    number: int  # counts every request since the server's log began: a new one has a larger number
    at: float  # when it came (seconds since the epoch)
    user_agent: str
    path: str
    query: str
    body: bytes  # as the client sent it
    status: int  # the answer's HTTP status (0: none was sent, the client left first)
    seconds: float  # from the request to its answer's last byte
    served: str = ""  # the model that answered (the server's id for it)
    error: str = ""  # an error answer's message
    stream: bool = False
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # of the prompt's tokens, those the cache gave (not evaluated again)
    generated_tokens: int | None = None
    ttft: float | None = None  # seconds to the first generated token
    tps: float | None = None  # generated tokens a second
    stop: str = ""  # why the reply ended, in words: "end", "tool calls", "max tokens", "stop sequence"
    calls: tuple[CallSeen, ...] = ()
    text: str = ""
    reasoning: str = ""
    body_dropped: bool = False  # let go to keep the log within its memory budget: figures only

    @property
    def client(self) -> str:
        return client_name(self.user_agent)

    @property
    def api(self) -> str:
        return APIS.get(self.path, self.path)

    @functools.cached_property
    def parsed(self) -> dict[str, Any]:
        """The body as JSON ({} when it is not a JSON object)."""
        try:
            value = json.loads(self.body)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def model(self) -> str:
        """The model the client asked for (it may differ from the one served)."""
        value = self.parsed.get("model")
        return value if isinstance(value, str) else ""

    @property
    def calls_fit(self) -> bool | None:
        """Whether every tool call's arguments fit its tool's schema (None: no call)."""
        return all(c.fits for c in self.calls) if self.calls else None

    def messages(self) -> list[tuple[str, str]]:
        """(role, text) of each message the request sent, the system prompt and instructions first;
        blocks that are not text (tool calls, results, images) as compact JSON."""
        body = self.parsed
        out: list[tuple[str, str]] = []
        for key in ("system", "instructions"):
            if body.get(key):
                out.append(("system", _text(body[key])))
        turns = body.get("messages", body.get("input", []))
        if isinstance(turns, str):
            return out + [("user", turns)]
        for turn in turns if isinstance(turns, list) else []:
            if isinstance(turn, dict) and isinstance(turn.get("role"), str):
                out.append((turn["role"], _text(turn.get("content", ""))))
            else:
                out.append((str(turn.get("type", "item")) if isinstance(turn, dict) else "item", _text(turn)))
        return out

    def tools(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, definition) of each tool the request offered, in any API's shape."""
        out = []
        for tool in self.parsed.get("tools") or []:
            if isinstance(tool, dict):
                fn: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
                out.append((str(fn.get("name", tool.get("type", "?"))), tool))
        return out

    def as_curl(self, url: str, key: str | None) -> str:
        """The request as a curl command to the server at `url` (its base, with or without /v1) with its
        API key, the body as sent; nothing is written anywhere."""
        base = url.rstrip("/")
        base = base[:-3] if base.endswith("/v1") else base
        target = base + self.path + (f"?{self.query}" if self.query else "")
        head = ["curl", "-sS"] + (["-N"] if self.stream else []) + [target]
        lines = [" ".join(shlex.quote(p) for p in head), "-H " + shlex.quote("Content-Type: application/json")]
        if self.api == "Messages":
            lines.append("-H " + shlex.quote("anthropic-version: 2023-06-01"))
        if key:
            auth = f"x-api-key: {key}" if self.api == "Messages" else f"Authorization: Bearer {key}"
            lines.append("-H " + shlex.quote(auth))
        lines.append("--data-binary " + shlex.quote(self.body.decode("utf-8", "replace")))
        return " \\\n  ".join(lines)


def _text(content: Any) -> str:
    """A message's content as text: strings and text blocks as they are, anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(block) for block in content)
    if isinstance(content, dict) and content.get("type") in ("text", "input_text", "output_text") \
            and isinstance(content.get("text"), str):
        return content["text"]
    return json.dumps(content, ensure_ascii=False)


def stop_words(stop_reason: str, stop_sequence: str, calls: int) -> str:
    """Why a reply ended, in the inspector's words."""
    if calls:
        return "tool calls"
    if stop_sequence:
        return "stop sequence"
    return STOPS.get(stop_reason, stop_reason)


@dataclass
class RequestLog:
    """The last `limit` entries, newest first, in memory only; past `budget` bytes of bodies in all,
    the older entries keep their figures and let their bodies go. `add` may run on any thread; each
    listener hears of each entry on the thread that added it (a window passes it on to its own)."""

    limit: int = LIMIT
    budget: int = BODY_BUDGET
    listeners: list[Callable[[Entry], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: deque[Entry] = deque(maxlen=self.limit)
        self._count = 0

    def next_number(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def add(self, entry: Entry) -> None:
        with self._lock:
            self._entries.appendleft(entry)  # the oldest falls off the end
            kept = 0
            for i, old in enumerate(self._entries):
                kept += len(old.body)
                if kept > self.budget and old.body:
                    self._entries[i] = replace(old, body=b"", body_dropped=True)
        for listener in list(self.listeners):
            listener(entry)

    def entries(self) -> list[Entry]:
        """Newest first: a copy, to read while requests go on coming."""
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
