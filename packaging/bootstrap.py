#!/usr/bin/env python3
"""Set up Clover Launcher's environment on first use, then start the app or the tests.

    python3 packaging/bootstrap.py start [ARGS...]   # the app (ARGS go to `python -m app`)
    python3 packaging/bootstrap.py test  [ARGS...]   # the whole test suite (ARGS go to pytest)

Standard library only: it runs before anything is installed.

What it does, once per machine and again only when something changed:
1. creates `.venv/` in the project folder;
2. builds llama-cpp-python from source, CUDA or CPU (below), into a wheel kept in the
   user's cache folder, and installs it; a later set-up on the same machine reuses the wheel;
3. installs the project and its pinned dependencies (`.[test]` for the tests, and `TEST_NO_DEPS`
   without their dependencies).

Every build is portable (`-DGGML_NATIVE=OFF`: the `-march=native` default has crashed inside the
first llama_decode on some virtual machines) with ggml's backends as loadable modules
(`-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON`): one CPU backend per instruction-set level, the
best one for the running CPU loaded at start. CUDA or CPU: with `CLOVER_LLAMA_BUILD=auto` (the
default) it adds `-DGGML_CUDA=on` when a CUDA toolkit (nvcc) *and* an NVIDIA GPU (nvidia-smi lists
one) are present, for that GPU's compute capability; otherwise the CPU build. `CLOVER_LLAMA_BUILD=cpu`
or `=cuda` forces one; `CLOVER_CUDA_ARCHS=90` sets the CUDA architectures. It prints which build it
chose and why.

    python3 packaging/bootstrap.py build-cuda    # the shippable CUDA wheel, into the wheel cache
    python3 packaging/bootstrap.py build-cuda-slim  # the GPU check's small sm_90 wheel (below)
    python3 packaging/bootstrap.py llama-bench   # llama.cpp's llama-bench, batched-bench and server

The CUDA build links on a machine without a GPU driver and without cuBLAS in the toolkit: see
`cuda_toolkit_args`. `CLOVER_CUDA_CHECK=1 ... test` builds the CUDA wheel before the tests, whose
slow CUDA-wheel tests otherwise run only when that wheel is already cached.

`build-cuda-slim` makes the wheel that packaging/gpu_check.sh carries to a lent H200 (the device tool
carries 64 MiB in all): sm_90 only, the CPU variants an x86-64 server can use, each library once
(`slim_wheel`), stripped; it keeps the wheel as built too, so that a changed post-processing step
does not rebuild, and resumes an interrupted build in its build folder.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

LLAMA_CPP_PYTHON = "0.3.36"
ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("CLOVER_VENV", ROOT / ".venv"))
MARKER = "clover-setup.json"


def say(msg: str) -> None:
    print(f"[clover setup] {msg}", flush=True)


def fail(msg: str) -> NoReturn:
    print(f"[clover setup] error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def venv_python() -> Path:
    if os.name == "nt":
        return VENV / "Scripts" / "python.exe"
    return VENV / "bin" / "python"


def cache_dir() -> Path:
    """Where built llama-cpp-python wheels are kept (same place platformdirs would pick)."""
    if os.environ.get("CLOVER_WHEEL_CACHE"):
        return Path(os.environ["CLOVER_WHEEL_CACHE"])
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
        return base / "clover-launcher" / "Cache" / "wheels"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "clover-launcher" / "wheels"
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "clover-launcher" / "wheels"


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    say("$ " + " ".join(str(c) for c in cmd))
    result = subprocess.run([str(c) for c in cmd], env=env)
    if result.returncode != 0:
        fail(f"command failed with exit code {result.returncode}: {' '.join(map(str, cmd))}")


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "bin", "nvcc").exists():
            return str(Path(home, "bin", "nvcc"))
    return None


def nvidia_gpus() -> list[tuple[str, str]]:
    """(name, compute capability) of each NVIDIA GPU the driver shows; [] when none or no driver."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    gpus = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0]:
            gpus.append((parts[0], parts[1]))
    return gpus


# CUDA architectures of the shipped CUDA build: Turing (75, as PTX that the driver compiles once
# for any newer card too), Ampere consumer and workstation cards (86), Ada (89), Hopper (90) and
# Blackwell consumer and workstation cards (120a). Each real architecture costs a full compile of
# llama.cpp's CUDA kernels; docs/developers.md has the measured build time.
DEFAULT_CUDA_ARCHS = "75-virtual;86-real;89-real;90-real;120a-real"


def cublas_pin(cuda: str) -> str | None:
    """The nvidia-cublas version the app fetches at run time (resources/gpu_runtime.json), when it is
    for this toolkit's CUDA version: the build links against the same cuBLAS the app will load."""
    spec = json.loads((ROOT / "resources" / "gpu_runtime.json").read_text())
    if spec["cuda"] != cuda:
        return None
    return next((p["version"] for p in spec["packages"] if p["name"] == "nvidia-cublas"), None)

# Flags every build shares: portable code, and ggml's backends as loadable modules. The CPU backend
# is built once per instruction-set level and the best one for the running CPU is loaded at start
# (as llama.cpp's own release binaries do); a CUDA backend, if built, loads only where a driver is.
COMMON_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"


def cmake_include_arg(build: dict[str, str] | None = None) -> str:
    include = (build or {}).get("include", "llama_cpp_extras.cmake")
    return f"-DCMAKE_PROJECT_llama_cpp_INCLUDE={ROOT / 'packaging' / include}"


