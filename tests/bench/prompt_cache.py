"""The prompt cache (issue 40): what a request reads after a restart, a switch, a second agent session,
and the same request cold, warm and from disk.

    python -m tests.bench.prompt_cache [--model smollm2|qwen35moe|PATH] [--system-tokens 7000] [--threads 2]

On one file, greedy (temperature 0, seed 1), speculative decoding off, the engine loaded as by default
(n_batch 512) with the cache's two tiers in a throw-away data folder:
- restart: a 20-turn conversation's 19th request is answered, the engine is unloaded and loaded again
  (a restart: only the disk tier is left), and the 20th request is read; it evaluates at most its new
  tokens (the previous reply, rendered as history, and the new message) + 16, and its time to first
  token is at most 0.25x a cold read's (an engine without the cache, same run);
- switch: two conversations alternated 10 times in one slot: each request evaluates at most its new
  tokens + 16;
- agents: two sessions with the same long system prompt and a dozen JSON-schema tools (Claude Code's
  shape: 12,000 tokens there; here `--system-tokens`, within SmolLM2's 8,192-token window), a different
  first message each: the second evaluates at most 15 % of its prompt, in one slot and in another slot
  of `--parallel 4`;
- same: one request cold, warm and after a restart (from disk): the same text every time;
- throughput: the cache's store and restore MB/s and its bytes per token of state, and what the turn
  starts as read bounds cost a cold read of the 20-turn conversation (a decode per message) against
  chunks only, side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from app.engine.contract import ChatRequest, Reply, SamplingParams
from app.engine.local import Engine
from app.engine.read_plan import ReadPlan
from app.engine.sampler import chain_for
from app.engine.slots import Job, shared_prefix
from app.machine.llama_load import LoadSettings
from tests.bench.followups import model_path
from tests.bench.verdict import Verdicts

WORDS = ("the keeper climbed the lighthouse stairs while the storm broke over the rocks and the lamp turned "
         "slowly above the dark water ships passed far out at sea list files read edit run tests").split()
SLACK = 16


def words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def tools(rng: random.Random) -> list[dict]:
    out = []
    for i in range(12):
        props = {f"arg_{j}": {"type": rng.choice(["string", "integer", "boolean"]), "description": words(rng, 8, 20)}
                 for j in range(rng.randint(2, 6))}
        out.append({"type": "function", "function": {
            "name": f"tool_{i}", "description": words(rng, 20, 60),
            "parameters": {"type": "object", "properties": props, "required": list(props)[:1]}}})
    return out


def request(messages: list[dict], max_tokens: int = 16, tool_list: list[dict] | None = None) -> ChatRequest:
    return ChatRequest(messages, enable_thinking=False, tools=tool_list,
                       sampling=SamplingParams(temperature=0.0, seed=1, max_tokens=max_tokens))


class Bench:
    def __init__(self, path: Path, settings: LoadSettings) -> None:
        self.path, self.settings = path, settings

    def load(self, cache: bool = True, **kw) -> Engine:
        settings = replace(self.settings, **kw)
        if not cache:
            settings = replace(settings, cache_ram_mb=0, cache_disk_mb=0)
        engine = Engine()
        engine.load(self.path, settings)
        if engine.prompt_cache is not None and settings.cache_disk_mb:
            deadline = time.monotonic() + 120
            while engine.prompt_cache.folder is None and time.monotonic() < deadline:
                time.sleep(0.05)
        return engine

    def tokens(self, engine: Engine, req: ChatRequest) -> list[int]:
        return engine.tokenize_prompt(engine.render_prompt(req))


def conversation(rng: random.Random, turns: int) -> list[dict]:
    out: list[dict] = [{"role": "system", "content": words(rng, 40, 80)}]
    for _ in range(turns - 1):
        out += [{"role": "user", "content": words(rng, 10, 60)}, {"role": "assistant", "content": words(rng, 20, 120)}]
    return [*out, {"role": "user", "content": words(rng, 10, 60)}]


def new_tokens(previous: list[int], now: list[int]) -> int:
    return len(now) - shared_prefix(previous, now)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--system-tokens", type=int, default=7000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    verdicts = Verdicts()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CLOVER_HOME"] = str(Path(tmp) / "home")
        path, n_ctx_max = model_path(args.model, Path(tmp))
        n_ctx = min(n_ctx_max or 8192, 16_384)
        settings = LoadSettings(n_ctx=n_ctx, n_threads=args.threads, n_threads_batch=args.threads, n_outputs_max=1,
                                speculative="off", cache_ram_mb=1024, cache_disk_mb=4096)
        bench = Bench(path, settings)
        rng = random.Random(40)
        print(f"{path.name}: n_ctx {n_ctx}, n_batch {settings.n_batch}, {args.threads} threads")

        # ---------------------------------------------------------------- restart
        talk = conversation(rng, 20)
        engine = bench.load()
        p19 = request(talk[:-2])
        r19 = engine.generate(p19)
        p20 = request([*talk[:-2], {"role": "assistant", "content": r19.text}, talk[-1]])
        t19, t20 = bench.tokens(engine, p19), bench.tokens(engine, p20)
        engine.unload()
        engine = bench.load()
        warm = engine.generate(p20)
        engine.unload()
        engine = bench.load(cache=False)
        cold = engine.generate(p20)
        chunk_only = cold_read_seconds(engine, t20, turns=False)
        by_turn = cold_read_seconds(engine, t20, turns=True)
        engine.unload()
        new = new_tokens(t19, t20)
        extra = warm.stats.prompt_evaluated - new
        ttft = warm.stats.ttft_seconds / cold.stats.ttft_seconds
        print(f"restart: 20th turn of {len(t20)} tokens, {new} new: evaluated {warm.stats.prompt_evaluated} "
              f"({warm.stats.prompt_restored} restored from disk), time to first token {warm.stats.ttft_seconds:.3f} s "
              f"against {cold.stats.ttft_seconds:.3f} s cold; same reply: {warm.raw == cold.raw}")
        print(f"  evaluated beyond the new tokens  {extra}  (target <= {SLACK})  "
              f"{verdicts.check('restart: evaluated - new', extra, extra <= SLACK, f'<= {SLACK}', '{:.0f}')}")
        print(f"  TTFT restart / cold  {ttft:.3f}  (target <= 0.25)  "
              f"{verdicts.check('restart: TTFT / cold', ttft, ttft <= 0.25, '<= 0.25')}")
        same_reply = warm.raw == cold.raw
        verdicts.check("restart: same reply as cold", float(same_reply), same_reply, "= 1", "{:.0f}")
        speed = chunk_only / by_turn
        print(f"cold read of those {len(t20)} tokens, bounds at turn starts / chunks only: {by_turn:.3f} s / "
              f"{chunk_only:.3f} s: speed {speed:.2f}x  (target >= 0.90)  "
              f"{verdicts.check('cold read speed, turn bounds / chunks', speed, speed >= 0.90, '>= 0.90')}")

        # ---------------------------------------------------------------- switch
        engine = bench.load(cache_disk_mb=0)
        convs = [conversation(rng, 1), conversation(rng, 1)]
        last: list[list[int]] = [[], []]
        worst = 0
        for k in range(20):
            i = k % 2
            req = request(convs[i])
            toks = bench.tokens(engine, req)
            reply = engine.generate(req)
            if last[i]:
                worst = max(worst, reply.stats.prompt_evaluated - new_tokens(last[i], toks))
            last[i] = toks
            convs[i] = [*convs[i], {"role": "assistant", "content": reply.text},
                        {"role": "user", "content": words(rng, 5, 40)}]
        engine.unload()
        print(f"switch: two conversations alternated 10 times in one slot: each evaluated at most {worst} tokens "
              f"beyond its new ones  (target <= {SLACK})  "
              f"{verdicts.check('switch: evaluated - new', worst, worst <= SLACK, f'<= {SLACK}', '{:.0f}')}")

        # ---------------------------------------------------------------- agents
        tool_list = tools(rng)
        system = words(rng, 50, 50)
        engine = bench.load(cache=False)
        while len(bench.tokens(engine, request([{"role": "system", "content": system},
                                                {"role": "user", "content": "x"}], tool_list=tool_list))) \
                < min(args.system_tokens, n_ctx - 600):
            system += " " + words(rng, 40, 40)
        engine.unload()
        for parallel in (1, 4):
            engine = bench.load(parallel=parallel, n_ctx=n_ctx * parallel, cache_disk_mb=0)
            first = engine.generate(request([{"role": "system", "content": system},
                                             {"role": "user", "content": "Fix the failing test in tests/."}],
                                            tool_list=tool_list))
            second = engine.generate(request([{"role": "system", "content": system},
                                              {"role": "user", "content": "Write a title for this session."}],
                                             tool_list=tool_list))
            share = second.stats.prompt_evaluated / second.stats.prompt_tokens
            where = "one slot" if parallel == 1 else "--parallel 4"
            print(f"agents ({where}): the second session's {second.stats.prompt_tokens} tokens: evaluated "
                  f"{second.stats.prompt_evaluated} ({second.stats.prompt_restored} restored), the first's "
                  f"{first.stats.prompt_evaluated}: {share:.1%}  (target <= 15%)  "
                  f"{verdicts.check(f'agents, {where}: evaluated share', share, share <= 0.15, '<= 0.15')}")
            engine.unload()

        # ---------------------------------------------------------------- same
        req = request([{"role": "system", "content": words(rng, 300, 400)},
                       {"role": "user", "content": "Write a short story about the lamp."}], max_tokens=64)
        engine = bench.load()
        replies: list[Reply] = [engine.generate(req), engine.generate(req)]
        engine.unload()
        engine = bench.load()
        replies.append(engine.generate(req))
        stats = engine.prompt_cache.snapshot() if engine.prompt_cache else None
        engine.unload()
        same = len({r.raw for r in replies}) == 1
        print(f"same: cold, warm and after a restart: prompt evaluated {[r.stats.prompt_evaluated for r in replies]}, "
              f"restored {[r.stats.prompt_restored for r in replies]}; the same text: {same}  "
              f"{verdicts.check('same text cold / warm / restart', float(same), same, '= 1', '{:.0f}')}")

        # ---------------------------------------------------------------- throughput
        engine = bench.load(cache_disk_mb=0)
        engine.generate(req)
        s = engine.prompt_cache.snapshot()
        per_token = s.stored_bytes / max(1, sum(len(e) for e in engine.prompt_cache.entries))
        engine.unload()
        mb = 1024 * 1024
        store = s.stored_bytes / mb / s.store_seconds if s.store_seconds else 0.0
        restore = stats.restored_bytes / mb / stats.restore_seconds if stats and stats.restore_seconds else 0.0
        print(f"throughput: store {store:.0f} MB/s (RAM), restore {restore:.0f} MB/s (from disk, checked); "
              f"{per_token / 1024:.1f} KiB of state a token")
        print(json.dumps({"store_mb_s": round(store), "restore_disk_mb_s": round(restore),
                          "bytes_per_token": round(per_token)}))
    return verdicts.finish()


def cold_read_seconds(engine: Engine, tokens: list[int], turns: bool) -> float:
    """A cold read of `tokens` by the engine's scheduler, with its read plan or with chunks only
    (best of 3)."""
    slots = engine.slots
    assert slots is not None
    plan = slots.plan
    if not turns:
        slots.plan = ReadPlan(plan.chunk)
    best = float("inf")
    try:
        for _ in range(3):
            slots.forget()
            started = time.perf_counter()
            chain = chain_for(engine.llm, temperature=0.0, top_k=40, top_p=1.0, min_p=0.0)
            list(slots.stream(slots.submit(Job(list(tokens), chain, 1, eog=lambda t: False))))
            best = min(best, time.perf_counter() - started)
    finally:
        slots.plan = plan
    return best


if __name__ == "__main__":
    sys.exit(main())
