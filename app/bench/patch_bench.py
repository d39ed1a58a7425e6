"""`python -m app.bench patch`: the patch against `cp` and the gguf package's gguf_new_metadata.

Builds a synthetic GGUF of Clover's dialect (default 2 GB of tensor data, a 248K-entry tokenizer
with merges, shared-expert tensors, no `expert_shared_count`), reads it once so that every
contender starts from the page cache, then times, interleaved and repeated:

- ours: `python -m app patch SRC DST` (a new process: imports, header, copy, fsync, verify);
- `cp SRC DST` and `cp SRC DST && sync DST` (ours fsyncs before its rename, so the second is the
  like-for-like one; plain cp leaves its writes in the page cache when it exits);
- gguf_new_metadata's `copy_with_new_metadata` adding the same key (the gguf package's own tool).

Before each run the previous output is deleted and `sync` flushes what is dirty, so no contender
pays for another's writeback. It prints medians, throughputs, the ratios the targets name, and our peak RSS (from wait4).
Targets: ours >= 0.9 x cp throughput, >= 8 x faster than gguf_new_metadata, peak RSS < 200 MB.
"""

from __future__ import annotations

import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.gguf_file import KV, TensorInfo, ValueType, encode_header

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


def run(args) -> int:
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
        print("\nratios (higher is better for ours):")
        print(f"  ours throughput / cp throughput          {ratio_cp:5.2f}  (target >= 0.9)  "
              f"{'PASS' if ratio_cp >= 0.9 else 'MISS'}")
        print(f"  ours throughput / (cp + sync) throughput {ratio_cp_sync:5.2f}  (like for like: both fsync)")
        print(f"  gguf_new_metadata time / ours time       {ratio_gguf:5.1f}  (target >= 8)    "
              f"{'PASS' if ratio_gguf >= 8 else 'MISS'}")
        print(f"  ours peak RSS                            {peak / MB:5.0f} MB (target < 200 MB) "
              f"{'PASS' if peak < 200 * MB else 'MISS'}")
        return 0
    finally:
        if not args.keep:
            for p in (src, dst):
                p.unlink(missing_ok=True)
            if not args.dir:
                shutil.rmtree(work, ignore_errors=True)


def add_parser(sub) -> None:
    p = sub.add_parser("patch", help="patch vs cp vs gguf_new_metadata on a synthetic Clover-dialect file")
    p.add_argument("--size-gb", type=float, default=2.0, help="tensor data size (default 2 GB)")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    p.add_argument("--gguf-reps", type=int, default=1, help="repetitions of the slow gguf_new_metadata (default 1)")
    p.add_argument("--dir", help="work folder (default: a new temporary folder); needs 2 x size free")
    p.add_argument("--keep", action="store_true", help="keep the files")
    p.set_defaults(run=run)
