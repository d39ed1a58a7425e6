"""`python -m app.bench patch`: the patch against `cp` and the gguf package's gguf_new_metadata.

Builds a synthetic GGUF of Clover's dialect (default 2 GB of tensor data), reads it once so every
contender starts from the page cache, then times, interleaved and repeated: ours (`python -m app
patch SRC DST`), `cp` with and without `sync`, and gguf_new_metadata adding the same key. Each run
starts with the previous output deleted and dirty pages synced, and prints the ratios it measured.

How the contenders are made comparable: docs/architecture/files.md.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.gguf.gguf_file import KV, TensorInfo, ValueType, encode_header

MB = 1_000_000

_NEW_METADATA = """
import sys
import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata
src, dst = sys.argv[1], sys.argv[2]
reader = gguf.GGUFReader(src, "r")
arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
key = f"{arch}.expert_shared_count"
copy_with_new_metadata(reader, writer, {key: MetadataDetails(gguf.GGUFValueType.UINT32, 1)}, [])
"""


def build_synthetic(path: Path, data_bytes: int, n_vocab: int = 248_320) -> None:
    """A Clover-dialect GGUF: big tokenizer, shared-expert tensors, `data_bytes` of tensor data."""
    arch = "glm4moe"
    tokens = [f"tok{i}" for i in range(n_vocab - 2)] + ["<|endoftext|>", "<|im_end|>"]
    merges = [f"t o{i}" for i in range(n_vocab // 2)]
    kvs = [
        KV.make("general.architecture", ValueType.STRING, arch),
        KV.make("general.name", ValueType.STRING, "clover-shaped benchmark"),
        KV.make(f"{arch}.block_count", ValueType.UINT32, 40),
        KV.make(f"{arch}.rope.dimension_count", ValueType.UINT32, 256),
        KV.make(f"{arch}.rope.partial_dimension_count", ValueType.UINT32, 64),
        KV.make(f"{arch}.expert_count", ValueType.UINT32, 256),
        KV.make("tokenizer.ggml.model", ValueType.STRING, "gpt2"),
        KV.make("tokenizer.ggml.tokens", ValueType.ARRAY, tokens, ValueType.STRING),
        KV.make("tokenizer.ggml.token_type", ValueType.ARRAY, [1] * n_vocab, ValueType.INT32),
        KV.make("tokenizer.ggml.merges", ValueType.ARRAY, merges, ValueType.STRING),
        KV.make("tokenizer.ggml.eos_token_id", ValueType.UINT32, n_vocab - 2),
    ]
    # 40 blocks, each a routed-expert tensor and a shared-expert tensor, F32, sized to data_bytes.
    per_block = data_bytes // 40
    shexp_elems = 2048 * 64
    exp_elems = max((per_block - shexp_elems * 4) // 4 // 2048 * 2048, 2048)
    tensors, offset = [], 0
    for i in range(40):
        for name, n in ((f"blk.{i}.ffn_up_exps.weight", exp_elems), (f"blk.{i}.ffn_up_shexp.weight", shexp_elems)):
            tensors.append(TensorInfo(name, (2048, n // 2048), 0, offset))
            offset += -(-n * 4 // 32) * 32
    head = encode_header(3, kvs, tensors, 32)
    block = os.urandom(64 << 20)
    with open(path, "wb") as f:
        f.write(head)
        left = offset
        while left > 0:
            f.write(block[:min(left, len(block))])
            left -= min(left, len(block))


def _run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return elapsed, usage.ru_maxrss * 1024


def run(args: argparse.Namespace) -> int:
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="clover-patch-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    src, dst = work / "clover-dialect.gguf", work / "out.gguf"
    try:
        size = int(args.size_gb * 1e9)
        print(f"building a {size / 1e9:.1f} GB Clover-dialect GGUF in {work} ...", flush=True)
        # In a child process: the benchmark process stays small, so the RSS that children
        # inherit at fork (Linux counts it in their ru_maxrss) is not the builder's.
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                        "from app.bench.patch_bench import build_synthetic; "
                        "build_synthetic(Path(sys.argv[1]), int(sys.argv[2]))", str(src), str(size)], check=True)
        total = src.stat().st_size
        subprocess.run(["cat", str(src)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache

        py = sys.executable
        contenders = {
            "ours (python -m app patch)": [py, "-m", "app", "patch", str(src), str(dst), "--quiet"],
            "cp": ["cp", str(src), str(dst)],
            "cp + sync": ["sh", "-c", f'cp "{src}" "{dst}" && sync "{dst}"'],
            "gguf_new_metadata": [py, "-c", _NEW_METADATA, str(src), str(dst)],
        }
        for name in ("ours (python -m app patch)", "cp"):  # one untimed round: caches and first-run costs
            dst.unlink(missing_ok=True)
            os.sync()
            _run(contenders[name])
        times: dict[str, list[float]] = {k: [] for k in contenders}
        rss: list[int] = []
        for rep in range(args.reps):
            for name, cmd in contenders.items():
                if name == "gguf_new_metadata" and rep >= args.gguf_reps:
                    continue
                dst.unlink(missing_ok=True)
                os.sync()  # every contender starts with no dirty pages left by the one before
                seconds, peak = _run(cmd)
                times[name].append(seconds)
                if name.startswith("ours"):
                    rss.append(peak)
                print(f"  run {rep + 1}: {name:<28} {seconds:7.2f} s", flush=True)
        dst.unlink(missing_ok=True)

        med = {k: statistics.median(v) for k, v in times.items() if v}
        print(f"\nfile: {total / 1e9:.2f} GB; medians of {args.reps} interleaved runs "
              f"({args.gguf_reps} for gguf_new_metadata), page cache warm")
        for name, t in med.items():
            print(f"  {name:<28} {t:7.2f} s  {total / MB / t:8.0f} MB/s")
        ours = med["ours (python -m app patch)"]
        ratio_cp = med["cp"] / ours
        ratio_cp_sync = med["cp + sync"] / ours
        ratio_gguf = med["gguf_new_metadata"] / ours
        peak = max(rss)
        extra = _without_a_copy(src, work, ours, args)
        print("\nratios (higher is better for ours):")
        print(f"  ours throughput / cp throughput          {ratio_cp:5.2f}  (target >= 0.9)  "
              f"{'PASS' if ratio_cp >= 0.9 else 'MISS'}")
        print(f"  ours throughput / (cp + sync) throughput {ratio_cp_sync:5.2f}  (like for like: both fsync)")
        print(f"  gguf_new_metadata time / ours time       {ratio_gguf:5.1f}  (target >= 8)    "
              f"{'PASS' if ratio_gguf >= 8 else 'MISS'}")
        print(f"  ours peak RSS                            {peak / MB:5.0f} MB (target < 200 MB) "
              f"{'PASS' if peak < 200 * MB else 'MISS'}")
        for line in extra:
            print(line)
        return 0
    finally:
        if not args.keep:
            for p in (src, dst):
                p.unlink(missing_ok=True)
            if not args.dir:
                shutil.rmtree(work, ignore_errors=True)


def _serve(path: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A loopback HTTP server for one file, with Range (what the Hub's CDN does)."""
    import http.server
    import re
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            pass

        def do_GET(self) -> None:
            size = path.stat().st_size
            start, end = 0, size - 1
            m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if m:
                start, end = int(m.group(1)), min(int(m.group(2) or size - 1), size - 1)
            self.send_response(206 if m else 200)
            if m:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            with open(path, "rb") as f:
                try:
                    self.wfile.flush()
                    self.connection.sendfile(f, start, end - start + 1)
                except OSError:
                    pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/m.gguf"


