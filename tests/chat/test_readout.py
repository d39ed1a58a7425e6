"""The live readout counts tokens, not streamed events, and says the engine's own figures at the end."""

from __future__ import annotations

from app.chat.readout import Readout, final_text
from app.engine.contract import ReplyStats


def test_tokens_per_second_counts_tokens_after_the_first():
    r = Readout()
    r.start(10.0)
    assert r.text() == "waiting for the first token…"
    r.count(1, 10.5)  # the first token after 0.5 s of prompt
    r.count(1, 10.6)  # a beat with no new token changes nothing
    assert r.tokens_per_second() == 0.0
    r.count(41, 11.5)  # 40 more tokens in one second, however many events they streamed as
    assert r.tokens_per_second() == 40.0
    assert r.text() == "40.0 tok/s · first token 0.50 s · 41 tokens"
    r.count(30, 12.0)  # a running total never goes back
    assert r.tokens == 41 and r.last_at == 11.5


def test_the_final_text_is_the_engines_measure():
    stats = ReplyStats(generated_tokens=12, ttft_seconds=0.25)
    stats.wall_seconds = 0.5
    assert final_text(stats) == f"{stats.generation_tps:.1f} tok/s · first token 0.25 s · 12 tokens"
