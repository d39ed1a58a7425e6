"""The downloader against curl on loopback, same file, same server, one run.

    python -m tests.bench.download_speed [--size-mb 1024] [--reps 3]

Serves a file from a local server (zero-copy sendfile), then times, interleaved: `curl -o`,
`curl -o` then `sync FILE`, and our downloader in a fresh process (hashing SHA-256 while it
downloads, direct writes where the file system allows, fsync and rename at the end, as in the app)
with its peak RSS. Every run writes a new file after `sync`, so neither pays
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

from app.net import download
from tests.bench.verdict import Verdicts
from tests.helpers.http_server import ServerState, serve

# The child reports its own peak RSS (VmHWM, in kB): ru_maxrss would carry over the peak of the
# bench's own memory, which the child shared until exec.
OURS = ("import re, sys; from app.net import download; "
        "download.DIRECT_WRITES = sys.argv[3] == 'direct'; "
        "download.Downloader(token='', allow_http=True).download(sys.argv[1], sys.argv[2]); "
        "print(int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) * 1024)")


def timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {proc.stderr[-1000:]}")
    return elapsed, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=6, help="a multiple of 3: each contender runs first, second, third")
    parser.add_argument("--page-cache", action="store_true",
                        help="ours without direct writes, as on a file system that refuses O_DIRECT")
    args = parser.parse_args()
    writes = "page-cache" if args.page_cache else "direct"
    work = Path(tempfile.mkdtemp(prefix="clover-dl-bench-"))
    src = work / "model.gguf"
    block = os.urandom(64 << 20)
    with open(src, "wb") as f:  # a .gguf starts with its magic (the downloader refuses one that does not)
        for i in range(args.size_mb // 64):
            f.write(b"GGUF" + block[4:] if i == 0 else block)
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
                       "ours": [sys.executable, "-c", OURS, url, str(out), writes]}[name]
                seconds, printed = timed(cmd)
                assert out.stat().st_size == size
                results[name].append(seconds)
                if name == "ours":
                    rss.append(int(printed.split()[-1]))
                print(f"  run {rep + 1} {name:<24} {seconds:6.2f} s  {size / seconds / 1e6:7.0f} MB/s", flush=True)
                out.unlink()
        # memory flat: the same download of a file a quarter the size
        small = work / "small.gguf"
        with open(src, "rb") as f, open(small, "wb") as g:
            g.write(f.read(size // 4))
        out = work / "out.gguf"
        with serve(ServerState(files={"/s.gguf": small})) as small_base:
            _, printed = timed([sys.executable, "-c", OURS, small_base + "/s.gguf", str(out), writes])
        small_rss = int(printed.split()[-1])
        out.unlink()
        small.unlink()
    med = {n: statistics.median(v) for n, v in results.items()}
    print(f"\n{size / 1e6:.0f} MB over loopback, medians of {args.reps} "
          f"(ours hashes SHA-256 and fsyncs; {writes} writes)")
    for n in names:
        print(f"  {n:<24} {size / med[n] / 1e6:7.0f} MB/s")
    c, cs, o = med["curl"], med["curl + sync"], med["ours"]
    verdicts = Verdicts()
    print(f"  ours / curl              {c / o:7.2f}  (target >= 0.9)  "
          f"{verdicts.check('download: ours / curl', c / o, c / o >= 0.9, '>= 0.9', '{:.2f}')}")
    print(f"  ours / (curl + sync)     {cs / o:7.2f}  (like for like: both durable on disk)")
    print(f"  ours peak RSS            {max(rss) / 1e6:7.0f} MB for {size / 1e6:.0f} MB, {small_rss / 1e6:.0f} MB "
          f"for {size / 4e6:.0f} MB (flat: {download.HASH_QUEUE + 3} reused {download.BLOCK >> 20} MiB blocks)")
    src.unlink()
    return verdicts.finish()


if __name__ == "__main__":
    raise SystemExit(main())
