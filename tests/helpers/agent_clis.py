"""The coding agents' own command lines, pinned, from the npm registry: Claude Code (`claude -p`) and
Codex (`codex exec`). Each is installed once with npm into the user's cache folder
(`test-clis/`, or `CLOVER_TEST_CLIS=DIR`) and reused; both ship their native binary inside a
registry package (about 370 and 400 MB). Without npm the tests that need them are skipped, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import platformdirs
import pytest

CLIS = {"claude": ("@anthropic-ai/claude-code", "2.1.328"), "codex": ("@openai/codex", "0.169.0")}


def cache_dir() -> Path:
    override = os.environ.get("CLOVER_TEST_CLIS")
    return Path(override) if override else Path(platformdirs.user_cache_dir("clover-launcher")) / "test-clis"


def agent_cli(name: str) -> Path:
    """The CLI's executable, installed first where it is not yet; skips the test where npm is missing."""
    package, version = CLIS[name]
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"needs npm to install {package}@{version}: npm is not on PATH")
    prefix = cache_dir() / f"{name}-{version}"
    exe = prefix / "node_modules" / ".bin" / name
    if not _runs(exe):
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-save",
                        f"{package}@{version}"], check=True, capture_output=True, timeout=900)
        installer = prefix / "node_modules" / package / "install.cjs"  # Claude Code's postinstall, where npm
        if not _runs(exe) and installer.is_file() and shutil.which("node"):  # did not run it
            subprocess.run(["node", str(installer)], cwd=installer.parent, check=True, capture_output=True,
                           timeout=300)
    assert _runs(exe), f"{package}@{version} did not install a working {name} under {prefix}"
    return exe


def _runs(exe: Path) -> bool:
    if not exe.exists():
        return False
    try:
        return subprocess.run([str(exe), "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
