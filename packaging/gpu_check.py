"""The Python side of packaging/gpu_check.sh: models, argument checks, the import audit, the summary.

    python3 packaging/gpu_check.py pins                      # name==version of the wheels `prepare` carries
    python packaging/gpu_check.py loadcheck WHEEL            # the CUDA wheel alone loads here, on the CPU
    python packaging/gpu_check.py isolation DIR              # who could take llama.cpp's C++ calls, then a load
    python packaging/gpu_check.py shapes DIR [--dry-run]     # the models the GPU steps load
    python packaging/gpu_check.py argcheck MODULE ARGS...    # MODULE's own parser accepts ARGS (runs nothing)
    python packaging/gpu_check.py audit IMPORTS WHEELS_DIR   # every package the steps imported is there
    python3 packaging/gpu_check.py summary WORK OUT          # the table, into OUT (summary.txt, summary.json)
    python3 packaging/gpu_check.py docs SUMMARY_TXT          # here, after the call: that table into docs/gpu-check.md

`pins`, `audit` and `summary` use the standard library only; `summary` runs with the machine's python3
whatever state the steps left; `audit` runs with the steps' Python (it maps modules to the
distributions installed there).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What the GPU machine's image lacks among the packages the steps import (found by `audit` in the dry
# run): carried as wheels for CPython 3.12 on manylinux x86-64, at the versions of this project's .venv.
CARRIED = ("gguf", "platformdirs", "diskcache", "jsonschema", "jsonschema-specifications", "referencing",
           "rpds-py", "starlette", "uvicorn")  # the server's: starlette, uvicorn (anyio, h11, click: the image's)

# The image's Python packages (the device tool's KINDS.md, 'nvidia-h200', as read on a machine on
# 2026-11-17): python3 there is 3.12, with these, and nothing can be installed from a registry.
IMAGE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2
joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver
nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
protobuf psutil py-cpuinfo pybind11 pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark
pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich
sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate
tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()

# Imported in the dry run only because they are installed here: doctor reports Qt when PySide6 is
# there, and pytest loads every plugin installed (pytest-qt, and anyio's, which brings sniffio).
OPTIONAL = {"pyside6-essentials", "shiboken6", "pytest-qt", "sniffio", "setuptools"}


# Modules that runtimes create, of no distribution: Cython's, PySide6's signature support.
INTERNAL = {"cython_runtime", "shibokensupport", "signature_bootstrap"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ----------------------------------------------------------------------------- pins


def pins() -> int:
    import importlib.metadata as md

    for name in CARRIED:
        print(f"{name}=={md.version(name)}")
    return 0


# ----------------------------------------------------------------------------- the wheel loads here


def loadcheck(wheel: Path) -> int:
    """Install `wheel` alone into a temporary folder and load it here, on the CPU: the CUDA module is
    shipped, a CPU variant loads, and each library is mapped from one file (before GPU time is spent)."""
    import os
    import subprocess
    import tempfile

    code = ("import json\n"
            "from app.machine.llama_backend import build_info, lib_dir\n"
            "info = build_info()\n"
            "maps = sorted({ln.split()[-1] for ln in open('/proc/self/maps') if '/llama_cpp/lib/' in ln})\n"
            "print(json.dumps({'lib': str(lib_dir()), 'cuda_module': info.load.cuda_module, "
            "'variant': info.load.cpu_variant, 'variants': info.load.cpu_variants, 'mapped': maps}))\n")
    with tempfile.TemporaryDirectory(prefix="clover-loadcheck-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        "--no-index", "--target", tmp, str(wheel)], check=True)
        env = dict(os.environ, PYTHONPATH=f"{tmp}{os.pathsep}{ROOT}")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            print(f"loadcheck: {wheel.name} does not load here:\n{done.stderr[-2000:]}")
            return 1
        got = json.loads(done.stdout.strip().splitlines()[-1])
    names = [Path(p).name for p in got["mapped"]]
    twice = sorted({n for n in names if names.count(n) > 1})
    versioned = [n for n in names if re.search(r"\.so\.\d", n) and not n.startswith("libcudart")]
    problems = [text for bad, text in (
        (not got["lib"].startswith(tmp), f"llama_cpp came from {got['lib']}, not the wheel"),
        (not got["cuda_module"], "no libggml-cuda.so in it"),
        (not got["variant"], "no CPU variant loaded"),
        (bool(twice), f"libraries mapped from several files: {twice}"),
        (bool(versioned), f"versioned copies mapped (the slim include did not apply): {versioned}")) if bad]
    print(f"loadcheck: {wheel.name} here: CPU variant {got['variant']} of {len(got['variants'])} "
          f"({', '.join(got['variants'])}); libggml-cuda shipped: {got['cuda_module']}; mapped: "
          f"{', '.join(names)}")
    for text in problems:
        print(f"loadcheck: FAILED: {text}")
    return 1 if problems else 0


# ----------------------------------------------------------------------------- libstdc++ isolation

MARKERS = ("_ZNSo9_M_insertIlEERSoT_", "_ZNSt6locale7classicEv", "_ZNSt7__cxx1118basic_stringstreamIcSt11char_"
           "traitsIcESaIcEEC1Ev")  # std::ostream << long, std::locale::classic, std::stringstream()


def _provider(handle: int | None, symbol: str) -> str:
    """The file that defines `symbol` as seen from `handle` (None: the process's global scope)."""
    import ctypes
    import ctypes.util

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    libdl = ctypes.CDLL(ctypes.util.find_library("dl") or "libc.so.6")
    libdl.dlsym.restype = ctypes.c_void_p
    libdl.dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    libdl.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    addr = libdl.dlsym(ctypes.c_void_p(handle or 0), symbol.encode())  # 0 is RTLD_DEFAULT on glibc
    if not addr:
        return ""
    info = DlInfo()
    return (info.dli_fname or b"?").decode() if libdl.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) else "?"


