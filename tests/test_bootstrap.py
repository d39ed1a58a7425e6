"""packaging/bootstrap.py picks the llama.cpp build the issue asks for: CUDA only with toolkit and GPU."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

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
    assert info.load.cpu_variant in info.load.cpu_variants
    wanted = info.setup.get("llama_cpu_variants")  # a development build: this CPU's best two and x64
    assert len(info.load.cpu_variants) >= 10 if not wanted else set(info.load.cpu_variants) == set(wanted.split(";"))


# ----------------------------------------------------------------------------- the GPU check's slim wheel


def test_slim_recipe_is_its_own_cache_entry(bootstrap, monkeypatch):
    """build-cuda-slim: sm_90, six CPU variants, its own include; the other recipes' keys do not move."""
    import hashlib

    slim = bootstrap.slim_cuda_build()
    assert slim["key"] == "cuda-90_real-slim" and slim["archs"] == "90-real"  # sm_90 machine code, no PTX
    assert slim["cmake_args"].endswith("-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real")
    assert slim["cpu_variants"] == "x64;haswell;skylakex;icelake;zen4;sapphirerapids"
    assert bootstrap.cmake_include_arg(slim).endswith("packaging/llama_cpp_slim.cmake")
    assert bootstrap.cmake_include_arg().endswith("packaging/llama_cpp_extras.cmake")
    cpu = {"flavor": "cpu", "key": "cpu-dl", "cmake_args": bootstrap.COMMON_CMAKE_ARGS}
    dev = {**cpu, "key": "cpu-dl-zen4-x64", "cpu_variants": "zen4;x64"}
    assert bootstrap.recipe_digest(dev) != bootstrap.recipe_digest(cpu)
    plain = hashlib.sha256(cpu["cmake_args"].encode())
    plain.update((ROOT / "packaging" / "llama_cpp_extras.cmake").read_bytes())
    assert bootstrap.recipe_digest(cpu) == plain.hexdigest()[:10]  # cached CPU wheels stay valid
    assert bootstrap.recipe_digest(slim) != bootstrap.recipe_digest({**slim, "post": "slim-0"})
    assert bootstrap.as_built_id(slim) == bootstrap.as_built_id({**slim, "post": "slim-0"})
    monkeypatch.setenv("CLOVER_CUDA_ARCHS", "89;90")
    assert bootstrap.slim_cuda_build()["key"] == "cuda-89_90-slim"


def test_cpu_variants_cut_from_ggmls_list(bootstrap, tmp_path):
    cmake = tmp_path / "vendor" / "llama.cpp" / "ggml" / "src" / "CMakeLists.txt"
    cmake.parent.mkdir(parents=True)
    cmake.write_text(GGML_LIST)
    removed = bootstrap.limit_cpu_variants(tmp_path, bootstrap.SLIM_CPU_VARIANTS)
    assert removed == ["sse42", "sandybridge", "cooperlake", "alderlake"]
    text = cmake.read_text()
    kept = re.findall(r"^\s*ggml_add_cpu_backend_variant\((\w+)", text, re.M)
    assert kept == ["x64", "haswell", "skylakex", "icelake", "zen4", "sapphirerapids", "armv8"]  # ARM untouched
    assert "\n        # clover: ggml_add_cpu_backend_variant(alderlake          SSE42 AVX F16C" in text
    with pytest.raises(SystemExit):
        bootstrap.limit_cpu_variants(tmp_path, ("x64", "haswell", "no-such-cpu"))


# ggml/src/CMakeLists.txt's list in llama-cpp-python 0.3.36, shortened (each feature list as there:
# bootstrap.py's table of them is checked against the source it cuts)
GGML_LIST = """if (GGML_CPU_ALL_VARIANTS)
    if (GGML_SYSTEM_ARCH STREQUAL "x86")
        ggml_add_cpu_backend_variant(x64)
        ggml_add_cpu_backend_variant(sse42              SSE42)
        ggml_add_cpu_backend_variant(sandybridge        SSE42 AVX)
        ggml_add_cpu_backend_variant(haswell            SSE42 AVX F16C FMA AVX2 BMI2)
        ggml_add_cpu_backend_variant(skylakex           SSE42 AVX F16C FMA AVX2 BMI2 AVX512)
        ggml_add_cpu_backend_variant(icelake            SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(cooperlake     SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VNNI AVX512_BF16)
            ggml_add_cpu_backend_variant(zen4 SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16)
        endif()
        ggml_add_cpu_backend_variant(alderlake          SSE42 AVX F16C FMA AVX2 BMI2 AVX_VNNI)
        if (NOT MSVC)
            ggml_add_cpu_backend_variant(sapphirerapids SPR_FEATURES)
        endif()
    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
        ggml_add_cpu_backend_variant(armv8.0_1)
    endif()
endif()
""".replace("SPR_FEATURES", "SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8")


