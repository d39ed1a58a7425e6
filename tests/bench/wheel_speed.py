"""The CUDA wheel on a machine without a GPU against the CPU wheel: the dynamically loaded CUDA
backend must not slow the CPU path (target: within 5 %).

    python -m tests.bench.wheel_speed [--model PATH] [--tokens 128] [--rounds 4] [--threads N]
                                      [--cpu-wheel WHL] [--cuda-wheel WHL] [--also WHL ...]

Each wheel is unpacked into its own folder and run in its own process (PYTHONPATH puts it before the
installed one), rounds interleaved: load SmolLM2, then a greedy raw decode of N tokens, timed from the
first to the last token. Printed per wheel: which CPU variant ggml chose, whether CUDA is compiled in,
the median tokens/s; then the ratio CUDA / CPU. Defaults: the cached wheels of this checkout's
recipe (`packaging/bootstrap.py`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tests.bench.verdict import Verdicts

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, time
from app.machine.llama_backend import build_info, llama
from app.machine.llama_load import LoadSettings, load_llama
model, n, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = build_info()
llm = load_llama(model, LoadSettings(n_ctx=1024, n_threads=threads, n_outputs_max=1))
lc = llama()
vocab = lc.llama_model_get_vocab(llm.model)
tokens = llm.tokenize(b"<|im_start|>user\nWrite a long story about a lighthouse.<|im_end|>\n<|im_start|>assistant\n",
                      special=True)
count, first, last = 0, None, None
for token in llm.generate(tokens, top_k=1, temp=0.0, repeat_penalty=1.0):
    now = time.perf_counter()
    first = first or now
    last = now
    count += 1
    if count >= n + 1:
        break
print(json.dumps({"tps": (count - 1) / (last - first), "cuda": b.cuda, "choice": b.backend_choice(),
                  "file": __import__("llama_cpp").__file__}))
"""


def _bootstrap():
    spec = importlib.util.spec_from_file_location("clover_bootstrap", ROOT / "packaging" / "bootstrap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_once(site: Path, model: str, tokens: int, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}")
    env.pop("LD_LIBRARY_PATH", None)
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(tokens), str(threads)], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["file"].startswith(str(site)):
        raise RuntimeError(f"the child imported {result['file']}, not the wheel in {site}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--cpu-wheel", type=Path)
    parser.add_argument("--cuda-wheel", type=Path)
    parser.add_argument("--also", type=Path, nargs="*", default=[], help="more wheels to time alongside")
    args = parser.parse_args()

    from app.machine.llama_backend import physical_cores
    from tests.helpers.smollm2 import smollm2_path

    boot = _bootstrap()
    cpu = args.cpu_wheel or boot.cached_wheel({"flavor": "cpu", "cmake_args": boot.COMMON_CMAKE_ARGS, "key": "cpu-dl"})
    cuda = args.cuda_wheel or boot.cached_wheel(boot.cuda_build("wheel_speed"))
    if cpu is None or cuda is None:
        print("missing wheel(s): " + ", ".join(n for n, w in (("CPU", cpu), ("CUDA", cuda)) if w is None)
              + "; build them with `python3 packaging/bootstrap.py setup` and `... build-cuda`")
        return 2
    model = args.model or str(smollm2_path())
    threads = args.threads or physical_cores()
    wheels = {"cpu": cpu, "cuda": cuda, **{f"also{i}": w for i, w in enumerate(args.also)}}
    work = Path(tempfile.mkdtemp(prefix="clover-wheels-"))
    sites = {}
    for name, wheel in wheels.items():
        sites[name] = work / name
        with zipfile.ZipFile(wheel) as z:
            z.extractall(sites[name])
        print(f"{name:6} {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB) from {wheel.parent.name}")
    print(f"model {Path(model).name}, {args.tokens} tokens greedy, {threads} threads, {args.rounds} rounds interleaved")
    speeds: dict[str, list[float]] = {name: [] for name in wheels}
    info: dict[str, dict] = {}
    for r in range(args.rounds):
        order = list(wheels) if r % 2 == 0 else list(reversed(wheels))
        for name in order:
            result = run_once(sites[name], model, args.tokens, threads)
            speeds[name].append(result["tps"])
            info[name] = result
            print(f"  round {r + 1} {name:6} {result['tps']:7.1f} tok/s", flush=True)
    print()
    for name in wheels:
        i = info[name]
        print(f"{name:6} median {statistics.median(speeds[name]):7.1f} tok/s  CUDA compiled in: "
              f"{'yes' if i['cuda'] else 'no'}; {i['choice']}")
    ratio = statistics.median(speeds["cuda"]) / statistics.median(speeds["cpu"])
    verdicts = Verdicts()
    print(f"CUDA wheel / CPU wheel, on this CPU: {ratio:.3f}  (target >= 0.95)  "
          f"{verdicts.check('CUDA wheel / CPU wheel', ratio, ratio >= 0.95, '>= 0.95')}")
    return verdicts.finish()


if __name__ == "__main__":
    raise SystemExit(main())