def isolation(folder: Path) -> int:
    """What the load crash on the first lent H200 needs to be read (issue 37): the loader's
    environment, which object the process's global scope gives libstdc++'s symbols to, and every
    loaded library that exports its own copy of them; then llama.cpp's libraries' own imports of
    libstdc++ (none with the static, hidden libstdc++ of packaging/llama_cpp_extras.cmake), and a
    load of a small model through print_info on every device."""
    import ctypes
    import os
    import platform

    sys.path.insert(0, str(ROOT))
    print(f"python: {sys.executable} {platform.python_version()}; LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r}")
    print(f"LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')!r}")
    from app.machine.cpu_probe import write_probe_model
    from app.machine.llama_backend import _libraries_of_ours, llama

    lc = llama()
    mapped = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if ".so" in ln.split()[-1]})
    for symbol in MARKERS:
        print(f"global scope: {symbol} -> {_provider(None, symbol) or 'not found'}")
    foreign = []
    for path in mapped:
        try:
            handle = ctypes.CDLL(path)._handle
        except OSError:
            continue
        own = _provider(handle, MARKERS[0])
        if own and os.path.realpath(own) == os.path.realpath(path) and "libstdc++" not in Path(path).name:
            foreign.append(path)
    print(f"libraries exporting their own libstdc++ (could take llama.cpp's calls): {foreign or 'none'}")
    imports = {p.name: n for p, n in _libraries_of_ours() if n}
    print(f"llama.cpp libraries importing libstdc++ symbols: {imports or 'none (static, hidden)'}")
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "isolation-probe.gguf"
    write_probe_model(model)
    params = lc.llama_model_default_params()
    params.n_gpu_layers = -1
    m = lc.llama_model_load_from_file(str(model).encode(), params)  # print_info: the crash site
    print(f"probe model loaded on every device: {'yes' if m else 'no'}")
    if m:
        lc.llama_model_free(m)
    return 0 if m else 1


# ----------------------------------------------------------------------------- models


def shapes(folder: Path, dry_run: bool) -> int:
    """Clover-shaped files (zero weights, sparse) for tune, follow-ups and the speculative bench; the dry
    run writes the tiny qwen35moe instead (the Clover shape's 248K vocabulary costs minutes on 2 cores)."""
    sys.path.insert(0, str(ROOT))
    folder.mkdir(parents=True, exist_ok=True)
    if dry_run:
        from tests.helpers.gguf_models import qwen35_shape, write_qwen35moe

        written = [write_qwen35moe(folder / "clover.gguf", qwen35_shape(n_ctx_train=4096)),
                   write_qwen35moe(folder / "clover-mtp.gguf", qwen35_shape(n_ctx_train=4096), mtp=True)]
    else:
        from tests.helpers.clover_shape import write_clover_shaped

        written = [write_clover_shaped(folder / "clover.gguf"),
                   write_clover_shaped(folder / "clover-mtp.gguf", mtp=True)]
    for p in written:
        print(f"written: {p} ({p.stat().st_size / 1e9:.2f} GB, sparse)")
    return 0


