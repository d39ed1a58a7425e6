"""Parallel slots through the headless server: `python -m app serve MODEL --parallel 4`, measured.

    python -m tests.bench.parallel_serve [--model GGUF] [--parallel 4] [--rounds 3] [--tokens 96]

Each round, interleaved on one server with default settings (drafting included): the 4 requests one
at a time, then the same 4 as 4 concurrent streaming clients, then llama.cpp's own
`llama-batched-bench` (built from the vendored source by `python3 packaging/bootstrap.py llama-bench`)
at B=1 and B=4 with the requests' prompt length, so that the sides of a round share the machine's
noise. Printed:
- aggregate output tokens per second, concurrent against one at a time (issue 39's target: >= 1.5x),
  beside llama.cpp's own ceiling for it on this machine, its S_TG at B=4 against B=1 in the same
  round (on SmolLM2 on this 2-core CPU 1.2x to 1.4x; on a GPU, where decoding is bound by memory
  bandwidth, far higher), and the server's ratio as a share of that ceiling;
- the server's decode rate while all clients stream (what S_TG is: every sequence generating; from
  the clients' own clock, between the last client's first piece and the first client's last) against
  llama-batched-bench's S_TG at B=4 (target >= 0.95, issue 39);
- the same without HTTP: the engine alone in this process, the 4 prompts at once on 4 slots, each round
  beside llama-batched-bench (target >= 0.95). On this 2-core machine the server's threads and the
  clients' run on the cores the decode uses (about 0.3 ms of CPU a token: the event loop's socket
  writes, the replies' text, the clients' parsing), which the engine alone does not pay;
- each client's time to first token;
- how many concurrent replies are the text of the same request made alone (in one KV pool a
  sequence's cells lie wherever cells were free and attention visits them in cell order, so a reply
  may part at a near-tie: tests/engine/test_slots.py checks that it is one, with the logits);
- with `--hybrid`: the tiny model of Clover's architecture (a recurrent state per slot), where only
  the replies and the planner's slot memory against llama.cpp's buffers are of interest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from tests.bench.docs_table import add_docs_flag, write_verdicts
from tests.bench.stock_server import llama_server, llama_tool
from tests.bench.verdict import Verdicts
from tests.helpers.app_process import start_app

PROMPTS = ["Write a long story about a lighthouse keeper.", "Write a long story about a robot who learns to paint.",
           "Write a long story about a river town in winter.", "Write a long story about two rival bakers."]


def start_server(model: str, *options: object) -> tuple[subprocess.Popen, str]:
    """`serve` MODEL on a free port with `options` (its output echoed): the process and its URL."""
    proc = start_app("serve", model, "--port", "0", *options)
    assert proc.stdout is not None
    for line in proc.stdout:
        print(f"  server: {line.rstrip()}", flush=True)
        if line.startswith("listening on "):
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
            return proc, line.split()[-1]
    raise SystemExit("the server did not start")


def ask(url: str, prompt: str, tokens: int) -> dict:
    """One streaming request: its text, output tokens (usage), time to first token and end, from send,
    and when each piece came (perf_counter)."""
    body = json.dumps({"model": "m", "stream": True, "stream_options": {"include_usage": True}, "temperature": 0,
                       "max_tokens": tokens, "messages": [{"role": "user", "content": prompt}]}).encode()
    sent = time.perf_counter()
    req = urllib.request.Request(url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
    text, first, usage, stamps = [], None, None, []
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                piece = (delta.get("reasoning_content") or "") + (delta.get("content") or "")
                if piece:
                    now = time.perf_counter()
                    first = first or now
                    text.append(piece)
                    stamps.append(now)
    end = time.perf_counter()
    return {"text": "".join(text), "tokens": usage["completion_tokens"] if usage else 0, "prompt": usage and
            usage["prompt_tokens"], "ttft": (first or end) - sent, "end": end - sent, "sent": sent, "stamps": stamps}


def concurrent(url: str, tokens: int, prompts: list[str] = PROMPTS) -> tuple[list[dict], float]:
    """The prompts as concurrent streaming clients: their replies, and the seconds until the last ended."""
    out: list[dict] = [{}] * len(prompts)

    def run(i: int) -> None:
        out[i] = ask(url, prompts[i], tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.perf_counter() - start


def steady_rate(replies: list[dict]) -> float:
    """Pieces a second while every reply streams: between the last first piece and the first last one."""
    start = max(x["stamps"][0] for x in replies if x["stamps"])
    end = min(x["stamps"][-1] for x in replies if x["stamps"])
    pieces = sum(sum(start < t <= end for t in x["stamps"]) for x in replies)
    return pieces / (end - start) if end > start else float("nan")


def engine_rounds(model: str, args: argparse.Namespace, exe: str, prompt_tokens: int) -> list[tuple[float, float]]:
    """The engine alone, in this process (no HTTP, no server): the same 4 prompts at once on 4 slots,
    each round beside llama-batched-bench with one KV pool, the slots' layout. (pieces a second while all
    generate, its S_TG at B=4)"""
    from app.engine.contract import ChatRequest, SamplingParams
    from app.engine.local import Engine
    from app.machine.llama_load import LoadSettings

    engine = Engine()
    engine.load(model, LoadSettings(n_ctx=args.ctx, parallel=args.parallel, speculative=args.speculative or "auto"))
    out: list[tuple[float, float]] = []
    try:
        for r in range(args.rounds + 1):  # the first warms up
            stamps: list[list[float]] = [[] for _ in PROMPTS]

            def run(i: int, mine: list[float]) -> None:
                request = ChatRequest([{"role": "user", "content": PROMPTS[i]}], client="api",
                                      sampling=SamplingParams(temperature=0.0, max_tokens=args.tokens))
                engine.generate(request, on_event=lambda kind, text: mine.append(time.perf_counter()))

            threads = [threading.Thread(target=run, args=(i, stamps[i])) for i in range(len(PROMPTS))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if not r:
                continue
            bench = batched_bench(model, args.parallel, prompt_tokens, args.tokens, exe, unified=True)
            if bench and args.parallel in bench:
                rate = steady_rate([{"stamps": s} for s in stamps])
                out.append((rate, bench[args.parallel]["speed_tg"]))
                print(f"  engine round {r}: all generating {rate:.1f} tok/s; llama-batched-bench -kvu S_TG "
                      f"B={args.parallel} {out[-1][1]:.1f} tok/s; {rate / out[-1][1]:.2f}x", flush=True)
    finally:
        engine.unload()
    return out


def batched_bench_exe(exe: str | None = None) -> str | None:
    """`exe`, else the llama-batched-bench bootstrap.py builds; None when it cannot be built."""
    return exe if exe is not None else llama_tool("llama-batched-bench")


def batched_bench(model: str, parallel: int, pp: int, tg: int, exe: str, *, unified: bool = False) -> dict | None:
    """llama-batched-bench's rows by parallel count (`exe`, at B=1 and B=`parallel`; `unified`: B=`parallel`
    only, with one KV pool for every sequence, `-kvu`, the layout of the app's slots)."""
    out = subprocess.run([exe, "-m", model, "-c", str(parallel * (pp + tg + 16)), "-b", "512", "-ub", "512",
                          "-npp", str(pp), "-ntg", str(tg), "-npl", str(parallel) if unified else f"1,{parallel}",
                          "-t", "2", *(["-kvu"] if unified else []), "--output-format", "jsonl"],
                         capture_output=True, text=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    rows += [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    return {r["pl"]: r for r in rows} or None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a GGUF (default: SmolLM2-135M, or the tiny hybrid with --hybrid)")
    ap.add_argument("--hybrid", action="store_true", help="the tiny model of Clover's architecture")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--speculative", help="serve's --speculative (default: serve's own default)")
    ap.add_argument("--batched-bench", help="a llama-batched-bench binary (default: bootstrap.py's build)")
    ap.add_argument("--no-stock", action="store_true", help="skip llama-server (stock llama.cpp through HTTP)")
    add_docs_flag(ap)
    args = ap.parse_args()
    if args.model:
        model = args.model
    elif args.hybrid:
        from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

        model = str(write_qwen35moe(Path("/tmp") / "clover-bench-qwen35moe.gguf", qwen35_shape(n_ctx_train=32_768)))
    else:
        from tests.helpers.smollm2 import smollm2_path

        model = str(smollm2_path())
    print(f"model {Path(model).name}, {args.parallel} slots of {args.ctx} tokens, {args.tokens} tokens a reply")
    exe = None if args.hybrid else batched_bench_exe(args.batched_bench)
    proc, url = start_server(model, "--ctx", args.ctx, "--parallel", args.parallel,
                             *(("--speculative", args.speculative) if args.speculative else ()))
    stock_exe = None if args.hybrid or args.no_stock else llama_tool("llama-server")
    ratios, ceilings, shares, rates, s_tgs, ttfts, same = [], [], [], [], [], [], [0, 0]
    pooled: list[float] = []  # llama-batched-bench's S_TG with one KV pool (-kvu), the slots' layout
    stock_rates: list[float] = []  # llama-server's (one pool too), while all its clients stream, in the same rounds
    try:
        alone = [ask(url, p, args.tokens) for p in PROMPTS]  # warm-up, and the lone replies
        alone_texts = [x["text"] for x in alone]
        prompt_tokens = int(statistics.median(x["prompt"] or 40 for x in alone))  # the requests' own length
        for r in range(args.rounds):
            t0 = time.perf_counter()
            one = [ask(url, p, args.tokens) for p in PROMPTS]
            t_one = time.perf_counter() - t0
            many, t_many = concurrent(url, args.tokens)
            n_one, n_many = sum(x["tokens"] for x in one), sum(x["tokens"] for x in many)
            ratio = (n_many / t_many) / (n_one / t_one)
            ratios.append(ratio)
            rates.append(steady_rate(many))
            ttfts.append([x["ttft"] for x in many])
            texts = [x["text"] for x in many]
            same = [same[0] + sum(a == b for a, b in zip(texts, alone_texts, strict=True)), same[1] + len(texts)]
            line = (f"  round {r + 1}: one at a time {n_one / t_one:7.1f} tok/s, {len(many)} at once "
                    f"{n_many / t_many:7.1f} tok/s ({ratio:.2f}x); all streaming {rates[-1]:.1f} tok/s; time to "
                    "first token " + ", ".join(f"{t:.2f}" for t in ttfts[-1]) + " s; same text as alone: "
                    + f"{sum(a == b for a, b in zip(texts, alone_texts, strict=True))} of {len(texts)}")
            bench = batched_bench(model, args.parallel, prompt_tokens, args.tokens, exe) if exe else None
            if bench and args.parallel in bench and 1 in bench:
                s_tg, s_one = bench[args.parallel]["speed_tg"], bench[1]["speed_tg"]
                s_tgs.append(s_tg)
                ceilings.append(s_tg / s_one)
                shares.append(ratio / ceilings[-1])
                line += (f"; llama-batched-bench S_TG B=1 {s_one:.1f}, B={args.parallel} {s_tg:.1f} tok/s "
                         f"({ceilings[-1]:.2f}x); all streaming / S_TG {rates[-1] / s_tg:.2f}x")
                one_pool = batched_bench(model, args.parallel, prompt_tokens, args.tokens, exe, unified=True)
                if one_pool and args.parallel in one_pool:
                    pooled.append(one_pool[args.parallel]["speed_tg"])
                    line += (f"; one pool (-kvu) S_TG {pooled[-1]:.1f} tok/s, all streaming / it "
                             f"{rates[-1] / pooled[-1]:.2f}x")
            if stock_exe:  # stock llama.cpp through HTTP, the same clients, after ours (one server decoding at a time)
                with llama_server(stock_exe, model, "-c", args.parallel * args.ctx, "-np", args.parallel,
                                  "-kvu", "-t", 2, "-tb", 2) as stock_url:
                    ask(stock_url, PROMPTS[0], 8)  # warm-up
                    stock_rates.append(steady_rate(concurrent(stock_url, args.tokens)[0]))
                line += f"; llama-server all streaming {stock_rates[-1]:.1f} tok/s"
                if pooled:
                    line += f" ({stock_rates[-1] / pooled[-1]:.2f}x one pool's S_TG)"
            print(line, flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    ratio = statistics.median(ratios)
    verdicts = Verdicts()
    print("\n  each client's time to first token (s), per round: " + "; ".join(
        ", ".join(f"{t:.2f}" for t in row) for row in ttfts))
    print(f"  replies at once that are the text of the reply alone: {same[0]} of {same[1]} (the others part at "
          "near-ties: tests/engine/test_slots.py)")
    if args.hybrid:  # a tiny model replies at the server's per-token overhead, not at decoding's pace: no target
        print(f"  aggregate, {args.parallel} at once / one at a time: {ratio:.2f}x (median of {len(ratios)}; the "
              "tiny model's rate is the server's per-token overhead, so the 1.5x target is SmolLM2's)")
    else:
        if s_tgs:
            ceiling, share = statistics.median(ceilings), statistics.median(shares)
            print(f"  llama.cpp's own ceiling here: llama-batched-bench S_TG at B={args.parallel} / B=1 {ceiling:.2f}x "
                  f"(median of {len(ceilings)}); the server's ratio is {share:.2f} of it")
        verdict = verdicts.check(f"{args.parallel} slots / one at a time", ratio, ratio >= 1.5, ">= 1.5")
        print(f"  aggregate, {args.parallel} at once / one at a time: {ratio:.2f}x (median of {len(ratios)}; "
              f"target >= 1.5)  {verdict}")
        if s_tgs:
            ratio_b = statistics.median(r / t for r, t in zip(rates, s_tgs, strict=True))
            print(f"  the server's rate while all {args.parallel} stream / llama-batched-bench's S_TG with one KV "
                  f"stream a sequence (its default; each sequence attends to its own cells only): {ratio_b:.2f}x "
                  "(median of the rounds)")
        if pooled and len(pooled) == len(rates):
            ratio_p = statistics.median(r / t for r, t in zip(rates, pooled, strict=True))
            cost = statistics.median(p / t for p, t in zip(pooled, s_tgs, strict=True)) if len(s_tgs) == len(pooled) \
                else float("nan")
            verdict = verdicts.check("all streaming / llama-batched-bench", ratio_p, ratio_p >= 0.95, ">= 0.95")
            print(f"  the server's rate while all {args.parallel} stream / llama-batched-bench's S_TG with one KV pool "
                  f"(-kvu: the slots' layout, where a lone conversation keeps the whole context): {ratio_p:.2f}x "
                  f"(median of the rounds; target >= 0.95)  {verdict}\n"
                  f"    (one pool costs llama.cpp itself {cost:.2f}x of one stream a sequence here: every "
                  "sequence's attention spans the pool's used cells)")
            if len(stock_rates) == len(pooled):
                ratio_s = statistics.median(r / t for r, t in zip(stock_rates, pooled, strict=True))
                print(f"  stock llama.cpp through HTTP (llama-server -np {args.parallel} -kvu, the same clients): "
                      f"{ratio_s:.2f}x that S_TG (median of the rounds)")
        if stock_rates:
            ratio_o = statistics.median(r / t for r, t in zip(rates, stock_rates, strict=True))
            print(f"  the server's rate while all {args.parallel} stream / llama-server's, same clients, same rounds: "
                  f"{ratio_o:.2f}x (median of the rounds; faster than stock: > 1)")
        if exe:  # the same, without HTTP: on 2 cores the server's threads and the clients share the decode's
            print("\n  the engine alone, in this process:")
            alone_rounds = engine_rounds(model, args, exe, prompt_tokens)
            if alone_rounds:
                ratio_e = statistics.median(r / t for r, t in alone_rounds)
                verdict = verdicts.check("engine alone / llama-batched-bench", ratio_e, ratio_e >= 0.95, ">= 0.95")
                print(f"  the engine's rate while all {args.parallel} generate / llama-batched-bench's S_TG "
                      f"(one pool): {ratio_e:.2f}x (median of the rounds; target >= 0.95)  {verdict}")
    if args.hybrid:
        from app.gguf.gguf_file import read_header
        from app.gguf.model_facts import facts_from_header
        from app.machine.llama_load import LoadSettings, capture_log, load_llama, parse_buffers
        from app.model.plan import breakdown, draft_max

        facts = facts_from_header(read_header(model))
        planned = breakdown(facts, args.ctx, (), "f16", "f16", on_gpu=False, parallel=args.parallel)
        with capture_log() as lines:
            load_llama(model, LoadSettings(n_ctx=args.ctx, parallel=args.parallel, draft_max=draft_max(facts)),
                       n_threads=2).close()  # the draft length the plan gives the load
        got = parse_buffers(lines)
        mib = 1024 * 1024
        print(f"  slot memory: planned KV {planned.kv / mib:.2f} MiB, recurrent {planned.recurrent / mib:.2f} MiB "
              f"({args.parallel} x {facts.recurrent_state_per_seq / mib:.3f}) and drafting's rollback snapshots "
              f"{planned.rollback / mib:.2f} MiB; llama.cpp allocated KV {got.total('KV') / mib:.2f} MiB, RS (the "
              f"states and their snapshots) {got.total('RS') / mib:.2f} MiB")
    code = verdicts.finish()
    write_verdicts("parallel_serve", verdicts, args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
