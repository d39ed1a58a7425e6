#!/usr/bin/env python3
"""Set up Clover Launcher's environment on first use, then start the app or the tests.

    python3 packaging/bootstrap.py start [ARGS...]   # the app (ARGS go to `python -m app`)
    python3 packaging/bootstrap.py test  [ARGS...]   # the whole test suite (ARGS go to pytest)

Standard library only: it runs before anything is installed.

What it does, once per machine and again only when something changed:
1. creates `.venv/` in the project folder;
2. builds llama-cpp-python from source, CUDA or CPU (below), into a wheel kept in the
   user's cache folder, and installs it; a later set-up on the same machine reuses the wheel;
3. installs the project and its pinned dependencies (`.[test]` for the tests).

CUDA or CPU: with `CLOVER_LLAMA_BUILD=auto` (the default) it builds with `-DGGML_CUDA=on` when a
CUDA toolkit (nvcc) *and* an NVIDIA GPU (nvidia-smi lists one) are present, for that GPU's compute
capability; otherwise a portable CPU build with `-DGGML_NATIVE=OFF` (the `-march=native` default
has crashed inside the first llama_decode on some virtual machines). A toolkit alone is not enough:
a CUDA build on a machine without a driver cannot load. `CLOVER_LLAMA_BUILD=cpu` or `=cuda` forces
one; `CLOVER_CUDA_ARCHS=90` sets the CUDA architectures. It prints which build it chose and why.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LLAMA_CPP_PYTHON = "0.3.36"
ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("CLOVER_VENV", ROOT / ".venv"))
MARKER = "clover-setup.json"


def say(msg: str) -> None:
    print(f"[clover setup] {msg}", flush=True)


def fail(msg: str) -> "NoReturn":  # type: ignore[name-defined]
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
        flavor, why = "cpu", f"CUDA toolkit at {nvcc} but no NVIDIA GPU visible (nvidia-smi lists none)"
    else:
        flavor, why = "cpu", "no CUDA toolkit (nvcc) found"

    if flavor == "cuda":
        archs = os.environ.get("CLOVER_CUDA_ARCHS") or ";".join(
            sorted({cap.replace(".", "") for _, cap in gpus if cap.replace(".", "").isdigit()})
        )
        cmake_args = "-DGGML_CUDA=on -DGGML_NATIVE=OFF"
        if archs:
            cmake_args += f" -DCMAKE_CUDA_ARCHITECTURES={archs}"
        key = f"cuda-{archs.replace(';', '_') or 'default'}"
    else:
        cmake_args = "-DGGML_NATIVE=OFF"
        key = "cpu"
    return {"flavor": flavor, "reason": why, "cmake_args": cmake_args, "key": key}


def read_marker() -> dict:
    try:
        return json.loads((VENV / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def write_marker(data: dict) -> None:
    (VENV / MARKER).write_text(json.dumps(data, indent=2) + "\n")


def ensure_venv() -> None:
    if sys.version_info < (3, 11):
        fail(f"Python 3.11 or newer is needed to set up Clover Launcher; this is {sys.version.split()[0]}")
    if venv_python().exists():
        return
    say(f"creating the environment in {VENV}")
    import venv

    venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    run([venv_python(), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])


def ensure_llama(build: dict[str, str], marker: dict) -> None:
    if marker.get("llama_cpp_python") == LLAMA_CPP_PYTHON and marker.get("llama_build_key") == build["key"]:
        say(f"llama.cpp: {build['flavor']} build already installed ({build['cmake_args']})")
        return
    wheel_dir = cache_dir() / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-{build['key']}"
    wheels = sorted(glob.glob(str(wheel_dir / "llama_cpp_python-*.whl")))
    if wheels:
        say(f"llama.cpp: reusing the {build['flavor']} build in {wheel_dir}")
    else:
        say(f"llama.cpp: building llama-cpp-python {LLAMA_CPP_PYTHON} from source, "
            f"{build['flavor'].upper()} build ({build['reason']}); CMAKE_ARGS={build['cmake_args']!r}. "
            "This takes several minutes once per machine.")
        env = dict(os.environ)
        env["CMAKE_ARGS"] = build["cmake_args"]
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        with tempfile.TemporaryDirectory(prefix="clover-wheel-") as tmp:
            run([venv_python(), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir",
                 "--no-binary", "llama-cpp-python", f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
                 "-w", tmp], env=env)
            built = glob.glob(os.path.join(tmp, "llama_cpp_python-*.whl"))
            if len(built) != 1:
                fail(f"expected one llama-cpp-python wheel, found {built}")
            wheel_dir.mkdir(parents=True, exist_ok=True)
            # Copy then rename so that an interrupted set-up never leaves half a wheel in the cache.
            dest = wheel_dir / Path(built[0]).name
            partial = dest.with_suffix(".partial")
            shutil.copyfile(built[0], partial)
            os.replace(partial, dest)
            (wheel_dir / "build.json").write_text(json.dumps(build, indent=2) + "\n")
            wheels = [str(dest)]
    run([venv_python(), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", wheels[-1]])
    marker.update(llama_cpp_python=LLAMA_CPP_PYTHON, llama_build_key=build["key"],
                  llama_flavor=build["flavor"], llama_cmake_args=build["cmake_args"],
                  llama_reason=build["reason"])
    write_marker(marker)


def ensure_project(extras: str, marker: dict) -> None:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp = {"pyproject": digest, "extras": extras, "root": str(ROOT)}
    done = marker.get("project")
    if done and done.get("pyproject") == digest and done.get("root") == str(ROOT) and (
        extras in done.get("extras", "").split(",") or not extras
    ):
        return
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    say("installing Clover Launcher and its pinned dependencies")
    run([venv_python(), "-m", "pip", "install", "--quiet", "-e", target])
    if done and done.get("pyproject") == digest and done.get("root") == str(ROOT):
        stamp["extras"] = ",".join(sorted(set(done.get("extras", "").split(",")) | {extras}) - {""})
    marker["project"] = stamp
    write_marker(marker)


def setup(extras: str) -> None:
    ensure_venv()
    marker = read_marker()
    build = choose_build()
    say(f"llama.cpp build: {build['flavor'].upper()} ({build['reason']})")
    ensure_llama(build, marker)
    ensure_project(extras, marker)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("start", "test", "setup"):
        print(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "setup":
        setup("test" if "--test" in rest else "")
        return 0
    if command == "start":
        setup("")
        args = [str(venv_python()), "-m", "app", *rest]
    else:
        setup("test")
        args = [str(venv_python()), "-m", "pytest", *rest]
    os.chdir(ROOT)
    if os.name == "nt":
        return subprocess.call(args)
    os.execv(args[0], args)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
