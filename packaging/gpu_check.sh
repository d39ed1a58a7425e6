#!/usr/bin/env bash
# The GPU check for a lent NVIDIA machine (an H200: compute capability 9.0, sm_90).
#
#   bash packaging/gpu_check.sh prepare   # here, with the package registry: fills .gpucheck/ (~15 MB)
#   bash packaging/gpu_check.sh run       # there, offline: CUDA build, GPU tests, speed benchmark
#
# That machine reaches no registry, so `prepare` collects what its image lacks: small wheels
# (gguf, platformdirs, diskcache) and llama-cpp-python's source without llama.cpp's model files,
# docs and examples (the full sdist is 76 MB). `run` builds llama-cpp-python with
# -DGGML_CUDA=on for CMAKE_CUDA_ARCHITECTURES=${CLOVER_CUDA_ARCHS:-90} into a virtual environment
# that sees the image's own packages (numpy, jinja2, pytest, cmake, ninja, scikit-build-core),
# runs `python -m app doctor`, the tests marked gpu, and tests/bench/gpu_speed.py.
# Results go to $OUT (the device tool's output folder) or artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=0.3.36
DIR=.gpucheck

prepare() {
    rm -rf "$DIR" && mkdir -p "$DIR/wheels" "$DIR/src"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$DIR/wheels" \
        gguf==0.19.0 platformdirs==4.14.9 diskcache==5.6.3
    python3 -m pip download -q --no-deps --no-binary :all: -d "$DIR/src" "llama-cpp-python==$LLAMA"
    (cd "$DIR/src" && tar xzf "llama_cpp_python-$LLAMA.tar.gz" && rm "llama_cpp_python-$LLAMA.tar.gz")
    p="$DIR/src/llama_cpp_python-$LLAMA"
    v="$p/vendor/llama.cpp"
    # As a subproject llama.cpp builds no tests, examples or tools but mtmd, and only the ggml
    # backends that are switched on (CPU, and CUDA here): the rest is not needed to build.
    rm -rf "$p/.git" "$p/docs" "$p/examples" "$v/models" "$v/docs" "$v/media" "$v/examples" "$v/tests" \
           "$v/gguf-py" "$v/benches" "$v/.github" "$v/conversion" "$v/scripts"
    find "$v/tools" -mindepth 1 -maxdepth 1 ! -name mtmd ! -name CMakeLists.txt -exec rm -rf {} +
    find "$v/ggml/src" -mindepth 1 -maxdepth 1 -type d -name 'ggml-*' ! -name ggml-cpu ! -name ggml-cuda \
         -exec rm -rf {} +
    grep -q .gpucheck .git/info/exclude 2>/dev/null || echo "/$DIR/" >> .git/info/exclude
    du -sh "$DIR"
}

run() {
    out="${OUT:-artifacts}"
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
    python3 -m venv --system-site-packages .venv-gpu
    py=.venv-gpu/bin/python
    $py -m pip install -q --no-index --no-deps "$DIR"/wheels/*.whl
    start=$(date +%s)
    CMAKE_ARGS="-DGGML_CUDA=on -DGGML_NATIVE=OFF -DCMAKE_CUDA_ARCHITECTURES=${CLOVER_CUDA_ARCHS:-90}" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        $py -m pip install -q --no-index --no-deps --no-build-isolation "$DIR/src/llama_cpp_python-$LLAMA" \
        2>&1 | tail -20
    echo "CUDA build took $(( $(date +%s) - start )) s" | tee "$out/build.txt"
    $py -m pip install -q --no-index --no-deps --no-build-isolation -e .
    $py -m app doctor | tee "$out/doctor.txt"
    # PySide6 is not on that machine: the Qt plugin is off and only the GPU tests are collected.
    $py -m pytest -p no:pytestqt -m gpu tests/test_gpu_cuda.py -v -s -rs 2>&1 | tee "$out/gpu_tests.txt"
    $py -m tests.bench.gpu_speed --json "$out/gpu_speed.json" 2>&1 | tee "$out/gpu_speed.txt"
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