# ----------------------------------------------------------------------------- argument check


def argcheck(module: str, args: list[str]) -> int:
    """Run MODULE as `python -m MODULE ARGS` up to its argument parsing, then stop: a misspelt module or
    option fails here as it would on the GPU machine, and nothing is measured."""
    import runpy

    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        ns = original(self, args, namespace)
        print(f"{module}: arguments accepted: {vars(ns)}")
        raise SystemExit(0)

    argv, path = sys.argv, list(sys.path)
    argparse.ArgumentParser.parse_args = parse_then_stop  # type: ignore[method-assign]
    sys.path.insert(0, str(ROOT))
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv, sys.path[:] = argv, path
    print(f"{module}: finished without parsing its arguments")
    return 1


# ----------------------------------------------------------------------------- import audit


def audit(modules_file: Path, wheels: Path) -> int:
    """The third-party packages the steps imported are in the GPU machine's image or carried."""
    import importlib.metadata as md

    names = set(modules_file.read_text().split()) if modules_file.exists() else set()
    if not names:
        print("audit: no imports were recorded")
        return 1
    local = {"app", "tests", "packaging", "__main__", "__mp_main__", "sitecustomize"}
    owners = md.packages_distributions()
    carried = {norm(n) for n in CARRIED} | {"llama-cpp-python"}
    carried |= {norm(p.name.split("-")[0]) for p in wheels.glob("*.whl")} if wheels.is_dir() else set()
    image = {norm(n) for n in IMAGE}
    used: dict[str, set[str]] = {}
    unowned = []
    for m in sorted(names):
        if m in sys.stdlib_module_names or m in local or m.startswith("_") or m in INTERNAL:
            continue
        for dist in owners.get(m, []):
            used.setdefault(norm(dist), set()).add(m)
        if m not in owners:
            unowned.append(m)
    missing = sorted(d for d in used if d not in image | carried | OPTIONAL)
    print(f"audit: {len(used)} packages imported by the steps: {', '.join(sorted(used))}")
    if unowned:
        print(f"modules of no installed distribution (not checked): {', '.join(unowned)}")
    print(f"carried: {', '.join(sorted(d for d in used if d in carried))}")
    if missing:
        print(f"audit: FAILED: not in the GPU machine's image and not carried: {', '.join(missing)} "
              "(add them to CARRIED in packaging/gpu_check.py)")
        return 1
    print("audit: every package the steps imported is in the image or carried")
    return 0


# ----------------------------------------------------------------------------- summary


