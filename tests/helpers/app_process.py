"""`python -m app ...` run as a user runs it: a subprocess in the project folder.

One place for the command line, the folder and the environment, so that every test that starts the
app does it the same way. The environment is the test's own (its `CLOVER_HOME`, offscreen Qt) with
`env` laid over it, or exactly `env` with `inherit=False` (a user's bare environment).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def app_command(*args: object) -> list[str]:
    return [sys.executable, "-m", "app", *map(str, args)]


def app_env(env: Mapping[str, str] | None = None, *, inherit: bool = True) -> dict[str, str]:
    return {**os.environ, **(env or {})} if inherit else dict(env or {})


def run_app(*args: object, env: Mapping[str, str] | None = None, inherit: bool = True,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `python -m app ARGS` to its end; stdout and stderr captured as text."""
    return subprocess.run(app_command(*args), cwd=ROOT, env=app_env(env, inherit=inherit), capture_output=True,
                          text=True, timeout=timeout)


def start_app(*args: object, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `python -m app ARGS` and return at once; stdout and stderr come together through `.stdout`."""
    return subprocess.Popen(app_command(*args), cwd=ROOT, env=app_env(env), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
