"""The prompt cache (issue 40): prefixes found again across conversations, slots and restarts, with
the reply of a cold read, bit for bit; entries of another model, damaged files and a full disk never
change a reply.

The read plan's bounds first (pure functions, many random token lists), then the cache on SmolLM2 and
on the tiny hybrid (Clover's architecture: its recurrent state is part of each entry), in the token
loop and in parallel slots.
"""

from __future__ import annotations

import errno
import logging
import random
from pathlib import Path

import numpy as np
import pytest

from app.engine.contract import ChatRequest, SamplingParams
from app.engine.local import Engine
from app.engine.prompt_cache_files import SUFFIX, clear_folder, folder_size
from app.engine.read_plan import ReadPlan
from app.machine.llama_load import LoadSettings
from tests.engine.test_reproducible import _clear as _forget
from tests.helpers.engines import wait_for_disk_tier

CHUNK = 64
REPLY = 24
WORDS = ("the keeper climbed stairs while storm broke over rocks and lamp turned def add total value return "
         "list seven green quiet market window bread north river stone paper robot write count step").split()


# ---------------------------------------------------------------------------------------------- bounds


def _tokens(rng: random.Random, n: int, turn: int) -> list[int]:
    return [turn if rng.random() < 0.03 else rng.randint(0, 50) for _ in range(n)]


def test_bounds_of_a_prefix_are_the_bounds_of_the_whole_before_its_end():
    """What comes after a position never moves a bound before it: the property that makes a cached
    prefix's state a cold read's state for every prompt that starts with it."""
    rng = random.Random(1)
    for _ in range(300):
        plan = ReadPlan(rng.randint(1, 40), [99])
        tokens = _tokens(rng, rng.randint(1, 400), 99)
        whole = plan.bounds(tokens)
        for m in sorted({rng.randint(1, len(tokens)) for _ in range(8)}):
            part = plan.bounds(tokens[:m])
            assert part[part < m].tolist() == whole[whole < m].tolist()
            for p in range(1, m):
                assert plan.is_bound(tokens, p) == (p in set(whole.tolist()))


def test_bounds_are_turn_starts_and_chunks_from_each():
    plan = ReadPlan(4, [9])
    tokens = [1, 2, 3, 4, 5, 6, 9, 1, 2, 9, 1, 2, 3, 4, 5, 6, 7, 8]
    # chunks from 0: 4; turn at 6; turn at 9; chunks from 9: 13, 17; the end (18) is not a chunk's end
    assert plan.bounds(tokens).tolist() == [4, 6, 9, 13, 17]
    assert plan.bounds(tokens[:17]).tolist() == [4, 6, 9, 13, 17]  # the end where a chunk ends there
    assert ReadPlan(4).bounds(tokens).tolist() == [4, 8, 12, 16]  # no turn tokens: chunks from 0


def test_reuse_stops_at_a_bound_of_both_within_what_they_share():
    rng = random.Random(2)
    for _ in range(500):
        plan = ReadPlan(rng.randint(1, 16), [99])
        cached = _tokens(rng, rng.randint(1, 120), 99)
        prompt = cached[:rng.randint(0, len(cached))] + _tokens(rng, rng.randint(1, 60), 99)
        shared = next((i for i, (a, b) in enumerate(zip(cached, prompt, strict=False)) if a != b),
                      min(len(cached), len(prompt)))
        exact = plan.floor(plan.bounds(cached), rng.randint(0, len(cached)))
        n = plan.reuse(plan.bounds(prompt), len(prompt), shared, exact, cached)
        assert 0 <= n <= min(shared, len(prompt) - 1, exact)
        if n:
            assert plan.is_bound(prompt, n) and plan.is_bound(cached, n)
        # nothing larger would do
        for m in range(n + 1, min(shared, len(prompt) - 1, exact) + 1):
            assert not (plan.is_bound(prompt, m) and plan.is_bound(cached, m))


