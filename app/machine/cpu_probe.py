"""Proving a CPU variant of ggml runs here before the app loads it. No Qt.

ggml picks its CPU module (`libggml-cpu-sapphirerapids.so`, `-zen4`, ...) from CPUID alone, and CPUID
can promise what the machine does not run (AMX tiles in a VM died with SIGILL). So before the first
load per CPU and llama.cpp build, each candidate, best first by ggml's own score, decodes a tiny model
through every kernel family it carries in a child process (app/machine/cpu_probe_child.py); a child
that dies rules its variant out and the next is proved. The verdicts are kept per CPU and build
(`cpu-variants.json` in the cache folder, or `$CLOVER_CPU_PROBE_FILE`), so the probe runs once.
`CLOVER_CPU_VARIANT=name` forces a variant unproved. The probe model: docs/architecture/files.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.machine.llama_libs import variant_of

PROBE_TIMEOUT_S = 60.0
PROBE_VERSION = 2  # bump when the probe model or the decode changes: old verdicts are then ignored

# the probe model: one layer per weight type (name, ggml type id, bytes per block, elements per block)
_LAYER_TYPES = (("Q4_0", 2, 18, 32), ("Q4_1", 3, 20, 32), ("Q8_0", 8, 34, 32), ("Q4_K", 12, 144, 256),
                ("Q6_K", 14, 210, 256), ("F16", 1, 2, 1), ("BF16", 30, 2, 1))
_EMBD, _FF, _HEADS, _VOCAB = 256, 512, 4, 256


@dataclass(frozen=True)
class Verdict:
    variant: str
    ok: bool
    reason: str  # "" when ok; else what stopped it, in words ("SIGILL", "exit 1: ...", "did not finish ...")
    seconds: float


def cpu_identity() -> str:
    """The CPU as the probe's verdicts are kept for it: model name and feature flags."""
    text = ""
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")),
                platform.processor() or platform.machine())
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    digest = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:12]
    return f"{name} [{digest}]"


