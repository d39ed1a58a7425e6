#!/usr/bin/env bash
# The GPU check for a lent NVIDIA machine (an H200: compute capability 9.0, sm_90).
#
#   bash packaging/gpu_check.sh prepare   # here, with the package registry: fills .gpucheck/ (~15 MB)
#   bash packaging/gpu_check.sh run       # there, offline: CUDA build, GPU tests, speed benchmark
#
# That machine reaches no registry, so `prepare` collects what its image lacks: small wheels
# (gguf, platformdirs, diskcache) and either the CUDA wheel built here (`bootstrap.py build-cuda`,
# when it fits the device tool's 64 MiB carry limit: then the GPU's minutes go to measuring, not
# compiling) or llama-cpp-python's source without llama.cpp's model files, docs and examples (the
# full sdist is 76 MB), which `run` then builds with -DGGML_CUDA=on for
# CMAKE_CUDA_ARCHITECTURES=${CLOVER_CUDA_ARCHS:-90}. `run` installs into a virtual environment that
# sees the image's own packages (numpy, jinja2, pytest, cmake, ninja, scikit-build-core), runs
# `python -m app doctor`, the tests marked gpu, tests/bench/gpu_speed.py, and `python -m app tune`
# on the Clover-shaped model for a 24 GB and a 16 GB budget (the two answers the app gives).
# Results go to $OUT (the device tool's output folder) or artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=0.3.36
DIR=.gpucheck
CARRY_LIMIT=$((60 * 1024 * 1024))  # the device tool carries 64 MiB in all

prepare() {
    rm -rf "$DIR" && mkdir -p "$DIR/wheels" "$DIR/src"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$DIR/wheels" \
        gguf==0.19.0 platformdirs==4.14.9 diskcache==5.6.3
    wheel=$(.venv/bin/python - <<'PY' 2>/dev/null || true
import importlib.util
spec = importlib.util.spec_from_file_location("b", "packaging/bootstrap.py")
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
w = b.cached_wheel(b.cuda_build("gpu_check"))
print(w or "")
PY
)
    if [ -n "$wheel" ]; then
        size=$(stat -c %s "$wheel")
        echo "CUDA wheel built here: $wheel ($(( size / 1024 / 1024 )) MiB)"
        if [ "$size" -le "$CARRY_LIMIT" ]; then
            mkdir -p "$DIR/cuda-wheel" && cp "$wheel" "$DIR/cuda-wheel/"
            du -sh "$DIR"
            grep -q .gpucheck .git/info/exclude 2>/dev/null || echo "/$DIR/" >> .git/info/exclude
            return
        fi
        echo "too large to carry (limit $(( CARRY_LIMIT / 1024 / 1024 )) MiB): the GPU machine builds for sm_90 instead"
    else
        echo "no CUDA wheel built here (python3 packaging/bootstrap.py build-cuda): the GPU machine builds it"
    fi
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
    if ls "$DIR"/cuda-wheel/*.whl >/dev/null 2>&1; then
        whl=$(ls "$DIR"/cuda-wheel/*.whl | head -1)
        echo "prebuilt CUDA wheel: $(basename "$whl"), $(( $(stat -c %s "$whl") / 1024 / 1024 )) MiB" | tee "$out/build.txt"
        $py -m pip install -q --no-index --no-deps "$whl"
        # cuBLAS: the app's GPU runtime download needs a registry; here the image's toolkit has it
        for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib; do
            [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        done
    else
        start=$(date +%s)
        CMAKE_ARGS="-DGGML_CUDA=on -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DCMAKE_CUDA_ARCHITECTURES=${CLOVER_CUDA_ARCHS:-90} -DCMAKE_PROJECT_llama_cpp_INCLUDE=$PWD/packaging/llama_cpp_extras.cmake" \
        CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
            $py -m pip install -q --no-index --no-deps --no-build-isolation "$DIR/src/llama_cpp_python-$LLAMA" \
            2>&1 | tail -20
        echo "CUDA build there took $(( $(date +%s) - start )) s" | tee "$out/build.txt"
    fi
    $py -m pip install -q --no-index --no-deps --no-build-isolation -e .
    $py -m app doctor | tee "$out/doctor.txt"
    # PySide6 is not on that machine: the Qt plugin is off and only the GPU tests are collected.
    $py -m pytest -p no:pytestqt -m gpu tests/test_gpu_cuda.py -v -s -rs 2>&1 | tee "$out/gpu_tests.txt"
    $py -m tests.bench.gpu_speed --json "$out/gpu_speed.json" 2>&1 | tee "$out/gpu_speed.txt"
    # Tune on the Clover shape: the fastest settings within a 24 GB and a 16 GB budget
    shape=$($py -c "from pathlib import Path; from tests.helpers.clover_shape import write_clover_shaped; print(write_clover_shaped(Path('/tmp/clover-shape.gguf')))")
    for gb in 24 16; do
        $py -m app tune "$shape" --vram-gb "$gb" --budget-s 150 2>&1 | tee "$out/tune_${gb}gb.txt" || true
    done
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
