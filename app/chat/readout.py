"""The live speed readout of a reply being written: tokens per second, time to the first token and
the tokens so far. No Qt: the window's chat controller feeds it and shows `text()` on a timer.

It counts tokens, not streamed events: one token may stream nothing (half a UTF-8 character, text
held back by a stop string) and one event may carry several tokens (a tool call, the tail flushed at
the end). The count comes from the engine's own per-token beat (the local engine polls its stop
flag once between tokens); `final()` is the engine's own measure once the reply is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.engine.contract import ReplyStats


@dataclass
class Readout:
    requested_at: float = 0.0  # when the request was sent (perf_counter seconds)
    first_at: float | None = None  # when the first token arrived
    last_at: float | None = None  # when the latest token arrived
    tokens: int = 0

    def start(self, now: float) -> None:
        self.requested_at, self.first_at, self.last_at, self.tokens = now, None, None, 0

    def count(self, tokens: int, now: float) -> None:
        """The reply has `tokens` tokens at `now` (a running total, never less than before)."""
        if tokens <= self.tokens:
            return
        if self.first_at is None:
            self.first_at = now
        self.tokens, self.last_at = tokens, now

    def tokens_per_second(self) -> float:
        """Tokens after the first over the time since it (the first token's wait is the prompt's)."""
        if self.first_at is None or self.last_at is None or self.tokens < 2:
            return 0.0
        elapsed = self.last_at - self.first_at
        return (self.tokens - 1) / elapsed if elapsed > 0 else 0.0

    def text(self) -> str:
        if self.first_at is None:
            return "waiting for the first token…"
        return (f"{self.tokens_per_second():.1f} tok/s · first token {self.first_at - self.requested_at:.2f} s · "
                f"{self.tokens} tokens")


def final_text(stats: ReplyStats) -> str:
    """The readout once the reply is done: the engine's own measure."""
    return (f"{stats.generation_tps:.1f} tok/s · first token {stats.ttft_seconds:.2f} s · "
            f"{stats.generated_tokens} tokens")