def test_a_changed_feature_list_in_the_source_stops_the_cut(bootstrap, tmp_path):
    cmake = tmp_path / "vendor" / "llama.cpp" / "ggml" / "src" / "CMakeLists.txt"
    cmake.parent.mkdir(parents=True)
    cmake.write_text(GGML_LIST.replace("zen4 SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI",
                                       "zen4 SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_FP16"))
    with pytest.raises(SystemExit):
        bootstrap.limit_cpu_variants(tmp_path, ("x64", "zen4"))


AMX_XEON = ("fpu sse4_2 avx f16c fma avx2 bmi2 avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi "
            "avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16 avx_vnni avx512_fp16")


@pytest.mark.parametrize(("flags", "expected"), [
    (AMX_XEON, ("sapphirerapids", "zen4", "x64")),  # the second is where the probe goes when AMX fails
    ("sse4_2 avx f16c fma avx2 bmi2 avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512_vnni "
     "avx512_bf16", ("zen4", "cooperlake", "x64")),  # an AMD EPYC like this machine
    ("sse4_2 avx f16c fma avx2 bmi2 avx_vnni", ("alderlake", "haswell", "x64")),
    ("sse4_2", ("sse42", "x64")),
])
def test_a_development_build_has_the_best_two_variants_of_this_cpu_and_x64(bootstrap, monkeypatch, flags, expected):
    monkeypatch.delenv("CLOVER_CPU_VARIANTS", raising=False)
    monkeypatch.setattr(bootstrap, "cpu_flags", lambda: set(flags.split()))
    monkeypatch.setattr(bootstrap.sys, "platform", "linux")
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    assert bootstrap.dev_cpu_variants() == expected
    build = bootstrap.cpu_build("test")
    assert build["key"] == "cpu-dl-" + "-".join(expected) and build["cpu_variants"] == ";".join(expected)
    monkeypatch.setenv("CLOVER_CPU_VARIANTS", "all")  # the portable build, for packaging
    assert bootstrap.cpu_build("test")["key"] == "cpu-dl" and "cpu_variants" not in bootstrap.cpu_build("test")
    monkeypatch.setenv("CLOVER_CPU_VARIANTS", "haswell,x64")
    assert bootstrap.dev_cpu_variants() == ("haswell", "x64")
    monkeypatch.setenv("CLOVER_CPU_VARIANTS", "haswell,pentium")
    with pytest.raises(SystemExit):
        bootstrap.dev_cpu_variants()


def _raw_wheel(tmp_path, libs: dict[str, list[str]], extra: dict[str, bytes], omit: tuple[str, ...] = ()) -> Path:
    """A wheel as llama-cpp-python's build writes one: tiny real shared libraries (name: the libraries
    it links) under llama_cpp/lib, less `omit`, plus `extra` files (the root lib/, bin/, include/ copies)."""
    import shutil
    import subprocess
    import zipfile

    cc = shutil.which("cc")
    if not cc or not shutil.which("strip") or not shutil.which("readelf"):
        pytest.skip("needs cc, strip and readelf")
    build = tmp_path / "so"
    build.mkdir()
    for i, (name, needs) in enumerate(libs.items()):
        src = build / f"{name}.c"
        src.write_text(f"int clover_f{i}(void) {{ return {i}; }}\n")
        subprocess.run([cc, "-shared", "-fPIC", "-g", f"-Wl,-soname,{name}", "-o", build / name, src,
                        f"-L{build}", "-Wl,--no-as-needed", *[f"-l:{n}" for n in needs]], check=True)
        assert bootstrap_needed(build / name) == needs
    raw = tmp_path / "raw" / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    raw.parent.mkdir()
    with zipfile.ZipFile(raw, "w") as z:
        z.writestr("llama_cpp/__init__.py", "__version__ = '0.3.36'\n")
        for name in libs:
            if name not in omit:
                z.write(build / name, f"llama_cpp/lib/{name}")
        for name, data in extra.items():
            z.writestr(name, data)
        z.writestr("llama_cpp_python-0.3.36.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        z.writestr("llama_cpp_python-0.3.36.dist-info/METADATA", "Name: llama_cpp_python\nVersion: 0.3.36\n")
        z.writestr("llama_cpp_python-0.3.36.dist-info/RECORD", "stale\n")
    return raw


def bootstrap_needed(path: Path) -> list[str]:
    import subprocess

    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    return [n for n in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out) if n.startswith("lib") and
            not n.startswith(("libc.", "libm.", "libgcc"))]