def build_identity(modules: Sequence[Path]) -> str:
    """The llama.cpp build as the verdicts are kept for it: the names, sizes and times of every CPU
    module in the folder of `modules`."""
    folders = {m.parent for m in modules}
    h = hashlib.sha256(f"probe-{PROBE_VERSION}".encode())
    for m in sorted(p for f in folders for p in f.glob("*ggml-cpu-*")):
        with contextlib.suppress(OSError):
            st = m.stat()
            h.update(f"{m.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def verdicts_file() -> Path:
    given = os.environ.get("CLOVER_CPU_PROBE_FILE")
    if given:
        return Path(given)
    from app.base.paths import app_dirs

    return app_dirs().cache / "cpu-variants.json"


def _read_all() -> dict:
    try:
        data = json.loads(verdicts_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def known_verdicts(cpu: str, build: str) -> dict[str, Verdict]:
    entry = _read_all().get(f"{cpu} | {build}", {})
    out = {}
    for variant, v in entry.items() if isinstance(entry, dict) else ():
        with contextlib.suppress(KeyError, TypeError, ValueError):
            out[variant] = Verdict(variant, bool(v["ok"]), str(v.get("reason", "")), float(v.get("seconds", 0)))
    return out


def remember(cpu: str, build: str, verdict: Verdict) -> None:
    """Keep a verdict (written atomically; a folder that cannot be written only costs a probe next time)."""
    data = _read_all()
    data.setdefault(f"{cpu} | {build}", {})[verdict.variant] = {
        "ok": verdict.ok, "reason": verdict.reason, "seconds": round(verdict.seconds, 3), "when": int(time.time())}
    path = verdicts_file()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)


def signal_name(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-returncode).name
        return f"signal {-returncode}"
    return f"exit {returncode}"


def probe_model_path() -> Path:
    """The probe's tiny model (written once into the cache folder, about 5 MB)."""
    from app.base.paths import app_dirs

    path = app_dirs().cache / f"cpu-probe-v{PROBE_VERSION}.gguf"
    if not path.exists():
        write_probe_model(path)
    return path


def write_probe_model(path: Path) -> None:
    """A llama of 7 layers, each with its matrices in one weight type (`_LAYER_TYPES`), written with the
    app's own GGUF writer (a bundle ships neither gguf-py nor numpy). The weights are random bytes from
    a fixed seed: the values do not matter (a NaN crashes no kernel), only that every kernel runs."""
    import random
    import struct

    from app.gguf.gguf_types import KV, TensorInfo, ValueType
    from app.gguf.gguf_write import encode_header

    u32, f32 = ValueType.UINT32, ValueType.FLOAT32
    kvs = [KV.make("general.architecture", ValueType.STRING, "llama"),
           KV.make("llama.context_length", u32, 256), KV.make("llama.embedding_length", u32, _EMBD),
           KV.make("llama.block_count", u32, len(_LAYER_TYPES)), KV.make("llama.feed_forward_length", u32, _FF),
           KV.make("llama.attention.head_count", u32, _HEADS), KV.make("llama.attention.head_count_kv", u32, _HEADS),
           KV.make("llama.rope.dimension_count", u32, _EMBD // _HEADS),
           KV.make("llama.attention.layer_norm_rms_epsilon", f32, 1e-5), KV.make("llama.vocab_size", u32, _VOCAB),
           KV.make("tokenizer.ggml.model", ValueType.STRING, "none")]
    shapes: list[tuple[str, tuple[int, ...], int, int, int]] = [  # name, ggml shape, type, block bytes, block elements
        ("token_embd.weight", (_EMBD, _VOCAB), 0, 4, 1), ("output_norm.weight", (_EMBD,), 0, 4, 1),
        ("output.weight", (_EMBD, _VOCAB), 1, 2, 1)]
    for i, (_, type_id, block_bytes, block_elems) in enumerate(_LAYER_TYPES):
        shapes += [(f"blk.{i}.attn_norm.weight", (_EMBD,), 0, 4, 1), (f"blk.{i}.ffn_norm.weight", (_EMBD,), 0, 4, 1)]
        shapes += [(f"blk.{i}.{m}.weight", (_EMBD, _EMBD), type_id, block_bytes, block_elems)
                   for m in ("attn_q", "attn_k", "attn_v", "attn_output")]
        shapes += [(f"blk.{i}.ffn_gate.weight", (_EMBD, _FF), type_id, block_bytes, block_elems),
                   (f"blk.{i}.ffn_up.weight", (_EMBD, _FF), type_id, block_bytes, block_elems),
                   (f"blk.{i}.ffn_down.weight", (_FF, _EMBD), type_id, block_bytes, block_elems)]
    alignment, offset, tensors, sizes = 32, 0, [], []
    for name, shape, type_id, block_bytes, block_elems in shapes:
        n = 1
        for d in shape:
            n *= d
        size = n // block_elems * block_bytes
        tensors.append(TensorInfo(name, shape, type_id, offset))
        sizes.append(size)
        offset += size + (-size % alignment)
    rng = random.Random(1234)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
        f.write(encode_header(3, kvs, tensors, alignment))
        for (_, shape, type_id, _, _), size in zip(shapes, sizes, strict=True):
            if type_id == 0 and len(shape) == 1:  # the norms: ones
                data = struct.pack(f"<{shape[0]}f", *([1.0] * shape[0]))
            else:
                data = rng.randbytes(size)
            f.write(data + b"\0" * (-size % alignment))
    os.replace(tmp, path)


def child_command() -> list[str]:
    """How to start the probe's child: this module under Python, or the bundle's own executable with
    `--cpu-probe` (a frozen app has no `python -m`; packaging/bundle_main.py hands it over)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--cpu-probe"]
    return [sys.executable, "-m", "app.machine.cpu_probe_child"]


def run_probe(module: Path, model: Path, timeout: float = PROBE_TIMEOUT_S) -> Verdict:
    """Decode with `module` as the only backend, in a child process; its verdict."""
    variant = variant_of(module)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    env.pop("CLOVER_CPU_VARIANT", None)
    started = time.monotonic()
    try:
        done = subprocess.run([*child_command(), str(module), str(model)],
                              capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired:
        return Verdict(variant, False, f"did not finish within {timeout:.0f} s", time.monotonic() - started)
    took = time.monotonic() - started
    if done.returncode == 0 and "decoded" in done.stdout:
        return Verdict(variant, True, "", took)
    last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1][:200]
    reason = signal_name(done.returncode) + (f" ({last})" if done.returncode > 0 and last else "")
    return Verdict(variant, False, reason, took)


@dataclass(frozen=True)
class Choice:
    module: Path | None  # the CPU module to load; None: none proved (the caller says so)
    skipped: tuple[Verdict, ...]  # candidates ruled out here, best first
    probed_s: float  # time spent proving now (0 when every verdict was known)
    forced: bool = False


def choose_cpu_module(ranked: Sequence[Path]) -> Choice:
    """The best module of `ranked` (best first, each able to run by its score) that is proved to run
    here: known verdicts first, else proved now and remembered. `CLOVER_CPU_VARIANT` forces one."""
    forced = os.environ.get("CLOVER_CPU_VARIANT", "").strip()
    if forced:
        match = [m for m in ranked if variant_of(m) == forced]
        if not match:
            names = ", ".join(variant_of(m) for m in ranked) or "none"
            raise RuntimeError(f"CLOVER_CPU_VARIANT={forced}: no such CPU variant runs here (shipped and "
                               f"able to run on this CPU: {names})")
        return Choice(match[0], (), 0.0, forced=True)
    cpu, build = cpu_identity(), build_identity(ranked)
    known = known_verdicts(cpu, build)
    skipped: list[Verdict] = []
    spent = 0.0
    for module in ranked:
        verdict = known.get(variant_of(module))
        if verdict is None:
            verdict = run_probe(module, probe_model_path())
            spent += verdict.seconds
            remember(cpu, build, verdict)
        if verdict.ok:
            return Choice(module, tuple(skipped), spent)
        skipped.append(verdict)
    return Choice(None, tuple(skipped), spent)


def rule_out(variant: str, modules: Sequence[Path], reason: str) -> None:
    """Mark `variant` as not running here (a crash in it was seen after the fact)."""
    remember(cpu_identity(), build_identity(modules), Verdict(variant, False, reason, 0.0))
