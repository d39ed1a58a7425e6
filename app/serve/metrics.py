"""The local server's Prometheus metrics (`GET /metrics`, prometheus_client's text format): requests
by route and status, prompt and generated tokens, the requests waiting in line and the slots busy.
One registry per server, so two servers in a process (the tests) count apart. No Qt."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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


class ServerMetrics:
    """The counters a server keeps; the line's length and the busy slots are read when scraped."""

    def __init__(self, waiting: Callable[[], int], busy: Callable[[], int], slots: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("clover_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=self.registry)
        self.prompt_tokens = Counter("clover_prompt_tokens", "prompt tokens of the replies written",
                                     registry=self.registry)
        self.cached_tokens = Counter("clover_prompt_cached_tokens", "of those, reused from the cache",
                                     registry=self.registry)
        self.generated_tokens = Counter("clover_generated_tokens", "tokens generated", registry=self.registry)
        self.replies = Counter("clover_replies", "replies written, by how they ended", ["stop_reason"],
                               registry=self.registry)
        queue = Gauge("clover_queue_length", "requests waiting for a slot", registry=self.registry)
        queue.set_function(lambda: float(waiting()))
        busy_gauge = Gauge("clover_slots_busy", "slots generating for the server's clients", registry=self.registry)
        busy_gauge.set_function(lambda: float(busy()))
        total = Gauge("clover_slots", "slots for the server's clients", registry=self.registry)
        total.set_function(lambda: float(slots()))

    def answered(self, path: str, status: int) -> None:
        self.requests.labels(route_label(path), str(status)).inc()

    def reply(self, prompt: int, cached: int, generated: int, stop_reason: str) -> None:
        self.prompt_tokens.inc(prompt)
        self.cached_tokens.inc(cached)
        self.generated_tokens.inc(generated)
        self.replies.labels(stop_reason or "unknown").inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)