LIBS = {"libggml-base.so": [], "libggml.so": ["libggml-base.so"],
        "libllama.so": ["libggml.so", "libggml-base.so"], "libmtmd.so": ["libllama.so"],
        "libggml-cpu-x64.so": ["libggml-base.so"], "libggml-cpu-haswell.so": ["libggml-base.so"],
        "libggml-cuda.so": ["libggml-base.so"]}


def test_slim_wheel_keeps_each_library_once_stripped_with_a_true_record(bootstrap, tmp_path):
    import base64
    import hashlib
    import subprocess
    import zipfile

    raw = _raw_wheel(tmp_path, LIBS, {"bin/libggml-cpu-x64.so": b"copy", "lib/libllama.so.0": b"copy",
                                      "lib/libllama.so.0.5.0": b"copy", "include/llama.h": b"/* */"})
    dest, facts = bootstrap.slim_wheel(raw, tmp_path / "out", ("x64", "haswell"))
    assert facts["dropped"] == ["bin", "include", "lib"] and facts["stripped_bytes"] > 0
    with zipfile.ZipFile(dest) as z:
        names = z.namelist()
        assert sorted(n for n in names if n.startswith("llama_cpp/lib/")) == sorted(f"llama_cpp/lib/{n}" for n in LIBS)
        assert names[-1] == "llama_cpp_python-0.3.36.dist-info/RECORD"
        record = z.read(names[-1]).decode().splitlines()
        assert len(record) == len(names) and record[-1] == f"{names[-1]},,"
        for line in record[:-1]:
            name, digest, size = line.rsplit(",", 2)
            data = z.read(name)
            assert int(size) == len(data)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        z.extract("llama_cpp/lib/libllama.so", tmp_path / "x")
    sections = subprocess.run(["readelf", "-S", str(tmp_path / "x" / "llama_cpp" / "lib" / "libllama.so")],
                              capture_output=True, text=True).stdout
    # the debug sections go; the symbol table stays, so a crash on the GPU machine is named
    assert ".debug_info" not in sections and ".symtab" in sections


@pytest.mark.parametrize("case", ["versioned copy", "missing library", "other variants"])
def test_slim_wheel_refuses_what_would_not_load(bootstrap, tmp_path, case):
    libs, omit, variants = dict(LIBS), (), ("x64", "haswell")
    if case == "versioned copy":  # the slim include did not apply: libllama.so and libllama.so.0
        libs["libllama.so.0"] = ["libggml.so"]
    elif case == "missing library":  # libllama needs libggml.so, which is not in the wheel
        omit = ("libggml.so",)
    else:
        variants = ("x64", "zen4")
    raw = _raw_wheel(tmp_path, libs, {}, omit)
    with pytest.raises(SystemExit):
        bootstrap.slim_wheel(raw, tmp_path / "out", variants)


@pytest.mark.slow
@pytest.mark.timeout(900)  # the load check's own 10-min limit speaks first
def test_the_slim_wheel_loads_here_each_library_once(bootstrap):
    """The cached slim CUDA wheel, installed alone (gpu_check.py loadcheck, which prepare runs): on this
    CPU (no driver) libggml-cuda is shipped, a CPU variant loads, and each library is mapped from one file."""
    import subprocess
    import sys

    wheel = bootstrap.cached_wheel(bootstrap.slim_cuda_build())
    if not wheel:
        pytest.skip("the slim CUDA wheel is not built here (python3 packaging/bootstrap.py build-cuda-slim)")
    done = subprocess.run([sys.executable, str(ROOT / "packaging" / "gpu_check.py"), "loadcheck", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "libggml-cuda shipped: True" in done.stdout and "of 6 (" in done.stdout


def test_a_second_setup_with_other_extras_records_both(bootstrap, monkeypatch):
    """`setup` then `setup --test` in one clone: the stamp keeps both sets of extras (it once raised
    TypeError there, after pip had installed the test extras)."""
    installs: list[list[str]] = []
    monkeypatch.setattr(bootstrap, "run", lambda cmd, **kw: installs.append(cmd))
    monkeypatch.setattr(bootstrap, "write_marker", lambda marker: None)
    marker: dict = {}
    bootstrap.ensure_project("", marker)
    bootstrap.ensure_project("test", marker)
    assert marker["project"]["extras"] == "test"
    bootstrap.ensure_project("test", marker)
    bootstrap.ensure_project("", marker)
    # the app, the app with its test extras, and the tests' packages installed without their dependencies
    assert len(installs) == 3 and installs[2][-len(bootstrap.TEST_NO_DEPS):] == list(bootstrap.TEST_NO_DEPS)
    assert "--no-deps" in installs[2] and not any("--no-deps" in cmd for cmd in installs[:2])
