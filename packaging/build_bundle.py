#!/usr/bin/env python3
"""Build the double-click bundle (one folder) with PyInstaller.

    python3 packaging/bootstrap.py setup --test     # once: the environment, with PyInstaller
    .venv/bin/python packaging/build_bundle.py [--dist DIR] [--work DIR]

The result is DIST/clover-launcher/ with the `clover-launcher` executable; check it with
`DIST/clover-launcher/clover-launcher --self-test [MODEL.gguf]`. Install it in the user's menu
with packaging/linux/install.sh (Windows: packaging/windows/clover-launcher.iss).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(dist: Path, work: Path) -> Path:
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
           "--distpath", str(dist), "--workpath", str(work), str(ROOT / "packaging" / "clover-launcher.spec")]
    subprocess.run(cmd, check=True, cwd=ROOT)
    exe = dist / "clover-launcher" / ("clover-launcher.exe" if sys.platform == "win32" else "clover-launcher")
    if not exe.exists():
        raise SystemExit(f"PyInstaller finished but {exe} is missing")
    return exe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"))
    parser.add_argument("--work", default=str(ROOT / "build" / "pyinstaller"))
    args = parser.parse_args()
    exe = build(Path(args.dist), Path(args.work))
    print(f"built {exe}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