def test_ram_eviction_takes_the_least_recently_used_and_unmarked_first():
    from app.engine.prompt_cache import Entry, PromptCache, keep_until

    cache = PromptCache({"test": 1}, ram_bytes=250, folder=None, disk_bytes=0)
    entries = [Entry(np.arange(n, dtype=np.int32), 100, data=bytes(100), used=float(n)) for n in (1, 2, 3)]
    entries[0].keep = keep_until(True)  # the oldest, but marked by its client
    cache.entries = list(entries)
    cache._evict_ram()
    assert [len(e) for e in cache.entries] == [1, 3]  # the unmarked older one went (no disk: gone for good)
    assert cache.ram_used() <= 250


def test_clients_mark_prefixes_to_keep(tmp_path):
    from app.serve.anthropic_messages import MessagesSurface
    from app.serve.openai_responses import ResponsesSurface
    from app.serve.response_store import ResponseStore

    store = ResponseStore(tmp_path)

    system = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    marked = MessagesSurface({"model": "m", "max_tokens": 10, "system": system,
                              "messages": [{"role": "user", "content": "hi"}]})
    plain = MessagesSurface({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    assert marked.request.keep_cache and not plain.request.keep_cache
    assert ResponsesSurface({"model": "m", "input": "hi", "prompt_cache_key": "session-1"}, store).request.keep_cache
    assert not ResponsesSurface({"model": "m", "input": "hi"}, store).request.keep_cache


# ---------------------------------------------------------------------------------------------- engines


def _settings(parallel: int, ram_mb: int = 256, disk_mb: int = 1024, **kw) -> LoadSettings:
    return LoadSettings(n_ctx=2048 * parallel, n_batch=CHUNK, n_ubatch=CHUNK, n_threads=2, n_threads_batch=2,
                        n_outputs_max=1, speculative="off", parallel=parallel, ctx_checkpoints=8 * parallel,
                        cache_ram_mb=ram_mb, cache_disk_mb=disk_mb, kv_unified=kw.pop("kv_unified", False), **kw)


def _request(messages: list[dict], max_tokens: int = REPLY) -> ChatRequest:
    return ChatRequest(messages, enable_thinking=False,
                       sampling=SamplingParams(temperature=0.0, seed=1, max_tokens=max_tokens))


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _load(path: Path, settings: LoadSettings) -> Engine:
    engine = Engine()
    engine.load(path, settings)
    if engine.prompt_cache is not None and settings.cache_disk_mb:
        wait_for_disk_tier(engine)
    return engine



def _folder() -> Path:
    from app.base.paths import app_dirs

    return app_dirs().data / "prompt-cache"


@pytest.fixture(scope="module")
def models(smollm2, qwen35moe_model, gemma3_model):
    return {"smollm2": smollm2, "qwen35moe": qwen35moe_model, "gemma3": gemma3_model}


def _conversations(rng: random.Random, n: int) -> list[list[dict]]:
    """Agent-like requests: two long system prompts shared by several conversations, some with turns
    before the question."""
    systems = [_words(rng, 120, 260) for _ in range(2)]
    out = []
    for i in range(n):
        head = [{"role": "system", "content": systems[i % 2]}]
        for _ in range(rng.randint(0, 2)):
            head += [{"role": "user", "content": _words(rng, 3, 25)},
                     {"role": "assistant", "content": _words(rng, 5, 40)}]
        out.append([*head, {"role": "user", "content": _words(rng, 3, 30)}])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("which", ["smollm2", "qwen35moe", "gemma3"])
@pytest.mark.parametrize("parallel", [1, 2], ids=["token loop", "slots"])
def test_replies_from_the_cache_are_the_cold_replies_across_switches_and_restarts(models, which, parallel,
                                                                                  clover_home, capsys):
    """Random conversations, each asked cold (an engine without a cache, its context cleared), then
    through one engine with the cache in an order that switches conversations, again after a restart
    (the disk tier), and each one's follow-up: every reply is the cold one, and the cache served most
    of the prompt tokens."""
    rng = random.Random(f"prompt-cache-{which}-{parallel}")
    conversations = _conversations(rng, 8)
    cold_engine = _load(models[which], _settings(parallel, ram_mb=0, disk_mb=0))
    assert cold_engine.prompt_cache is None
    cold: list[str] = []
    try:
        for messages in conversations:
            _forget(cold_engine)
            cold.append(cold_engine.generate(_request(messages)).raw)
        follow_ups = [[*m, {"role": "assistant", "content": c}, {"role": "user", "content": _words(rng, 2, 12)}]
                      for m, c in zip(conversations, cold, strict=True)]
        cold_follow = []
        for messages in follow_ups:
            _forget(cold_engine)
            cold_follow.append(cold_engine.generate(_request(messages)).raw)
    finally:
        cold_engine.unload()

    order = list(range(len(conversations)))
    total = evaluated = restored = 0
    differ = []
    engine = _load(models[which], _settings(parallel))
    try:
        for rounds in range(2):  # the second round switches back to each conversation
            rng.shuffle(order)
            for i in order:
                r = engine.generate(_request(conversations[i]))
                if r.raw != cold[i]:
                    differ.append(f"conversation {i}, round {rounds}")
                if rounds:
                    total += r.stats.prompt_tokens
                    evaluated += r.stats.prompt_evaluated
                    restored += r.stats.prompt_restored
    finally:
        engine.unload()  # its entries are on disk
    stats_before = (total, evaluated, restored)
    engine = _load(models[which], _settings(parallel))
    after_restart = []
    try:
        for i in order:
            r = engine.generate(_request(follow_ups[i]))
            if r.raw != cold_follow[i]:
                differ.append(f"follow-up {i} after a restart")
            after_restart.append((r.stats.prompt_tokens, r.stats.prompt_evaluated, r.stats.prompt_restored))
    finally:
        engine.unload()
    with capsys.disabled():
        t, e, rs = stats_before
        print(f"\n  {which}, {'token loop' if parallel == 1 else 'slots'}: switching back evaluated {e} of {t} "
              f"prompt tokens ({rs} restored from the cache); after a restart the follow-ups evaluated "
              f"{sum(x[1] for x in after_restart)} of {sum(x[0] for x in after_restart)} "
              f"({sum(x[2] for x in after_restart)} from disk); {len(differ)} replies differ from the cold ones")
    assert not differ
    assert e < 0.25 * t and rs > 0
    assert all(rest > 0 for _, _, rest in after_restart)  # every follow-up found its conversation on disk
    assert sum(x[1] for x in after_restart) < 0.5 * sum(x[0] for x in after_restart)


@pytest.mark.slow
def test_a_second_agent_session_reads_only_what_follows_the_shared_system_prompt(smollm2, clover_home):
    """Two sessions with the same long system prompt in `--parallel 4`, the second while the first is
    still being written (so in another slot): the second evaluates only its own message, the system
    part restored from the prompt cache. (Its reply is written beside another's, whose rows can round
    a near-tie otherwise: the property test above checks replies without traffic.)"""
    import threading

    rng = random.Random(5)
    system = _words(rng, 400, 500)
    second = _request([{"role": "system", "content": system}, {"role": "user", "content": "List three rivers."}])
    engine = _load(smollm2, _settings(4, disk_mb=0))
    started = threading.Event()
    try:
        first = threading.Thread(target=lambda: engine.generate(
            _request([{"role": "system", "content": system}, {"role": "user", "content": "Tell a long story."}],
                     max_tokens=300), on_event=lambda kind, text: started.set()))
        first.start()
        assert started.wait(120)
        b = engine.generate(second)
        busy = [s.seq for s in engine.slots.slots if s.job is not None]
        first.join()
        assert busy  # the first session was still being written in its slot
        assert b.stats.prompt_evaluated <= 0.15 * b.stats.prompt_tokens, b.stats
        assert b.stats.prompt_restored > 0
    finally:
        engine.unload()


def _entry_files() -> list[Path]:
    return sorted(_folder().rglob(f"*{SUFFIX}"))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flip a byte of the state", "cut the file short", "not a cache file"])
def test_a_damaged_entry_is_removed_and_the_request_read_cold(smollm2, clover_home, damage, caplog):
    rng = random.Random(7)
    messages = [{"role": "system", "content": _words(rng, 200, 220)}, {"role": "user", "content": "Tell a story."}]
    engine = _load(smollm2, _settings(1))
    try:
        first = engine.generate(_request(messages))
    finally:
        engine.unload()
    files = _entry_files()
    assert files
    damaged = {}
    for path in files:
        data = bytearray(path.read_bytes())
        if damage == "flip a byte of the state":
            data[-100] ^= 0xFF
        elif damage == "cut the file short":
            data = data[:len(data) // 2]
        else:
            data[:8] = b"GGUF\x03\x00\x00\x00"
        path.write_bytes(bytes(data))
        damaged[path] = bytes(data)
    engine = _load(smollm2, _settings(1))
    try:
        with caplog.at_level(logging.WARNING, logger="app.engine.prompt_cache"):
            again = engine.generate(_request(messages))
        assert again.raw == first.raw
        assert again.stats.prompt_restored == 0 and again.stats.prompt_evaluated == again.stats.prompt_tokens
        assert any("removed" in r.getMessage() for r in caplog.records)
        engine.prompt_cache.close()  # the cold read's entries are written again, whole
        assert not [p for p in files if p.exists() and p.read_bytes() == damaged[p]]
    finally:
        engine.unload()


@pytest.mark.slow
def test_entries_of_other_settings_are_never_used(smollm2, clover_home):
    """Another KV type changes the state's layout and numbers: its entries are another identity's."""
    rng = random.Random(8)
    messages = [{"role": "system", "content": _words(rng, 200, 220)}, {"role": "user", "content": "Count to five."}]
    engine = _load(smollm2, _settings(1, ram_mb=0))
    try:
        engine.generate(_request(messages))
    finally:
        engine.unload()
    engine = _load(smollm2, _settings(1, ram_mb=0, type_k="q8_0", type_v="q8_0"))
    try:
        r = engine.generate(_request(messages))
        assert r.stats.prompt_restored == 0
    finally:
        engine.unload()
    assert len({p.parent for p in _entry_files()}) == 2  # both kept, each under its own identity
    assert clear_folder(_folder()) > 0 and folder_size(_folder()) == (0, 0)


@pytest.mark.slow
def test_a_full_disk_never_fails_a_reply(smollm2, clover_home, monkeypatch, caplog):
    from app.engine import prompt_cache

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(prompt_cache.PromptCache, "_make_room", full)
    rng = random.Random(9)
    engine = _load(smollm2, _settings(1, ram_mb=64))
    try:
        with caplog.at_level(logging.WARNING, logger="app.engine.prompt_cache"):
            for _ in range(3):
                messages = [{"role": "system", "content": _words(rng, 150, 200)}, {"role": "user", "content": "Go."}]
                r = engine.generate(_request(messages))
                assert r.stats.generated_tokens > 0
            engine.prompt_cache.close()
        warnings = [r for r in caplog.records if "stops growing" in r.getMessage()]
        assert len(warnings) == 1
        assert not _entry_files()
        # the RAM tier still serves
        again = engine.generate(_request(messages))
        assert again.stats.prompt_restored > 0 or again.stats.prompt_evaluated < again.stats.prompt_tokens
    finally:
        engine.unload()


@pytest.mark.slow
def test_the_ram_tier_keeps_to_its_budget_and_spills_to_disk(smollm2, clover_home):
    rng = random.Random(10)
    engine = _load(smollm2, _settings(1, ram_mb=8))  # SmolLM2: 23 KiB a token, so one entry of ~300 tokens
    try:
        systems = [_words(rng, 150, 200) for _ in range(4)]
        for s in systems:
            engine.generate(_request([{"role": "system", "content": s}, {"role": "user", "content": "Hi."}]))
        cache = engine.prompt_cache
        snap = cache.snapshot()
        assert snap.ram_bytes <= 8 << 20
        cache.close()  # the writer is done
        assert cache.snapshot().disk_entries >= 4
        _forget(engine)
        r = engine.generate(_request([{"role": "system", "content": systems[0]}, {"role": "user", "content": "Hi."}]))
        assert r.stats.prompt_restored > 0  # from disk
        assert np.isfinite(r.stats.ttft_seconds)
    finally:
        engine.unload()