def _peak_disk(folder: Path, fn: Callable[[], object]) -> tuple[float, int]:
    """(seconds, peak bytes allocated in `folder`) while fn runs."""
    import threading

    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], sum(p.stat().st_blocks * 512 for p in folder.glob("*") if p.is_file()))
            stop.wait(0.01)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    started = time.perf_counter()
    try:
        fn()
    finally:
        seconds = time.perf_counter() - started
        stop.set()
        t.join()
    return seconds, peak[0]


def _without_a_copy(src: Path, work: Path, ours: float, args: argparse.Namespace) -> list[str]:
    from app.gguf.gguf_file import read_header
    from app.model.patch import load_overrides, load_profile, patched_header
    from app.model.plan import load_time_patch
    from app.net.download import Downloader, Layout

    lines = ["\nwithout a copy (the same file):"]
    started = time.perf_counter()
    header = read_header(src)
    overrides, said = load_time_patch(src, header)
    overlay = time.perf_counter() - started
    lines.append(f"  overlay (load-time overrides)  {overlay * 1000:7.1f} ms, 0 bytes written; the copy took "
                 f"{ours:.2f} s ({ours / overlay:,.0f}x): {said or load_overrides(header, load_profile('clover'))[2]}")

    size = src.stat().st_size
    with open(src, "rb") as f:
        head = f.read(header.data_offset)
    new_head, _ = patched_header(header, load_profile("clover"))
    assert new_head is not None, "the Clover profile changes this header"
    layout = Layout(new_head, header.data_offset, head)
    server, url = _serve(src)
    out = work / "dl"
    out.mkdir(exist_ok=True)
    plain_t, stream_t, plain_peak, stream_peak = [], [], 0, 0
    try:
        for rep in range(args.reps):
            for mode in (("plain", "stream") if rep % 2 == 0 else ("stream", "plain")):
                for p in out.glob("*"):
                    p.unlink()
                os.sync()
                dl = Downloader(allow_http=True)
                if mode == "plain":
                    seconds, peak = _peak_disk(out, functools.partial(dl.download, url, out / "m.gguf", size=size))
                    plain_t.append(seconds)
                    plain_peak = max(plain_peak, peak)
                else:
                    seconds, peak = _peak_disk(out, functools.partial(dl.download, url, out / "m.patched.gguf",
                                                                          size=size, layout=layout))
                    stream_t.append(seconds)
                    stream_peak = max(stream_peak, peak)
    finally:
        server.shutdown()
        for p in out.glob("*"):
            p.unlink()
    plain, stream = statistics.median(plain_t), statistics.median(stream_t)
    lines.append(f"  in-stream download + patch     {stream:7.2f} s vs plain download {plain:.2f} s "
                 f"(ratio {plain / stream:.2f}; target about 1), then a patch step of 0.00 s (target <= 0.1 s) "
                 f"instead of a {ours:.2f} s copy")
    lines.append(f"  peak disk: in-stream {stream_peak / size:.3f} x the file (target <= 1.02); the old way "
                 f"(download, then a patched copy) {2 * size / size:.1f} x")
    lines += _reflink_rows(src, work, ours, args)
    return lines


