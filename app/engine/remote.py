"""An engine that talks to a remote OpenAI-compatible server (llama-server, vLLM, SGLang, ...). No Qt.

Same interface as the local `Engine` (`load`, `generate`, `unload`, `info`, `loaded`), so the
chat, the tool bench, the scenario bench and the tokens/s readout work unchanged. Differences,
said where they show:
- speed is measured from the stream (a chunk per token, or the server's usage figures), not from
  llama.cpp's counters, and the prompt's speed is unknown;
- thinking on/off is sent as `chat_template_kwargs: {"enable_thinking": ...}`, which llama-server,
  vLLM and SGLang accept; reasoning comes from `reasoning_content` (or `reasoning`) deltas, or from
  `<think>` in the content;
- tools and JSON schemas are passed as `tools` and `response_format`.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import APP_ID, __version__
from app.engine.contract import ChatRequest, EngineError, ModelInfo, Reply, ReplyStats
from app.engine.text_pipeline import TextPipeline, check_reply
from app.engine.tool_calls import parse_call
from app.machine.llama_load import LoadSettings


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str  # base URL, e.g. http://127.0.0.1:8080/v1
    model: str = ""  # the model name to ask for ("" = the first the server lists)
    api_key: str | None = None


@dataclass(frozen=True)
class ConnectCheck:
    ok: bool
    latency_ms: float
    models: list[str]
    message: str


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class RemoteEngine:
    kind = "remote"

    def __init__(self, endpoint: Endpoint, timeout: float = 60.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.info: ModelInfo | None = None
        self.model = endpoint.model

    @property
    def loaded(self) -> bool:
        return self.info is not None

    # ------------------------------------------------------------------ HTTP

    def _request(self, path: str, body: dict | None = None) -> urllib.request.Request:
        headers = {"User-Agent": f"{APP_ID}/{__version__}", "Accept": "application/json, text/event-stream"}
        if self.endpoint.api_key:
            headers["Authorization"] = f"Bearer {self.endpoint.api_key}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return urllib.request.Request(_base(self.endpoint.url) + path, data=data, headers=headers,
                                      method="POST" if body is not None else "GET")

    def _explain(self, exc: Exception) -> EngineError:
        if isinstance(exc, urllib.error.HTTPError):
            try:
                detail = json.loads(exc.read() or b"{}").get("error", {})
                detail = detail.get("message", "") if isinstance(detail, dict) else str(detail)
            except (ValueError, AttributeError):
                detail = ""
            if exc.code in (401, 403):
                return EngineError(f"{self.endpoint.name} refused the API key (HTTP {exc.code})"
                                   + (f": {detail}" if detail else ""))
            return EngineError(f"{self.endpoint.name} answered HTTP {exc.code}" + (f": {detail}" if detail else ""))
        if isinstance(exc, urllib.error.URLError):
            return EngineError(f"cannot reach {self.endpoint.name} at {_base(self.endpoint.url)}: {exc.reason}")
        return EngineError(f"{self.endpoint.name}: {type(exc).__name__}: {exc}")

    def check(self) -> ConnectCheck:
        """Connect, measure the round trip, list the models the server offers."""
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(self._request("/models"), timeout=self.timeout) as resp:
                data = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            err = self._explain(exc) if isinstance(exc, urllib.error.URLError) else EngineError(str(exc))
            return ConnectCheck(False, (time.perf_counter() - start) * 1000, [], str(err))
        latency = (time.perf_counter() - start) * 1000
        models = [m.get("id", "?") for m in data.get("data", []) if isinstance(m, dict)]
        return ConnectCheck(True, latency, models, f"connected in {latency:.0f} ms; {len(models)} model(s)")

    # ------------------------------------------------------------------ the engine interface

    def load(self, path: str | Path | None = None, settings: LoadSettings | None = None,
             progress: Callable[[float], bool] | None = None) -> ModelInfo:
        result = self.check()
        if not result.ok:
            raise EngineError(result.message)
        if not self.model:
            if not result.models:
                raise EngineError(f"{self.endpoint.name} lists no model")
            self.model = result.models[0]
        elif result.models and self.model not in result.models:
            raise EngineError(f"{self.endpoint.name} has no model {self.model!r} (it lists {', '.join(result.models)})")
        if progress:
            progress(1.0)
        self.info = ModelInfo(_base(self.endpoint.url), self.model, "remote", 0, True, True, settings or LoadSettings())
        return self.info

    def unload(self) -> None:
        self.info = None

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        s = request.sampling
        kwargs = dict(request.template_kwargs)
        if request.enable_thinking is not None:
            kwargs["enable_thinking"] = request.enable_thinking
        body: dict[str, Any] = {"model": self.model, "messages": _openai_messages(request.messages), "stream": True,
                                "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
                                "chat_template_kwargs": kwargs, "stream_options": {"include_usage": True}}
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        if request.tool_choice:
            body["tool_choice"] = "required" if request.tool_choice == "required" else {
                "type": "function", "function": {"name": request.tool_choice}}
        if request.tools:
            body["tools"] = request.tools
        if request.json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "answer", "schema": request.json_schema}}
        return body

    def count_tokens(self, request: ChatRequest) -> int:
        """A remote server counts its own tokens; this is an estimate (4 characters a token)."""
        return sum(len(str(m.get("content") or "")) for m in request.messages) // 4

    def generate(self, request: ChatRequest, on_event: Callable[[str, str], None] | None = None,
                 should_stop: Callable[[], bool] | None = None,
                 on_logprob: Callable[[dict[str, Any]], None] | None = None, prepared: Any = None) -> Reply:
        """`prepared` (a local engine's prompt made beforehand) means nothing here: the server renders."""
        if not self.loaded:
            raise EngineError("not connected: load the endpoint first")
        started = time.perf_counter()
        text = TextPipeline(request.tools, on_event=on_event)  # the server cuts at the stop strings
        streamed_calls: dict[int, dict[str, Any]] = {}
        stats = ReplyStats(stop_reason="end")
        first_at = last_at = None
        chunks = 0
        finish = None
        try:
            resp = urllib.request.urlopen(self._request("/chat/completions", self._body(request)), timeout=self.timeout)
        except (urllib.error.URLError, OSError) as exc:
            raise self._explain(exc) from None
        try:
            with resp:
                for line in resp:
                    if should_stop is not None and should_stop():
                        stats.stop_reason = "stopped"
                        break
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        break
                    try:
                        chunk = json.loads(payload)
                    except ValueError:
                        raise EngineError(f"{self.endpoint.name} sent a malformed stream chunk: "
                                          f"{payload[:80]!r}") from None
                    if isinstance(chunk.get("usage"), dict):
                        _read_usage(chunk["usage"], stats)
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        finish = choice.get("finish_reason") or finish
                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                        content = delta.get("content")
                        if reasoning or content or delta.get("tool_calls"):
                            now = time.perf_counter()
                            first_at = first_at or now
                            last_at = now
                            chunks += 1
                        if reasoning:
                            text.feed_reasoning(reasoning)
                        if content:
                            text.feed_text(content)
                        for tc in delta.get("tool_calls") or []:
                            slot = streamed_calls.setdefault(int(tc.get("index", len(streamed_calls))),
                                                             {"name": "", "arguments": ""})
                            fn = tc.get("function") or {}
                            slot["name"] += fn.get("name") or ""
                            slot["arguments"] += fn.get("arguments") or ""
        except (TimeoutError, ConnectionError, OSError, http.client.HTTPException) as exc:
            raise EngineError(f"{self.endpoint.name} closed the stream after {chunks} chunk(s): "
                              f"{type(exc).__name__}") from None
        if finish is None and stats.stop_reason != "stopped":
            raise EngineError(f"{self.endpoint.name} closed the stream after {chunks} chunk(s) without finishing")
        written = text.finish()
        if finish == "length":
            stats.stop_reason = "length"
        if not stats.generated_tokens:
            stats.generated_tokens = chunks
        stats.ttft_seconds = (first_at - started) if first_at else 0.0
        stats.wall_seconds = (last_at - first_at) if first_at and last_at else 0.0
        tool_calls = list(written.tool_calls)
        for i in sorted(streamed_calls):
            item = streamed_calls[i]
            tool_calls.append(parse_call(json.dumps({"name": item["name"], "arguments": item["arguments"] or "{}"}), i))
        reply = Reply(written.text, written.reasoning, written.raw, json.dumps(request.messages)[:2000], stats,
                      tool_calls)
        return check_reply(reply, request)


def _count(value: Any) -> int:
    """A token count from a server's usage: a non-negative integer, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _read_usage(usage: dict[str, Any], stats: ReplyStats) -> None:
    """A server's usage figures into the stats. OpenAI's `prompt_tokens_details.cached_tokens` (sent by
    OpenAI, vLLM, llama-server and this app's server) says how much of the prompt came from the cache:
    the rest was evaluated now. Without it, the whole prompt counts as evaluated (nothing says otherwise)."""
    stats.prompt_tokens = _count(usage.get("prompt_tokens"))
    stats.generated_tokens = _count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    stats.prompt_evaluated = max(0, stats.prompt_tokens - cached)


def _openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Template-shaped messages (tool call arguments as objects) in OpenAI's shape (arguments as JSON text)."""
    out = []
    for m in messages:
        msg = {k: v for k, v in m.items() if k in ("role", "content", "name", "tool_call_id")}
        if m.get("tool_calls"):
            msg["tool_calls"] = [{"id": c.get("id") or f"call_{j}", "type": "function",
                                  "function": {"name": c["function"]["name"],
                                               "arguments": json.dumps(c["function"].get("arguments", {}))}}
                                 for j, c in enumerate(m["tool_calls"])]
            msg["content"] = m.get("content") or None
        out.append(msg)
    return out
