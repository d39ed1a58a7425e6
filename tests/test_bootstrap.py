"""packaging/bootstrap.py picks the llama.cpp build the issue asks for: CUDA only with toolkit and GPU."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import ROOT


@pytest.fixture()
def bootstrap(monkeypatch):
    spec = importlib.util.spec_from_file_location("clover_bootstrap", ROOT / "packaging" / "bootstrap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for var in ("CLOVER_LLAMA_BUILD", "CLOVER_CUDA_ARCHS"):
        monkeypatch.delenv(var, raising=False)
    return module


def test_cuda_build_with_toolkit_and_gpu(bootstrap, monkeypatch):
    monkeypatch.setattr(bootstrap, "find_nvcc", lambda: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(bootstrap, "nvidia_gpus", lambda: [("NVIDIA H200", "9.0")])
    build = bootstrap.choose_build()
    assert build["flavor"] == "cuda"
    assert build["cmake_args"] == "-DGGML_CUDA=on -DGGML_NATIVE=OFF -DCMAKE_CUDA_ARCHITECTURES=90"
    assert build["key"] == "cuda-90" and "NVIDIA H200" in build["reason"]


def test_toolkit_without_gpu_builds_for_cpu(bootstrap, monkeypatch):
    monkeypatch.setattr(bootstrap, "find_nvcc", lambda: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(bootstrap, "nvidia_gpus", lambda: [])
    build = bootstrap.choose_build()
    assert build["flavor"] == "cpu" and build["cmake_args"] == "-DGGML_NATIVE=OFF"
    assert "no NVIDIA GPU" in build["reason"]


def test_no_toolkit_builds_for_cpu(bootstrap, monkeypatch):
    monkeypatch.setattr(bootstrap, "find_nvcc", lambda: None)
    monkeypatch.setattr(bootstrap, "nvidia_gpus", lambda: [("NVIDIA RTX 4090", "8.9")])
    build = bootstrap.choose_build()
    assert build["flavor"] == "cpu" and "no CUDA toolkit" in build["reason"]


def test_forced_choices(bootstrap, monkeypatch):
    monkeypatch.setattr(bootstrap, "find_nvcc", lambda: "/opt/cuda/bin/nvcc")
    monkeypatch.setattr(bootstrap, "nvidia_gpus", lambda: [])
    monkeypatch.setenv("CLOVER_LLAMA_BUILD", "cuda")
    monkeypatch.setenv("CLOVER_CUDA_ARCHS", "89;90")
    build = bootstrap.choose_build()
    assert build["flavor"] == "cuda" and build["key"] == "cuda-89_90"
    assert "-DCMAKE_CUDA_ARCHITECTURES=89;90" in build["cmake_args"]
    monkeypatch.setenv("CLOVER_LLAMA_BUILD", "gpu-please")
    with pytest.raises(SystemExit):
        bootstrap.choose_build()


def test_this_environment_was_set_up_by_bootstrap_with_the_build_it_reports():
    """The test command runs in the environment the set-up made; its record matches the loaded library."""
    from app.llama_backend import build_info

    info = build_info()
    if not info.setup:
        pytest.skip("not running in an environment made by packaging/bootstrap.py")
    assert info.setup["llama_cpp_python"] == info.version == "0.3.36"
    assert (info.setup["llama_flavor"] == "cuda") == info.cuda
