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
    assert build["cmake_args"] == ("-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON "
                                   "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90")
    assert build["key"] == "cuda-90" and "NVIDIA H200" in build["reason"]


def test_toolkit_without_gpu_builds_for_cpu(bootstrap, monkeypatch):
    monkeypatch.setattr(bootstrap, "find_nvcc", lambda: "/usr/local/cuda/bin/nvcc")
    monkeypatch.setattr(bootstrap, "nvidia_gpus", lambda: [])
    build = bootstrap.choose_build()
    assert build["flavor"] == "cpu"
    assert build["cmake_args"] == "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
    assert "no NVIDIA GPU" in build["reason"] and "build-cuda" in build["reason"]


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


def test_the_shipped_cuda_build_covers_turing_to_blackwell(bootstrap):
    build = bootstrap.cuda_build("build-cuda")  # no GPU to read an architecture from: the shipped list
    assert build["archs"] == "75-virtual;86-real;89-real;90-real;120a-real"
    assert "-DGGML_BACKEND_DL=ON" in build["cmake_args"] and "-DGGML_CUDA=on" in build["cmake_args"]
    assert build["key"] == "cuda-75_virtual_86_real_89_real_90_real_120a_real"


def test_cublas_pin_follows_the_runtime_the_app_fetches(bootstrap):
    import json

    spec = json.loads((ROOT / "resources" / "gpu_runtime.json").read_text())
    assert bootstrap.cublas_pin(spec["cuda"]) == spec["packages"][0]["version"]
    assert bootstrap.cublas_pin("12.4") is None  # another CUDA: the toolkit must bring its own cuBLAS


def test_driver_stub_links_every_entry_point_cuda_h_declares(bootstrap, tmp_path):
    """The link-time libcuda stub: built from a cuda.h, soname libcuda.so.1, renamed (_v2) entry points."""
    import shutil
    import subprocess

    if not shutil.which("cc"):
        pytest.skip("no C compiler")
    header = tmp_path / "cuda.h"
    header.write_text("#define cuMemGetInfo cuMemGetInfo_v2\n"
                      "CUresult CUDAAPI cuMemGetInfo(size_t *free, size_t *total);\n"
                      "CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *h, size_t size);\n")
    stub = bootstrap.make_cuda_stub(header, tmp_path / "out")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(stub)], capture_output=True, text=True).stdout
    assert "cuMemGetInfo_v2" in symbols and "cuMemCreate" in symbols
    assert " cuMemGetInfo\n" not in symbols
    soname = subprocess.run(["readelf", "-d", str(stub)], capture_output=True, text=True).stdout
    assert "libcuda.so.1" in soname


def test_this_environment_was_set_up_by_bootstrap_with_the_build_it_reports():
    """The test command runs in the environment the set-up made; its record matches the loaded library."""
    from app.machine.llama_backend import build_info

    info = build_info()
    if not info.setup:
        pytest.skip("not running in an environment made by packaging/bootstrap.py")
    assert info.setup["llama_cpp_python"] == info.version == "0.3.36"
    assert (info.setup["llama_flavor"] == "cuda") == info.cuda
    # the backends are loadable modules: the best CPU variant for this machine was chosen at start
    assert info.load is not None and info.load.dynamic
    assert info.load.cpu_variant in info.load.cpu_variants and len(info.load.cpu_variants) >= 10
