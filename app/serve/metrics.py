"""The local server's Prometheus metrics (`GET /metrics`, prometheus_client's text format): requests
by route and status; the prompt tokens of the replies written, those evaluated and those reused from
the cache; the tokens generated; the seconds spent on prompts and on generation (so a scraper's
rate of tokens over seconds is the server's speed over any window); the last reply's speeds as
gauges (tokens per second of its prompt and of its generation: one reply's figure, as the window's
readout shows it); the requests waiting in line and the slots busy. One registry per server, so two
servers in a process (the tests) count apart. No Qt."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from app.engine.contract import ReplyStats

ROUTES = ("/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/models",
          "/health", "/metrics")  # a route label is one of these, or "other" (no label per unknown path)
CONTENT_TYPE = CONTENT_TYPE_LATEST


def route_label(path: str) -> str:
    if path in ROUTES:
        return path
    for prefix in ("/v1/models/", "/v1/responses/"):
        if path.startswith(prefix):
            return prefix.rstrip("/")
    return "other"


def generation_seconds(stats: ReplyStats) -> float:
    """The seconds behind the reply's generation speed: llama.cpp's own evaluation time where it
    counted the tokens (ReplyStats.generation_tps does the same), else first to last token."""
    return stats.eval_seconds if stats.eval_tokens > 0 and stats.eval_seconds > 0 else stats.wall_seconds


class ServerMetrics:
    """The counters a server keeps; the line's length and the busy slots are read when scraped."""

    def __init__(self, waiting: Callable[[], int], busy: Callable[[], int], slots: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("clover_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.prompt_tokens = Counter("clover_prompt_tokens", "prompt tokens of the replies written", registry=r)
        self.evaluated_tokens = Counter("clover_prompt_evaluated_tokens", "of those, evaluated for the reply",
                                        registry=r)
        self.cached_tokens = Counter("clover_prompt_cached_tokens", "of those, reused from the cache", registry=r)
        self.generated_tokens = Counter("clover_generated_tokens", "tokens generated", registry=r)
        self.prompt_seconds = Counter("clover_prompt_seconds", "seconds spent evaluating prompts", registry=r)
        self.generation_seconds = Counter("clover_generation_seconds", "seconds spent generating", registry=r)
        self.prompt_tps = Gauge("clover_prompt_tokens_per_second",
                                "the last reply's prompt evaluation speed (0 when all of it came from the cache)",
                                registry=r)
        self.generation_tps = Gauge("clover_generation_tokens_per_second", "the last reply's generation speed",
                                    registry=r)
        self.replies = Counter("clover_replies", "replies written, by how they ended", ["stop_reason"], registry=r)
        queue = Gauge("clover_queue_length", "requests waiting for a slot", registry=r)
        queue.set_function(lambda: float(waiting()))
        busy_gauge = Gauge("clover_slots_busy", "slots generating for the server's clients", registry=r)
        busy_gauge.set_function(lambda: float(busy()))
        total = Gauge("clover_slots", "slots for the server's clients", registry=r)
        total.set_function(lambda: float(slots()))

    def answered(self, path: str, status: int) -> None:
        self.requests.labels(route_label(path), str(status)).inc()

    def reply(self, stats: ReplyStats) -> None:
        evaluated = min(stats.prompt_evaluated, stats.prompt_tokens)
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.evaluated_tokens.inc(evaluated)
        self.cached_tokens.inc(stats.prompt_tokens - evaluated)
        self.generated_tokens.inc(stats.generated_tokens)
        self.prompt_seconds.inc(max(0.0, stats.prompt_seconds))
        self.generation_seconds.inc(max(0.0, generation_seconds(stats)))
        self.prompt_tps.set(stats.prompt_tps)
        self.generation_tps.set(stats.generation_tps)
        self.replies.labels(stats.stop_reason or "unknown").inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)
