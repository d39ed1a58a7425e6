"""The double-click bundle: build it with PyInstaller, then run its self-test outside the project.

Slow (about 20 s to build here); `pytest -m slow tests/test_bundle.py` runs it alone.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle")
    r = subprocess.run([sys.executable, str(ROOT / "packaging" / "build_bundle.py"), "--dist", str(out / "dist"),
                        "--work", str(out / "work")], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out / "dist" / "clover-launcher"


def clean_env(home) -> dict[str, str]:
    """A user's environment: no venv, no PYTHONPATH, no project folder, a fresh home."""
    return {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first test builds the bundle (the fixture allows 20 min)
def test_bundle_self_test_decodes_outside_the_project(bundle, smollm2, tmp_path):
    exe = bundle / "clover-launcher"
    assert exe.exists() and os.access(exe, os.X_OK)
    assert (bundle / "_internal" / "resources" / "catalog.json").exists()
    r = subprocess.run([str(exe), "--self-test", str(smollm2)], cwd=tmp_path, env=clean_env(tmp_path / "home"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok    decode: 8 tokens" in r.stdout and "self-test passed" in r.stdout
    assert "ok    window: main window shown" in r.stdout
    assert not (tmp_path / "home" / ".local" / "share" / "clover-launcher").exists()  # user data untouched


@pytest.mark.slow
def test_bundle_command_line(bundle, tmp_path):
    r = subprocess.run([str(bundle / "clover-launcher"), "--help"], env=clean_env(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "setup" in r.stdout and "patch" in r.stdout


@pytest.mark.slow
def test_install_and_uninstall_for_the_user(bundle, tmp_path):
    env = clean_env(tmp_path)
    r = subprocess.run(["bash", str(ROOT / "packaging" / "linux" / "install.sh"), str(bundle)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    desktop = tmp_path / ".local" / "share" / "applications" / "clover-launcher.desktop"
    entry = configparser.ConfigParser(interpolation=None)
    entry.read(desktop)
    exec_line = entry["Desktop Entry"]["Exec"]
    assert exec_line == f"{tmp_path}/.local/opt/clover-launcher/clover-launcher %F"
    assert entry["Desktop Entry"]["Icon"] == "clover-launcher"
    assert (tmp_path / ".local/share/icons/hicolor/256x256/apps/clover-launcher.png").exists()
    installed = tmp_path / ".local" / "bin" / "clover-launcher"
    r = subprocess.run([str(installed), "--version"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Clover Launcher 0.1.0" in r.stdout
    r = subprocess.run(["bash", str(ROOT / "packaging" / "linux" / "uninstall.sh")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0
    assert not desktop.exists() and not installed.exists() and not (tmp_path / ".local/opt/clover-launcher").exists()