def _lines(path: Path) -> list[str]:
    try:
        return [ln.rstrip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []


def _first(lines: list[str], pattern: str) -> str | None:
    rx = re.compile(pattern)
    return next((ln.strip() for ln in lines if rx.search(ln)), None)


def figure(step: str, work: Path) -> str:
    """The line worth reading from a step's log."""
    lines = _lines(work / "logs" / f"{step}.log")
    if step == "gpu-info":
        return lines[-1] if len(lines) > 1 else ""
    if step == "install":
        return _first(lines, r"^(carried CUDA wheel|pip accepts|the CUDA build there took|no carried|nothing)") or ""
    if step == "doctor":
        parts = [_first(lines, r"CUDA compiled in"), _first(lines, r"device \S+ \[gpu\]"),
                 _first(lines, r"inference runs on"), _first(lines, r"CUDA here:")]
        return "; ".join(p for p in parts if p)
    if step == "gpu-tests":
        return _first(lines[::-1], r"\d+ (passed|failed|skipped|error)") or ""
    if step == "gpu-speed":
        try:
            runs = json.loads((work / "gpu_speed.json").read_text())
        except (OSError, ValueError):
            return _first(lines[::-1], r"tok/s") or ""
        return "; ".join(
            f"{r['label']}: {r.get('engine_tps', r['generation_tps'])} tok/s (llama.cpp's own timing "
            f"{r.get('llama_cpp_tps', '?')}), "
            f"{r['cpu_moe_blocks']} blocks in RAM, prompt {r['prompt_tps']} tok/s, first token {r['ttft_seconds']} s"
            for r in runs)
    if step == "batch-costs":
        found = _first(lines[::-1], r"^summary: ")
        return found[len("summary: "):][:300] if found else (lines[-1] if lines else "")[:160]
    if step == "ui-stream":
        parts = [_first(lines, r"^\s*worst event-loop stall"), _first(lines, r"^\s*GUI cost per token, worst")]
        return "; ".join(" ".join(p.split()) for p in parts if p)[:200]
    if step == "isolation":
        parts = [_first(lines, r"^global scope: _ZNSo9"), _first(lines, r"^libraries exporting"),
                 _first(lines, r"^llama.cpp libraries importing"), _first(lines, r"^probe model loaded")]
        return "; ".join(p for p in parts if p)[:400]
    if step == "followups":
        parts = [_first(lines, r"^follow-ups evaluating more"), _first(lines, r"^time to first token, last turn")]
        return "; ".join(p.split(" (target")[0] for p in parts if p)
    if step == "speculative":
        same = [ln for ln in lines if "same text:" in ln]
        exact = sum(1 for ln in same if ln.rstrip().endswith("yes"))
        speeds = "; ".join(ln.split(" (median")[0] for ln in same)
        return f"exact {exact} of {len(same)}: {speeds}" if same else ""
    if step == "mtp":
        found = [ln.strip() for ln in lines if re.search(r"(?i)exact|same tokens|same text", ln)]
        return "; ".join(found[-2:])[:200] if found else (lines[-1] if lines else "")[:160]
    if step.startswith("tune"):
        return (_first(lines, r"^chosen:") or _first(lines[::-1], r"\S") or "")[:160]
    return (lines[-1] if lines else "")[:160]


def doctor_failures(work: Path) -> list[str]:
    """The doctor sections printed as FAILED."""
    section, failed = "", []
    for line in _lines(work / "logs" / "doctor.log"):
        m = re.match(r"^\[(.+)\]$", line.strip())
        if m:
            section = m.group(1)
        elif line.strip().startswith("FAILED"):
            failed.append(section)
    return failed


def summary(work: Path, out: Path) -> int:
    rows = []
    for line in _lines(work / "steps.tsv"):
        name, status, seconds, planned, cap, note = (line.split("\t") + [""] * 6)[:6]
        rows.append({"step": name, "status": status, "seconds": int(seconds or 0), "planned": int(planned or 0),
                     "cap": int(cap or 0), "note": note, "result": figure(name, work)})
    for r in rows:  # doctor exits 1 for any section it could not read; only Qt is expected to fail there
        if r["step"] == "doctor" and r["status"] == "FAILED(1)" and doctor_failures(work) == ["Qt"]:
            r["status"], r["note"] = "ok", "Qt section failed: PySide6 is not on that machine (expected)"
    head = _lines(work / "header.txt")
    table = ["| step | status | s | planned s | cap s | result |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        text = "; ".join(t for t in (r["note"], r["result"]) if t).replace("|", "/")
        table.append(f"| {r['step']} | {r['status']} | {r['seconds']} | {r['planned']} | {r['cap']} | {text} |")
    total = sum(r["seconds"] for r in rows)
    failed = [r["step"] for r in rows if r["status"] not in ("ok", "skipped", "missed")]  # missed: a figure, said
    foot = f"{len(rows)} steps in {total} s; " + (f"not ok: {', '.join(failed)}" if failed else "all ok or skipped")
    text = "\n".join([*head, "", *table, "", foot]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.txt").write_text(text)
    (out / "summary.json").write_text(json.dumps({"header": head, "steps": rows, "failed": failed}, indent=1))
    print("\n" + text, flush=True)
    return 1 if failed else 0


def docs(summary_txt: Path, page: Path = ROOT / "docs" / "gpu-check.md") -> int:
    """A returned summary.txt written into the page's `gpu_check` block (tests/bench/docs_table.py), so
    the page's table is the check's own, not one typed by hand."""
    sys.path.insert(0, str(ROOT))
    from tests.bench.docs_table import write_block

    write_block("gpu_check", summary_txt.read_text(), page)
    print(f"{summary_txt} written to {page} (block gpu_check)")
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "pins":
        return pins()
    if cmd == "isolation" and len(rest) == 1:
        return isolation(Path(rest[0]))
    if cmd == "loadcheck" and len(rest) == 1:
        return loadcheck(Path(rest[0]))
    if cmd == "shapes" and rest:
        return shapes(Path(rest[0]), "--dry-run" in rest[1:])
    if cmd == "argcheck" and rest:
        return argcheck(rest[0], rest[1:])
    if cmd == "audit" and len(rest) == 2:
        return audit(Path(rest[0]), Path(rest[1]))
    if cmd == "summary" and len(rest) == 2:
        return summary(Path(rest[0]), Path(rest[1]))
    if cmd == "docs" and len(rest) == 1:
        return docs(Path(rest[0]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
