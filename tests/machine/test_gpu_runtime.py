"""The GPU runtime (cuBLAS) fetched from a package index on first start, and the CUDA readiness lines;
the CUDA wheel itself, on this machine without a GPU (slow; skipped when it is not built)."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.machine import gpu, gpu_runtime
from app.machine.llama_backend import BackendLoad, LlamaBuild
from tests.conftest import ROOT
from tests.helpers.app_process import run_app
from tests.helpers.fakes import FakeGpu, FakeNVML, NVMLError_LibraryNotFound, rtx_4090
from tests.helpers.http_server import serve_handler


def fake_wheel(folder: Path) -> Path:
    """A wheel shaped like nvidia-cublas's: nvidia/cu13/lib/libcublas*.so.13 (and headers)."""
    wheel = folder / "nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("nvidia/cu13/lib/libcublas.so.13", b"\x7fELF fake cublas")
        z.writestr("nvidia/cu13/lib/libcublasLt.so.13", b"\x7fELF fake cublasLt")
        z.writestr("nvidia/cu13/include/cublas.h", b"/* header */")
        z.writestr("nvidia_cublas-13.0.2.14.dist-info/METADATA", b"Name: nvidia-cublas\n")
    return wheel


class FakeIndex:
    """A PEP 691 simple index on 127.0.0.1 with one project and its files."""

    def __init__(self, wheel: Path, listed_sha: str | None = None):
        self.wheel, self.requests = wheel, []
        self.listed_sha = listed_sha or hashlib.sha256(wheel.read_bytes()).hexdigest()
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                index.requests.append(self.path)
                if self.path.rstrip("/") == "/simple/nvidia-cublas":
                    body = json.dumps({"meta": {"api-version": "1.1"}, "name": "nvidia-cublas", "files": [
                        {"filename": index.wheel.name, "url": f"../../files/{index.wheel.name}",
                         "hashes": {"sha256": index.listed_sha}}]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                elif self.path == f"/files/{index.wheel.name}":
                    body = index.wheel.read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                else:
                    body = b"not found"
                    self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._serving = contextlib.ExitStack()
        self.url = self._serving.enter_context(serve_handler(Handler)) + "/simple"

    def close(self):
        self._serving.close()


@pytest.fixture()
def index(tmp_path, monkeypatch):
    wheel = fake_wheel(tmp_path)
    idx = FakeIndex(wheel)
    real = gpu_runtime.spec()
    pinned = dict(real)
    pinned["packages"] = [dict(real["packages"][0], files={"linux-x86_64": {
        "file": wheel.name, "size": wheel.stat().st_size, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}})]
    monkeypatch.setattr(gpu_runtime, "spec", lambda: pinned)
    monkeypatch.setattr(gpu_runtime, "platform_key", lambda: "linux-x86_64")
    monkeypatch.setenv("CLOVER_PYPI_INDEX", idx.url)
    monkeypatch.setattr(gpu_runtime, "_candidate_dirs", lambda: [d for d in [gpu_runtime.runtime_dir()] if d.is_dir()])
    yield idx
    idx.close()


def test_the_runtime_is_fetched_verified_and_unpacked(index):
    assert not gpu_runtime.installed()
    steps = []
    folder = gpu_runtime.install(lambda step, fraction, text: steps.append((step, fraction, text)))
    assert sorted(p.name for p in folder.iterdir()) == ["libcublas.so.13", "libcublasLt.so.13"]
    assert gpu_runtime.installed() and set(gpu_runtime.find_libs()) == {"cublas", "cublasLt"}
    assert [s for s, _, _ in steps][:2] == ["resolve", "download"] and steps[-1][0] == "done"
    assert not list((gpu_runtime.app_dirs().cache / "gpu-runtime").glob("*.whl"))  # the 400 MB wheel is gone
    assert any(r.startswith("/simple/nvidia-cublas") for r in index.requests)


def test_an_index_that_lists_other_bytes_is_refused_before_any_download(index):
    index.listed_sha = "0" * 64
    with pytest.raises(gpu_runtime.GpuRuntimeError, match="not the pinned"):
        gpu_runtime.install()
    assert not any(r.startswith("/files/") for r in index.requests) and not gpu_runtime.installed()


def test_a_wheel_with_other_bytes_is_deleted_and_nothing_installed(index, tmp_path):
    from app.net.download import HashMismatch

    pinned = gpu_runtime.spec()["packages"][0]["files"]["linux-x86_64"]
    data = bytearray(index.wheel.read_bytes())
    data[-1] ^= 0xFF  # the same name and size, one byte different; the index still lists the pinned hash
    index.wheel.write_bytes(bytes(data))
    index.listed_sha = pinned["sha256"]
    with pytest.raises(HashMismatch):
        gpu_runtime.install()
    assert not gpu_runtime.installed() and not gpu_runtime.runtime_dir().exists()


def build(cuda_module: bool, cuda_loaded: bool = False, error: str | None = None) -> LlamaBuild:
    load = BackendLoad(True, "zen4", ("x64", "zen4"), cuda_module, error)
    return LlamaBuild("0.3.36", "", ("CUDA", "CPU") if cuda_loaded else ("CPU",), cuda_loaded, (), {}, load)


@pytest.mark.parametrize("nvml, llama, level, words", [
    (FakeNVML(init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found")), build(True), "info",
     "No NVIDIA GPU"),
    (FakeNVML([rtx_4090()], cuda=12080), build(True), "warning", "supports CUDA 12.8; this build needs CUDA 13.0"),
    (FakeNVML([FakeGpu("NVIDIA GeForce GTX 1080 Ti", 11.0, cc=(6, 1))]), build(True), "warning",
     "compute capability 6.1) is older than this build supports (7.5"),
    (FakeNVML([rtx_4090()]), build(False), "warning", "CPU-only build"),
    (FakeNVML([rtx_4090()]), build(True, error="the GPU runtime (cuBLAS) is not installed"), "action",
     "GPU runtime (NVIDIA cuBLAS"),
])
def test_readiness_says_why_cuda_is_not_used_and_the_app_stays_on_the_cpu(nvml, llama, level, words, monkeypatch):
    monkeypatch.setattr(gpu_runtime, "installed", lambda: False)
    ready = gpu_runtime.readiness(gpu.probe_with(nvml), llama)
    assert ready.level == level and words in ready.text, ready.text
    if level != "info":
        assert "CPU" in ready.text  # and meanwhile the app runs on the CPU
    assert ready.can_install == (level == "action")


def test_cuda_load_errors_in_words():
    from app.machine.llama_backend import explain_cuda_load_error

    assert "no NVIDIA driver" in explain_cuda_load_error("libcuda.so.1: cannot open shared object file")
    assert "gpu-runtime install" in explain_cuda_load_error("libcublas.so.13: cannot open shared object file")


# ----------------------------------------------------------------------------- the CUDA wheel, without a GPU


def cached_cuda_wheel() -> Path | None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("clover_bootstrap", ROOT / "packaging" / "bootstrap.py")
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    return bootstrap.cached_wheel(bootstrap.cuda_build("test"))


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two subprocesses allowed 5 and 10 min
def test_the_cuda_wheel_runs_here_on_the_cpu(tmp_path, smollm2):
    """The shipped CUDA build on a machine without a GPU: it imports, says CUDA is compiled in and why
    no device is used, and decodes on the CPU backend."""
    wheel = cached_cuda_wheel()
    if wheel is None:
        pytest.skip("the CUDA wheel is not built here: python3 packaging/bootstrap.py build-cuda "
                    "(or CLOVER_CUDA_CHECK=1 for the test command)")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}", CLOVER_HOME=str(tmp_path / "home"))
    env.pop("LD_LIBRARY_PATH", None)
    doctor = run_app("doctor", env=env, inherit=False)
    assert str(site) in subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.__file__)"],
                                       capture_output=True, text=True, env=env).stdout
    assert "CUDA compiled in: yes" in doctor.stdout, doctor.stdout + doctor.stderr
    assert "no CUDA device: no NVIDIA driver" in doctor.stdout
    decode = run_app("--self-test", smollm2, env=env, inherit=False, timeout=600)
    assert decode.returncode == 0, decode.stdout + decode.stderr
    assert "CUDA compiled in, but no CUDA device" in decode.stdout and "ok    decode" in decode.stdout