def choose_build() -> dict[str, str]:
    """Decide between the CUDA and the CPU build of llama.cpp, and say why."""
    wanted = os.environ.get("CLOVER_LLAMA_BUILD", "auto").strip().lower()
    if wanted not in ("auto", "cpu", "cuda"):
        fail(f"CLOVER_LLAMA_BUILD must be auto, cpu or cuda, not {wanted!r}")
    nvcc = find_nvcc()
    gpus = nvidia_gpus()
    if wanted == "cpu":
        flavor, why = "cpu", "CLOVER_LLAMA_BUILD=cpu"
    elif wanted == "cuda":
        if not nvcc:
            fail("CLOVER_LLAMA_BUILD=cuda but no CUDA toolkit (nvcc) was found; install it or set CUDA_HOME")
        flavor, why = "cuda", "CLOVER_LLAMA_BUILD=cuda"
    elif nvcc and gpus:
        flavor, why = "cuda", f"CUDA toolkit at {nvcc} and GPU {gpus[0][0]}"
    elif nvcc:
        flavor, why = "cpu", (f"CUDA toolkit at {nvcc} but no NVIDIA GPU visible (nvidia-smi lists none); "
                              "the CUDA build is made with `bootstrap.py build-cuda`")
    else:
        flavor, why = "cpu", "no CUDA toolkit (nvcc) found"
    if flavor == "cuda":
        return cuda_build(why, gpus)
    return cpu_build(why)


# ggml's x86 CPU variants (GGML_CPU_ALL_VARIANTS in ggml/src/CMakeLists.txt) with the features each is
# built for, in ggml's order; `limit_cpu_variants` checks this table against the source it cuts.
X86_VARIANTS: dict[str, tuple[str, ...]] = {
    "x64": (),
    "sse42": ("SSE42",),
    "sandybridge": ("SSE42", "AVX"),
    "ivybridge": ("SSE42", "AVX", "F16C"),
    "piledriver": ("SSE42", "AVX", "F16C", "FMA"),
    "haswell": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"),
    "skylakex": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512"),
    "cannonlake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI"),
    "cascadelake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI"),
    "icelake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI"),
    "cooperlake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VNNI", "AVX512_BF16"),
    "zen4": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"),
    "alderlake": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX_VNNI"),
    "sapphirerapids": ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI",
                       "AVX512_BF16", "AMX_TILE", "AMX_INT8"),
}
# each ggml feature as /proc/cpuinfo names it, and its weight in ggml's score (arch/x86/cpu-feats.cpp)
X86_FLAGS = {"SSE42": ("sse4_2",), "AVX": ("avx",), "F16C": ("f16c",), "FMA": ("fma",), "AVX2": ("avx2",),
             "BMI2": ("bmi2",), "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
             "AVX512_VBMI": ("avx512vbmi",), "AVX512_VNNI": ("avx512_vnni",), "AVX512_BF16": ("avx512_bf16",),
             "AVX_VNNI": ("avx_vnni",), "AMX_TILE": ("amx_tile",), "AMX_INT8": ("amx_int8",)}
X86_SCORE = {"FMA": 0, "F16C": 1, "SSE42": 2, "BMI2": 3, "AVX": 4, "AVX2": 5, "AVX_VNNI": 6, "AVX512": 7,
             "AVX512_VBMI": 8, "AVX512_BF16": 9, "AVX512_VNNI": 10, "AMX_INT8": 11}