def _reflink_rows(src: Path, work: Path, ours: float, args: argparse.Namespace) -> list[str]:
    from app.gguf.gguf_file import read_header
    from app.model.patch import patch_file

    folder, mounted = (Path(args.reflink_dir) if args.reflink_dir else None), None
    if folder is None and os.geteuid() == 0 and shutil.which("mkfs.xfs"):
        image, mnt = work / "xfs.img", work / "xfs"
        mnt.mkdir(exist_ok=True)
        with open(image, "wb") as f:
            f.truncate(int(src.stat().st_size * 2.3) + (300 << 20))
        if subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True).returncode == 0 \
                and subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True).returncode == 0:
            folder = mounted = mnt
    if folder is None:
        return ["  reflink: no file system here shares extents (give --reflink-dir on XFS or btrfs)"]
    try:
        copy = folder / "vendor.gguf"
        shutil.copyfile(src, copy)
        os.sync()
        # in a new process, where nothing has read this header yet (as `python -m app patch` after
        # its imports): the time around patch_file, measured in that process
        fresh = subprocess.run([sys.executable, "-c", (
            "import sys, time; from app.model.patch import patch_file; t = time.perf_counter(); "
            f"r = patch_file({str(copy)!r}, {str(folder / 'out.gguf')!r}, overwrite=True); "
            "print(r.method, time.perf_counter() - t)")], capture_output=True, text=True,
            cwd=Path(__file__).resolve().parents[2])
        method, _, value = fresh.stdout.strip().rpartition(" ")
        cold = float(value) if fresh.returncode == 0 and value else float("nan")
        # in the app, which read the header when it planned the file: the export's own time
        read_header(copy)
        started = time.perf_counter()
        report = patch_file(copy, folder / "out.gguf", overwrite=True)
        seconds = time.perf_counter() - started
        base = patch_file(copy, folder / "out2.gguf", overwrite=True,
                          copy_methods=("copy_file_range", "sendfile", "buffered"))
        return [f"  reflink export ({report.method})       {seconds:7.3f} s after the app has read the header, "
                f"{cold:.3f} s in a new process ({method or 'failed'}), vs a copy on the same file system "
                f"{base.seconds:.2f} s ({base.seconds / seconds:.0f}x; target < 0.1 s): "
                f"{'PASS' if seconds < 0.1 else 'MISS'} after the read, {'PASS' if cold < 0.1 else 'MISS'} cold"]
    finally:
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], capture_output=True)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("patch", help="patch vs cp vs gguf_new_metadata on a synthetic Clover-dialect file")
    p.add_argument("--size-gb", type=float, default=2.0, help="tensor data size (default 2 GB)")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--gguf-reps", type=int, default=1, help="repetitions of the slow gguf_new_metadata (default 1)")
    p.add_argument("--dir", help="work folder (default: a new temporary folder); needs 2 x size free")
    p.add_argument("--keep", action="store_true", help="keep the files")
    p.add_argument("--reflink-dir", help="a folder on XFS or btrfs for the reflink row")
    p.set_defaults(run=run)
