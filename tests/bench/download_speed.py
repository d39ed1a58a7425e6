"""The downloader against curl on loopback, same file, same server, one run.

    python -m tests.bench.download_speed [--size-mb 1024] [--reps 3]

Serves a file from a local server (zero-copy sendfile), then times, interleaved: `curl -o`, and
our downloader in a fresh process (hashing SHA-256 while it downloads, fsync and rename at the
end, as in the app) with its peak RSS. Every run writes a new file after `sync`, so neither pays
for the other's writeback. Targets: ours >= 0.9 x curl's throughput; memory flat (no growth with
the file size).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers.http_server import ServerState, serve

OURS = ("import sys; from app import download; "
        "download.Downloader(token='', allow_http=True).download(sys.argv[1], sys.argv[2])")


def timed(cmd: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd[0]} failed: {proc.stderr.read().decode()[-1000:]}")
    return elapsed, usage.ru_maxrss * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=6, help="a multiple of 3: each contender runs first, second, third")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="clover-dl-bench-"))
    src = work / "model.gguf"
    block = os.urandom(64 << 20)
    with open(src, "wb") as f:
        for _ in range(args.size_mb // 64):
            f.write(block)
    del block
    size = src.stat().st_size
    subprocess.run(["cat", str(src)], stdout=subprocess.DEVNULL, check=True)
    names = ("curl", "curl + sync", "ours")
    results: dict[str, list[float]] = {n: [] for n in names}
    rss: list[int] = []
    with serve(ServerState(files={"/m.gguf": src})) as base:
        url = base + "/m.gguf"
        for rep in range(args.reps):
            for name in names[rep % len(names):] + names[:rep % len(names)]:  # each takes every position
                out = work / "out.gguf"
                out.unlink(missing_ok=True)
                os.sync()
                cmd = {"curl": ["curl", "-s", "-f", "-o", str(out), url],
                       "curl + sync": ["sh", "-c", f'curl -s -f -o "{out}" "{url}" && sync "{out}"'],
                       "ours": [sys.executable, "-c", OURS, url, str(out)]}[name]
                seconds, peak = timed(cmd)
                assert out.stat().st_size == size
                results[name].append(seconds)
                if name == "ours":
                    rss.append(peak)
                print(f"  run {rep + 1} {name:<24} {seconds:6.2f} s  {size / seconds / 1e6:7.0f} MB/s", flush=True)
                out.unlink()
    med = {n: statistics.median(v) for n, v in results.items()}
    print(f"\n{size / 1e6:.0f} MB over loopback, medians of {args.reps} (ours hashes SHA-256 and fsyncs)")
    for n in names:
        print(f"  {n:<24} {size / med[n] / 1e6:7.0f} MB/s")
    c, cs, o = med["curl"], med["curl + sync"], med["ours"]
    print(f"  ours / curl              {c / o:7.2f}  (target >= 0.9)  {'PASS' if c / o >= 0.9 else 'MISS'}")
    print(f"  ours / (curl + sync)     {cs / o:7.2f}  (like for like: both durable on disk)")
    print(f"  ours peak RSS            {max(rss) / 1e6:7.0f} MB (flat: 1 MiB chunks, 16 queued for hashing)")
    src.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