def cpu_flags() -> set[str] | None:
    """This CPU's feature flags as the kernel lists them, or None where /proc/cpuinfo is not there."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    m = re.search(r"^flags\s*:(.*)$", text, re.M)
    return set(m.group(1).split()) if m else None


def runnable_variants(flags: set[str]) -> list[str]:
    """ggml's x86 variants this CPU can run, best first by ggml's own score."""
    def score(features: tuple[str, ...]) -> int:
        return 1 + sum(1 << X86_SCORE[f] for f in features if f in X86_SCORE)

    ok = [v for v, feats in X86_VARIANTS.items() if all(set(X86_FLAGS[f]) <= flags for f in feats)]
    return sorted(ok, key=lambda v: -score(X86_VARIANTS[v]))


def dev_cpu_variants() -> tuple[str, ...] | None:
    """The CPU variants of a development build: the two best this CPU can run (the second is where
    the app goes when the best one fails its probe, app/machine/cpu_probe.py) and plain x64; None
    (all 14, the portable build) with CLOVER_CPU_VARIANTS=all, off x86-64 Linux, or where the CPU's
    flags cannot be read. CLOVER_CPU_VARIANTS=a,b,c names them."""
    wanted = os.environ.get("CLOVER_CPU_VARIANTS", "").strip().lower()
    if wanted == "all":
        return None
    if wanted:
        names = tuple(dict.fromkeys(n.strip() for n in wanted.split(",") if n.strip()))
        unknown = [n for n in names if n not in X86_VARIANTS]
        if unknown:
            fail(f"CLOVER_CPU_VARIANTS: no CPU variant {unknown} (ggml has {', '.join(X86_VARIANTS)})")
        return names
    import platform

    flags = cpu_flags()
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64") or flags is None:
        return None
    best = runnable_variants(flags)
    return tuple(dict.fromkeys([*best[:2], "x64"]))


def cpu_build(why: str) -> dict[str, str]:
    """The CPU build: every variant (portable: `cpu-dl`), or the development subset for this CPU."""
    variants = dev_cpu_variants()
    if variants is None:
        return {"flavor": "cpu", "reason": why, "cmake_args": COMMON_CMAKE_ARGS, "key": "cpu-dl"}
    return {"flavor": "cpu", "reason": f"{why}; CPU variants for this machine: {', '.join(variants)} "
                                       "(CLOVER_CPU_VARIANTS=all builds all 14)",
            "cmake_args": COMMON_CMAKE_ARGS, "key": "cpu-dl-" + "-".join(variants),
            "cpu_variants": ";".join(variants)}


def cuda_build(why: str, gpus: list[tuple[str, str]] | None = None) -> dict[str, str]:
    """The CUDA build's description: architectures from CLOVER_CUDA_ARCHS, else the shipped list
    (a machine with GPUs and no explicit list builds for its own GPUs only: faster, not shippable)."""
    archs = os.environ.get("CLOVER_CUDA_ARCHS", "").strip()
    if not archs and gpus:
        archs = ";".join(sorted({cap.replace(".", "") for _, cap in gpus if cap.replace(".", "").isdigit()}))
    archs = archs or DEFAULT_CUDA_ARCHS
    key = "cuda-" + re.sub(r"[^0-9a-z]+", "_", archs.lower()).strip("_")
    return {"flavor": "cuda", "reason": why, "key": key, "archs": archs,
            "cmake_args": f"{COMMON_CMAKE_ARGS} -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={archs}"}


def cuda_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    if not m:
        fail(f"cannot read the CUDA version from `{nvcc} --version`")
    return m.group(1)


def cuda_home(nvcc: str) -> Path:
    """The toolkit's folder, as nvcc itself reports it (nvcc on PATH may be a wrapper script)."""
    out = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull], capture_output=True, text=True)
    m = re.search(r"^#\$ _HERE_=(.+)$", out.stdout + out.stderr, re.M)
    return Path(m.group(1).strip()).resolve().parent if m else Path(nvcc).resolve().parent.parent


def cuda_toolkit_args(build: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Extra CMake arguments that let the CUDA build link on a machine without a GPU driver, and
    without cuBLAS in the toolkit; returns (args, facts to record)."""
    nvcc = find_nvcc()
    if not nvcc:
        fail("the CUDA build needs a CUDA toolkit (nvcc)")
    home = cuda_home(nvcc)
    version = cuda_version(nvcc)
    libdir = next((d for d in (home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib")
                   if (d / "libcudart.so").exists() or list(d.glob("libcudart.so.*"))), None)
    if libdir is None:
        fail(f"no libcudart in the CUDA toolkit at {home}")
    deps = cache_dir().parent / "build-deps"
    args: list[str] = []
    facts = {"cuda_version": version, "cuda_home": str(home)}
    # 1. The driver library, libcuda.so.1, exists only where a driver is installed. llama.cpp links
    #    it for its virtual-memory pool; a link-time stub (what the toolkit's lib64/stubs holds) is
    #    enough, the real driver's library is used at run time.
    if not list(libdir.glob("stubs/libcuda.so")):
        stub = make_cuda_stub(home / "include" / "cuda.h", deps / "cuda-stub")
        args.append(f"-DCUDA_cuda_driver_LIBRARY={stub}")
        facts["cuda_driver_stub"] = str(stub)
    # 2. cuBLAS: from the toolkit, else from NVIDIA's wheel on the package registry.
    if not list(libdir.glob("libcublas.so*")):
        pinned = cublas_pin(version)
        if not pinned:
            fail(f"the CUDA {version} toolkit at {home} has no cuBLAS and resources/gpu_runtime.json pins no "
                 "nvidia-cublas wheel for this CUDA version; install cuBLAS into the toolkit")
        cublas = fetch_wheel_tree("nvidia-cublas", pinned, deps)
        lib = next(cublas.glob("nvidia/cu*/lib"))
        inc = next(cublas.glob("nvidia/cu*/include"))
        major = version.split(".")[0]
        args += [f"-DCUDA_cublas_LIBRARY={lib / f'libcublas.so.{major}'}",
                 f"-DCUDA_cublasLt_LIBRARY={lib / f'libcublasLt.so.{major}'}",
                 f"-DCMAKE_CUDA_FLAGS=-I{inc}"]
        facts["cublas"] = f"nvidia-cublas {pinned} (package registry)"
    # 3. The CUDA runtime goes into the wheel beside libggml-cuda (0.7 MB); cuBLAS does not (about
    #    600 MB): the app fetches it on first start where a GPU can use it (app/machine/gpu_runtime.py).
    cudart = sorted(p for p in libdir.glob("libcudart.so.*") if re.fullmatch(r"libcudart\.so\.\d+", p.name))
    if cudart:
        args.append(f"-DCLOVER_BUNDLE_LIBS={cudart[-1]}")
    return " ".join(args), facts


def make_cuda_stub(cuda_h: Path, out_dir: Path) -> Path:
    """A link-only libcuda.so (soname libcuda.so.1) with every driver entry point cuda.h declares."""
    stub = out_dir / "libcuda.so"
    if stub.exists():
        return stub
    text = cuda_h.read_text(errors="replace")
    names = set(re.findall(r"CUresult\s+CUDAAPI\s+(cu\w+)\s*\(", text))
    renamed = dict(re.findall(r"#\s*define\s+(cu\w+)\s+(cu\w+_v\d+)\b", text))
    names = {renamed.get(n, n) for n in names} | set(renamed.values())
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "cuda_stub.c"
    # 34 is CUDA_ERROR_STUB_LIBRARY: what NVIDIA's own stub returns if it is ever loaded.
    src.write_text("".join(f"int {n}(void) {{ return 34; }}\n" for n in sorted(names)))
    cc = shutil.which("cc") or shutil.which("gcc") or fail("a C compiler (cc) is needed for the CUDA build")
    run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", stub, src])
    say(f"made a link-time stub of the CUDA driver library ({len(names)} entry points): {stub}")
    return stub


def fetch_wheel_tree(name: str, version: str, deps: Path) -> Path:
    """Download NAME==VERSION's wheel from the package registry once and unpack it; its folder."""
    tree = deps / f"{name}-{version}"
    if (tree / ".complete").exists():
        return tree
    say(f"fetching {name} {version} from the package registry (needed to build, not shipped)")
    with tempfile.TemporaryDirectory(prefix="clover-dep-") as tmp:
        run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
             f"{name}=={version}", "-d", tmp])
        wheel = glob.glob(os.path.join(tmp, "*.whl"))
        if len(wheel) != 1:
            fail(f"expected one {name} wheel, found {wheel}")
        import zipfile

        shutil.rmtree(tree, ignore_errors=True)
        with zipfile.ZipFile(wheel[0]) as z:
            z.extractall(tree)
    (tree / ".complete").write_text(version)
    return tree


def read_marker() -> dict:
    try:
        return json.loads((VENV / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def write_marker(data: dict) -> None:
    (VENV / MARKER).write_text(json.dumps(data, indent=2) + "\n")


def ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 (this script tells users of an older Python)
        fail(f"Python 3.11 or newer is needed to set up Clover Launcher; this is {sys.version.split()[0]}")
    if venv_python().exists():
        return
    say(f"creating the environment in {VENV}")
    import venv

    venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    run([venv_python(), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])


def recipe_digest(build: dict[str, str]) -> str:
    """What decides a build's bytes besides the version: its flags and the CMake include it uses.
    Every byte of the include counts, comments too: a reworded comment rebuilds every cached wheel
    (two hours for the CUDA one here), which is why its comment still names app/llama_backend.py,
    now app/machine/llama_backend.py."""
    h = hashlib.sha256(build["cmake_args"].encode())
    h.update((ROOT / "packaging" / "llama_cpp_extras.cmake").read_bytes())
    if build.get("include"):  # the slim build's include, its CPU variants and its post-processing
        h.update((ROOT / "packaging" / build["include"]).read_bytes())
        h.update(f"{build.get('cpu_variants')}|{build.get('post')}".encode())
    elif build.get("cpu_variants"):  # a development build's subset of CPU variants
        h.update(f"variants:{build['cpu_variants']}".encode())
    return h.hexdigest()[:10]


def wheel_dir_for(build: dict[str, str]) -> Path:
    return cache_dir() / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-{build['key']}-{recipe_digest(build)}"


def cached_wheel(build: dict[str, str]) -> Path | None:
    wheels = sorted(wheel_dir_for(build).glob("llama_cpp_python-*.whl"))
    return wheels[-1] if wheels else None


def build_wheel(build: dict[str, str]) -> Path:
    """Build llama-cpp-python for `build` once per machine (kept in the wheel cache); the wheel."""
    found = cached_wheel(build)
    if found:
        say(f"llama.cpp: reusing the {build['flavor']} build {found}")
        return found
    cmake_args = f"{build['cmake_args']} {cmake_include_arg(build)}"
    facts: dict[str, str] = {}
    if build["flavor"] == "cuda":
        extra, facts = cuda_toolkit_args(build)
        cmake_args += " " + extra
    say(f"llama.cpp: building llama-cpp-python {LLAMA_CPP_PYTHON} from source, "
        f"{build['flavor'].upper()} build ({build['reason']}); CMAKE_ARGS={cmake_args!r}. "
        + ("This takes hours on a 2-core machine (docs/developers.md)." if build["flavor"] == "cuda"
           else "This takes several minutes once per machine."))
    env = dict(os.environ)
    env["CMAKE_ARGS"] = cmake_args
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    wheel_dir = wheel_dir_for(build)
    started = time.monotonic()
    src = None
    if build.get("cpu_variants"):  # a subset of CPU variants: built from the unpacked, cut source
        src = limited_source(build, cache_dir().parent / "build-deps")
        source = [str(src / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"), f"--config-settings=build-dir={src / 'build'}"]
    else:
        source = ["--no-binary", "llama-cpp-python", f"llama-cpp-python=={LLAMA_CPP_PYTHON}"]
    with tempfile.TemporaryDirectory(prefix="clover-wheel-") as tmp:
        run([venv_python(), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", *source, "-w", tmp], env=env)
        built = glob.glob(os.path.join(tmp, "llama_cpp_python-*.whl"))
        if len(built) != 1:
            fail(f"expected one llama-cpp-python wheel, found {built}")
        check_wheel(Path(built[0]), build)
        wheel_dir.mkdir(parents=True, exist_ok=True)
        # Copy then rename so that an interrupted set-up never leaves half a wheel in the cache.
        dest = wheel_dir / Path(built[0]).name
        partial = dest.with_suffix(".partial")
        shutil.copyfile(built[0], partial)
        os.replace(partial, dest)
    if src is not None:
        shutil.rmtree(src, ignore_errors=True)  # the source and its build folder
    seconds = time.monotonic() - started
    record = {**build, **facts, "cmake_args_full": cmake_args, "build_seconds": round(seconds),
              "wheel_bytes": dest.stat().st_size, "cpus": os.cpu_count()}
    (wheel_dir / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    say(f"llama.cpp: {build['flavor']} wheel built in {seconds / 60:.1f} min, "
        f"{dest.stat().st_size / 1e6:.0f} MB: {dest}")
    return dest


def check_wheel(wheel: Path, build: dict[str, str]) -> None:
    """A wheel without a CPU backend module (or, for CUDA, without the CUDA one) would load nothing."""
    import zipfile

    names = [Path(n).name for n in zipfile.ZipFile(wheel).namelist()]
    if not any(n.startswith("libggml-cpu-") for n in names):
        fail(f"{wheel.name} has no CPU backend modules (libggml-cpu-*.so); the CMake include did not run")
    if build.get("cpu_variants"):
        shipped = {n[len("libggml-cpu-"):].split(".so")[0] for n in names if n.startswith("libggml-cpu-")}
        if shipped != set(build["cpu_variants"].split(";")):
            fail(f"{wheel.name} has the CPU variants {sorted(shipped)}, not {build['cpu_variants']}")
    if build["flavor"] == "cuda" and "libggml-cuda.so" not in names:
        fail(f"{wheel.name} has no libggml-cuda.so")


# ----------------------------------------------------------------------------- the GPU check's slim wheel
# packaging/gpu_check.sh carries a CUDA wheel to a lent H200, and the device tool carries 64 MiB in all.
# The shipped recipe gives 220 MB: five CUDA architectures, fourteen CPU variants, and every library
# written four to six times (below). This recipe is the same build cut to what that machine runs:
# - CUDA for sm_90 only, as machine code without PTX ("90-real": a plain "90" adds compute_90 PTX,
#   which an sm_90 card never uses and which compresses to about the size of the machine code, so it
#   would double libggml-cuda; CLOVER_CUDA_ARCHS overrides it);
# - the CPU variants an x86-64 server can use. ggml's GGML_CPU_ALL_VARIANTS is a fixed list in
#   ggml/src/CMakeLists.txt (14 variants on x86, no option names a subset; the variant modules are
#   dependencies of libggml, so they cannot be left out of the build afterwards either), so the list
#   is cut in the unpacked source: `limit_cpu_variants`;
# - each library once. llama-cpp-python installs each library twice: into `llama_cpp/lib` (its own
#   install rules) and into `lib/` and `bin/` at the wheel's root (llama.cpp's and ggml's own install
#   rules, with scikit-build-core's install prefix at the wheel's root; ggml installs the backend
#   modules into CMAKE_INSTALL_BINDIR). A wheel cannot hold symlinks, so `libllama.so`,
#   `libllama.so.0` and `libllama.so.0.5.0` are three copies in each place. llama_cpp_slim.cmake
#   builds libllama, libggml, libggml-base and libmtmd unversioned (one file each, soname `libX.so`),
#   and `slim_wheel` keeps `llama_cpp/` and the dist-info only (Python loads nothing from the root
#   folders);
# - built with symbols (-g, scikit-build-core's own strip off), then stripped of debug sections only
#   (`strip --strip-debug`): the symbol tables stay, so a crash there is named (gpu_check.sh runs a
#   crashing step again under cuda-gdb); the wheel as built keeps the debug sections, here; the
#   RECORD rewritten.
SLIM_ARCHS = "90-real"
SLIM_CPU_VARIANTS = ("x64", "haswell", "skylakex", "icelake", "zen4", "sapphirerapids")
SLIM_POST = "slim-2"  # bump when slim_wheel changes what it writes: the digest, and so the cache key, follows
SLIM_LIMIT_MIB = 60  # what packaging/gpu_check.sh may carry with its small wheels


def slim_cuda_build() -> dict[str, str]:
    archs = os.environ.get("CLOVER_CUDA_ARCHS", "").strip() or SLIM_ARCHS
    key = "cuda-" + re.sub(r"[^0-9a-z]+", "_", archs.lower()).strip("_") + "-slim"
    return {"flavor": "cuda", "reason": "bootstrap.py build-cuda-slim (the GPU check's wheel)", "key": key,
            "archs": archs, "include": "llama_cpp_slim.cmake", "cpu_variants": ";".join(SLIM_CPU_VARIANTS),
            "post": SLIM_POST,
            "cmake_args": f"{COMMON_CMAKE_ARGS} -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={archs}"}


def as_built_id(build: dict[str, str]) -> str:
    """The slim build's key and digest without its post-processing (the source and the wheel as built)."""
    return f"{build['key']}-{recipe_digest({**build, 'post': ''})}"


def llama_sdist(deps: Path) -> Path:
    """llama-cpp-python's source archive: CLOVER_LLAMA_SDIST, else downloaded once into `deps`."""
    given = os.environ.get("CLOVER_LLAMA_SDIST")
    if given:
        return Path(given)
    sdist = deps / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not sdist.exists():
        deps.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="clover-sdist-", dir=deps) as tmp:
            run([venv_python(), "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                 f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", tmp])
            os.replace(Path(tmp) / sdist.name, sdist)
    return sdist


def limit_cpu_variants(src: Path, keep: tuple[str, ...]) -> list[str]:
    """Cut ggml's x86 list of CPU variants (GGML_CPU_ALL_VARIANTS) to `keep`; the names it removed."""
    cmake = src / "vendor" / "llama.cpp" / "ggml" / "src" / "CMakeLists.txt"
    text = cmake.read_text()
    start = text.find('if (GGML_SYSTEM_ARCH STREQUAL "x86")', text.find("if (GGML_CPU_ALL_VARIANTS)"))
    end = text.find("elseif", start)
    if start < 0 or end < 0:
        fail(f"{cmake}: the x86 list of GGML_CPU_ALL_VARIANTS was not found (llama.cpp changed?)")
    block = text[start:end]
    line = re.compile(r"^([ \t]*)ggml_add_cpu_backend_variant\((\w+)([^\n)]*)\)?[^\n]*$", re.M)
    names = [m.group(2) for m in line.finditer(block)]
    for m in line.finditer(block):
        if m.group(2) in X86_VARIANTS and tuple(m.group(3).split()) != X86_VARIANTS[m.group(2)]:
            fail(f"{cmake}: CPU variant {m.group(2)} is built for {m.group(3).split()}, bootstrap.py's table "
                 f"says {list(X86_VARIANTS[m.group(2)])} (llama.cpp changed?)")
    if set(keep) - set(names):
        fail(f"{cmake}: no CPU variant {sorted(set(keep) - set(names))} (it has {names})")
    cut = line.sub(lambda m: m.group(0) if m.group(2) in keep else f"{m.group(1)}# clover: {m.group(0).strip()}",
                   block)
    cmake.write_text(text[:start] + cut + text[end:])
    return [n for n in names if n not in keep]


def limited_source(build: dict[str, str], deps: Path) -> Path:
    """The unpacked source with its CPU variants cut, kept (with its build folder) until the wheel is made."""
    src = deps / f"src-{as_built_id(build)}"
    if (src / ".complete").exists():
        return src
    import tarfile

    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    with tarfile.open(llama_sdist(deps)) as tar:
        tar.extractall(src, filter="data")
    tree = src / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    removed = limit_cpu_variants(tree, tuple(build["cpu_variants"].split(";")))
    say(f"llama.cpp CPU variants: {build['cpu_variants']} (left out: {', '.join(removed)})")
    (src / ".complete").write_text(build["cpu_variants"])
    return src


def elf_needed(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def record_line(name: str, data: bytes) -> str:
    import base64

    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim_wheel(raw: Path, out_dir: Path, variants: tuple[str, ...]) -> tuple[Path, dict]:
    """`raw` with only `llama_cpp/` and the dist-info, its libraries stripped and each present once,
    a new RECORD; the new wheel in `out_dir` and what was done."""
    import zipfile

    strip = shutil.which("strip") or fail("`strip` (binutils) is needed for the slim wheel")
    facts: dict = {"raw_bytes": raw.stat().st_size, "dropped": [], "stripped_bytes": 0, "libs": {}}
    with tempfile.TemporaryDirectory(prefix="clover-slim-") as tmp:
        tree = Path(tmp)
        with zipfile.ZipFile(raw) as z:
            names = z.namelist()
            dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
            keep = [n for n in names if n.startswith(("llama_cpp/", dist_info + "/")) and not n.endswith("/")]
            facts["dropped"] = sorted({n.split("/")[0] for n in names} - {"llama_cpp", dist_info})
            for n in keep:
                if n != f"{dist_info}/RECORD":
                    z.extract(n, tree)
        lib = tree / "llama_cpp" / "lib"
        libs = sorted(p for p in lib.iterdir() if ".so" in p.name)
        versioned = [p.name for p in libs if re.search(r"\.so\.\d", p.name) and not p.name.startswith("libcudart")]
        if versioned:
            fail(f"{raw.name}: versioned copies {versioned}: the slim include did not apply")
        for p in libs:
            before = p.stat().st_size
            if subprocess.run([strip, "--strip-debug", str(p)]).returncode != 0:
                fail(f"strip --strip-debug {p.name} failed")
            facts["stripped_bytes"] += before - p.stat().st_size
            facts["libs"][p.name] = p.stat().st_size
        seen: dict[str, str] = {}
        for p in libs:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            if digest in seen:
                fail(f"{raw.name}: {p.name} is a copy of {seen[digest]}")
            seen[digest] = p.name
            for dep in elf_needed(p):  # every library of ours that one needs is there, by that name
                if dep.startswith(("libggml", "libllama", "libmtmd")) and not (lib / dep).exists():
                    fail(f"{raw.name}: {p.name} needs {dep}, which is not in llama_cpp/lib")
        cpu = sorted(p.name[len("libggml-cpu-"):-len(".so")] for p in libs if p.name.startswith("libggml-cpu-"))
        if cpu != sorted(variants):
            fail(f"{raw.name}: CPU variants {cpu}, expected {sorted(variants)}")
        files = sorted((p for p in tree.rglob("*") if p.is_file()),
                       key=lambda p: (p.relative_to(tree).parts[0] == dist_info, p.relative_to(tree).as_posix()))
        record = f"{dist_info}/RECORD"
        out_dir.mkdir(parents=True, exist_ok=True)
        dest = out_dir / raw.name
        partial = dest.with_suffix(".partial")
        lines = []
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            for p in files:
                name = p.relative_to(tree).as_posix()
                data = p.read_bytes()
                info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (0o755 if os.access(p, os.X_OK) else 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data, compresslevel=9)
                lines.append(record_line(name, data))
            lines.append(f"{record},,")
            z.writestr(zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(lines) + "\n",
                       compress_type=zipfile.ZIP_DEFLATED)
        os.replace(partial, dest)
    facts["wheel_bytes"] = dest.stat().st_size
    return dest, facts


def build_slim_wheel() -> Path:
    """The GPU check's CUDA wheel (`slim_cuda_build`), built once per machine into the wheel cache."""
    build = slim_cuda_build()
    found = cached_wheel(build)
    if found:
        say(f"llama.cpp: reusing the slim CUDA wheel {found} ({found.stat().st_size / 2**20:.1f} MiB)")
        return found
    wheel_dir = wheel_dir_for(build)
    # the wheel as built, kept under the recipe without its post-processing: a new SLIM_POST reuses it
    raw_dir = cache_dir() / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-{as_built_id(build)}.as-built"
    raw = sorted(raw_dir.glob("llama_cpp_python-*.whl"))
    facts: dict = {}
    if not raw:
        deps = cache_dir().parent / "build-deps"
        extra, facts = cuda_toolkit_args(build)
        # with symbols (-g; scikit-build-core's install would strip them): the wheel as built keeps
        # them for reading a crash's addresses here, and slim_wheel strips only the debug sections, so
        # the carried libraries keep their symbol tables and a backtrace there names its functions
        cmake_args = f"{build['cmake_args']} {cmake_include_arg(build)} {extra} -DCMAKE_C_FLAGS=-g -DCMAKE_CXX_FLAGS=-g"
        src = limited_source(build, deps)
        tree = src / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
        env = dict(os.environ, CMAKE_ARGS=cmake_args)
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        say(f"llama.cpp: building the slim CUDA wheel (sm {build['archs']}, CPU variants {build['cpu_variants']}); "
            f"CMAKE_ARGS={cmake_args!r}. One to three hours on 2 shared cores; an interrupted build resumes "
            f"in {src / 'build'}")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="clover-wheel-") as tmp:
            run([venv_python(), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir",
                 f"--config-settings=build-dir={src / 'build'}", "--config-settings=install.strip=false",
                 tree, "-w", tmp], env=env)
            built = glob.glob(os.path.join(tmp, "llama_cpp_python-*.whl"))
            if len(built) != 1:
                fail(f"expected one llama-cpp-python wheel, found {built}")
            check_wheel(Path(built[0]), build)
            raw_dir.mkdir(parents=True, exist_ok=True)
            partial = raw_dir / (Path(built[0]).name + ".partial")
            shutil.copyfile(built[0], partial)
            os.replace(partial, raw_dir / Path(built[0]).name)
        seconds = time.monotonic() - started
        facts.update(cmake_args_full=cmake_args, build_seconds=round(seconds), cpus=os.cpu_count())
        (raw_dir / "build.json").write_text(json.dumps({**build, **facts}, indent=2) + "\n")
        raw = sorted(raw_dir.glob("llama_cpp_python-*.whl"))
        shutil.rmtree(src, ignore_errors=True)  # the source and its build folder (several GB)
    else:
        say(f"llama.cpp: the slim CUDA build is done ({raw[-1]}); post-processing it")
        with contextlib.suppress(OSError, ValueError):
            facts = json.loads((raw_dir / "build.json").read_text())
    dest, post = slim_wheel(raw[-1], wheel_dir, tuple(build["cpu_variants"].split(";")))
    check_wheel(dest, build)
    record = {**build, **facts, **post}
    (wheel_dir / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    size = dest.stat().st_size / 2**20
    took = f"built in {record['build_seconds'] / 60:.1f} min, " if record.get("build_seconds") else ""
    say(f"llama.cpp: slim CUDA wheel {took}{size:.1f} MiB (as built: {post['raw_bytes'] / 2**20:.1f} MiB; "
        f"strip saved {post['stripped_bytes'] / 2**20:.1f} MiB): {dest}")
    if size > SLIM_LIMIT_MIB:
        say(f"warning: over the {SLIM_LIMIT_MIB} MiB the GPU check may carry")
    return dest


def ensure_llama(build: dict[str, str], marker: dict) -> None:
    key = f"{build['key']}-{recipe_digest(build)}"
    if marker.get("llama_cpp_python") == LLAMA_CPP_PYTHON and marker.get("llama_build_key") == key:
        say(f"llama.cpp: {build['flavor']} build already installed ({build['cmake_args']})")
        return
    wheel = build_wheel(build)
    run([venv_python(), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", wheel])
    if build["flavor"] == "cuda":
        # On a machine with a GPU the venv gets cuBLAS from the package registry; the app finds it
        # there (a bundle fetches the same wheel on first start instead: app/machine/gpu_runtime.py).
        pinned = cublas_pin(cuda_version(find_nvcc() or "nvcc"))
        if pinned:
            run([venv_python(), "-m", "pip", "install", "--quiet", "--no-deps", f"nvidia-cublas=={pinned}"])
    marker.update(llama_cpp_python=LLAMA_CPP_PYTHON, llama_build_key=key,
                  llama_flavor=build["flavor"], llama_cmake_args=build["cmake_args"],
                  llama_reason=build["reason"], llama_cpu_variants=build.get("cpu_variants", ""))
    write_marker(marker)


# Installed for the tests only, without their dependencies: the BFCL checker's own code, which the
# app's checker is compared with (tests/bench/bfcl_reference.py). bfcl-eval pins numpy 1.26 and pulls
# pandas, faiss, sentence-transformers and five vendor SDKs; the checker needs none of them.
TEST_NO_DEPS = ("bfcl-eval==2026.3.23",)


def ensure_project(extras: str, marker: dict) -> None:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()
                            + " ".join(TEST_NO_DEPS).encode()).hexdigest()
    stamp = {"pyproject": digest, "extras": extras, "root": str(ROOT)}
    done = marker.get("project")
    if done and done.get("pyproject") == digest and done.get("root") == str(ROOT) and (
        extras in done.get("extras", "").split(",") or not extras
    ):
        return
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    say("installing Clover Launcher and its pinned dependencies")
    run([venv_python(), "-m", "pip", "install", "--quiet", "-e", target])
    if "test" in extras.split(","):
        run([venv_python(), "-m", "pip", "install", "--quiet", "--no-deps", *TEST_NO_DEPS])
    if done and done.get("pyproject") == digest and done.get("root") == str(ROOT):
        stamp["extras"] = ",".join(sorted((set(done.get("extras", "").split(",")) | {extras}) - {""}))
    marker["project"] = stamp
    write_marker(marker)


# llama-server: stock llama.cpp through HTTP (slots, its n-gram speculative types), beside ours in the benches
LLAMA_TOOLS = ("llama-bench", "llama-batched-bench", "llama-server")


def llama_bench(tool: str = "llama-bench") -> Path:
    """llama.cpp's own `llama-bench`, `llama-batched-bench` and `llama-server` (without its web UI),
    built from the same vendored source and flags as the CPU wheel (the speed anchors of
    tests/bench/engine_speed.py, parallel_serve.py and speculative.py), cached like the wheel; the
    path of `tool`."""
    build = {"flavor": "cpu", "key": "cpu-dl", "cmake_args": COMMON_CMAKE_ARGS}
    folder = cache_dir() / f"llama-bench-{LLAMA_CPP_PYTHON}-{recipe_digest(build)}"
    exes = {t: folder / "bin" / (f"{t}.exe" if os.name == "nt" else t) for t in LLAMA_TOOLS}
    exe = exes[tool]
    if all(e.exists() for e in exes.values()):
        return exe
    ensure_venv()
    cmake = shutil.which("cmake")
    if not cmake:
        run([venv_python(), "-m", "pip", "install", "--quiet", "cmake"])
        cmake = str(venv_python().parent / "cmake")
    say(f"building llama-bench from llama-cpp-python {LLAMA_CPP_PYTHON}'s llama.cpp ({COMMON_CMAKE_ARGS}); "
        "this takes several minutes once per machine")
    with tempfile.TemporaryDirectory(prefix="clover-bench-") as tmp:
        run([venv_python(), "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", tmp])
        import tarfile

        sdist = glob.glob(os.path.join(tmp, "llama_cpp_python-*.tar.gz"))[0]
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        src = Path(tmp) / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
        out = Path(tmp) / "build"
        run([cmake, "-S", src, "-B", out, "-DCMAKE_BUILD_TYPE=Release", *COMMON_CMAKE_ARGS.split(),
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
             "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",  # no web UI: no npm, no download
             "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TOOLS=ON",
             # it is copied out of the build folder: it must find its libraries beside it
             "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN"])
        run([cmake, "--build", out, "--config", "Release", "--target", *LLAMA_TOOLS,
             "-j", str(os.cpu_count() or 2)])
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(out / "bin", partial / "bin")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)
    return exe


def setup(extras: str) -> None:
    ensure_venv()
    marker = read_marker()
    build = choose_build()
    say(f"llama.cpp build: {build['flavor'].upper()} ({build['reason']})")
    ensure_llama(build, marker)
    ensure_project(extras, marker)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("start", "test", "setup", "build-cuda", "build-cuda-slim", "llama-bench"):
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "setup":
        setup("test" if "--test" in rest else "")
        return 0
    if command == "build-cuda":
        ensure_venv()
        print(build_wheel(cuda_build("bootstrap.py build-cuda")))
        return 0
    if command == "build-cuda-slim":
        ensure_venv()
        print(build_slim_wheel())
        return 0
    if command == "llama-bench":
        print(llama_bench(rest[0] if rest else "llama-bench"))
        return 0
    if command == "start":
        setup("")
        args = [str(venv_python()), "-m", "app", *rest]
    else:
        setup("test")
        if os.environ.get("CLOVER_CUDA_CHECK") == "1":  # also build the CUDA wheel the slow tests use
            build_wheel(cuda_build("CLOVER_CUDA_CHECK=1"))
        args = [str(venv_python()), "-m", "pytest", *rest]
    os.chdir(ROOT)
    if os.name == "nt":
        return subprocess.call(args)
    os.execv(args[0], args)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
