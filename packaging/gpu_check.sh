#!/usr/bin/env bash
# The GPU check for a lent NVIDIA machine (an H200: compute capability 9.0, sm_90), in one call.
#
#   bash packaging/gpu_check.sh prepare         # here, with the package registry: fills .gpucheck/
#   bash packaging/gpu_check.sh run             # there, offline: install, then every GPU figure
#   bash packaging/gpu_check.sh run --dry-run   # here, on the CPU wheel: the same steps, tiny budgets
#   bash packaging/gpu_check.sh size            # what prepare collected: its size, or the refusal
#
# With the device tool: carry [".gpucheck"], command `bash packaging/gpu_check.sh run`, timeout_s 600.
#
# That machine reaches no registry and the device tool carries 64 MiB, so `prepare` collects:
# - the slim CUDA wheel (`bootstrap.py build-cuda-slim`: sm_90 machine code (90-real: no PTX), six CPU
#   variants, each library once,
#   stripped; cached like the other wheels). When it is not built yet, `prepare` starts that build in
#   the background at the lowest priority and says where its log is; run `prepare` again once it is done.
#   Until then it stages llama-cpp-python's source instead, which `run` builds there (minutes of the
#   GPU's time, said in the summary);
# - the small wheels the image lacks (packaging/gpu_check.py CARRIED, for CPython 3.12).
# It prints the size and refuses, with the reason, when the lot is over 60 MiB.
#
# `run` installs them into a folder on PYTHONPATH (the image's python3 holds numpy, jinja2, pytest,
# PyTorch's CUDA libraries ...; a venv would not see them), puts the toolkit's cuBLAS on
# LD_LIBRARY_PATH, and runs each step below under its own time limit inside one deadline
# (GPU_CHECK_TOTAL_S, 570 s from the start: the device tool's command limit is 600 s). Each step's
# output goes to the screen and to its log; a step that fails or runs out of time does not stop the
# others. At the end one table: $OUT/summary.txt (and .json), the logs in $OUT/logs.tar.gz ($OUT is
# the device tool's output folder; artifacts/gpu-check here).
#
# Planned wall time on the H200, after the machine has started (target: at most 8 minutes after
# install). "cap" is the step's hard limit. The bases: the H200's figures in the device tool's
# KINDS.md/H200.md, the RTX 4090 report in docs/gpu-check.md (208 tok/s all on the GPU, 102 with the experts
# of 10 blocks in RAM, first token 0.13-0.31 s), and this 2-core machine's timings of the same steps.
#
# | step            | planned | cap | basis                                                                     |
# | --------------- | ------: | --: | ------------------------------------------------------------------------- |
# | gpu-info        |      1 s |  15 | nvidia-smi                                                                |
# | install         |     15 s |  90 | pip --no-index of the slim wheel and 9 small ones: 7 s here; without a carried wheel the build there (238-301 s measured on 16 cores; cap 360 s), and the deadline then cuts the last steps |
# | doctor          |      4 s |  30 | 1 s here, plus CUDA and NVML start (~2 s)                                 |
# | isolation       |      5 s |  40 | who holds libstdc++ in the global scope, then the probe model loaded on the GPU (the first H200's crash site) |
# | gpu-speed       |     60 s | 120 | the Clover shape planned for 24 GB and for 16 GB: two 19.7 GB loads (~10 s each), a 2,048-token prompt, 256 tokens at ~200 and ~100 tok/s, the engine's tok/s beside llama.cpp's own timing |
# | batch-costs     |     40 s |  90 | the Clover shape with its MTP block and random routers (19.7 GB sparse, ~110 MB written): one load, prompts to 512, 8,192 and 32,768 tokens (~41K at ~7,000 tok/s), 5 batch sizes x 3 rounds a depth, 4 slots, the head's step |
# | ui-stream       |     15 s |  45 | the window streaming at the measured tok/s: skipped where PySide6 is not (the GPU image) |
# | shapes          |      1 s |  20 | two sparse 19.7 GB files: header only, <1 s here                          |
# | followups       |     30 s |  75 | the tiny qwen35moe, 20 turns to 16K tokens on two engines                 |
# | speculative     |     35 s |  60 | Clover shape with its MTP block, n-grams on and off, 1 round of 2 requests x 128 tokens; exactness only (zero weights) |
# | tune-24gb       |     70 s |  85 | --budget-s 60, plus the plan and the last load                           |
# | tune-16gb       |     70 s |  85 | the same for a 16 GB budget (experts of some blocks in RAM)              |
# | gpu-tests       |     30 s |  75 | 3 tests; the Clover-shape load moves 19.7 GB of zero pages to the GPU    |
# | mtp             |     30 s |  60 | tests.bench.mtp on the same file: 1 round, 2 prompts x 64 tokens, head on and off; exactness only |
# | parallel-serve  |     45 s |  60 | 4 slots on the tiny hybrid                                                |
# | summary         |      1 s |   - | the table and logs.tar.gz                                                 |
# | total           |  ~440 s | 570 | with a carried wheel; built there, the steps after tune-16gb are what the deadline cuts |
#
# A step that dies by a signal (CRASHED(SIGSEGV) in the table) runs again under cuda-gdb, which writes
# its named backtrace into logs/STEP.backtrace.log (the carried wheel keeps its symbol tables).
set -uo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
LLAMA=0.3.36
DIR=${GPUCHECK_DIR:-.gpucheck}
CARRY_LIMIT_MIB=60  # the device tool carries 64 MiB in all, the repository (~1.5 MiB) included
TOTAL_S=${GPU_CHECK_TOTAL_S:-570}
PYTAGS=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64)

# ----------------------------------------------------------------------------- prepare (here)

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

slim_wheel() {  # the cached slim CUDA wheel's path, or nothing
    .venv/bin/python - <<'PY' 2>/dev/null || true
import importlib.util
spec = importlib.util.spec_from_file_location("b", "packaging/bootstrap.py")
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
print(b.cached_wheel(b.slim_cuda_build()) or "")
PY
}

prepare() {
    [ -x .venv/bin/python ] || { echo "prepare needs the project's .venv: python3 packaging/bootstrap.py setup"; exit 2; }
    rm -rf "$DIR" && mkdir -p "$DIR/wheels"
    mapfile -t pins < <(.venv/bin/python packaging/gpu_check.py pins)
    python3 -m pip download -q --no-deps --only-binary=:all: "${PYTAGS[@]}" -d "$DIR/wheels" "${pins[@]}" || exit 1
    wheel=$(slim_wheel)
    if [ -n "$wheel" ]; then
        echo "slim CUDA wheel: $(basename "$wheel"), $(mib "$(stat -c %s "$wheel")") MiB"
        # before GPU time is spent on it: it installs alone and loads here (CPU variant, one file a library)
        .venv/bin/python packaging/gpu_check.py loadcheck "$wheel" || { echo "refused: the wheel does not load"; exit 1; }
        mkdir -p "$DIR/cuda-wheel" && cp "$wheel" "$DIR/cuda-wheel/"
    else
        log=${GPU_CHECK_BUILD_LOG:-$HOME/.cache/clover-launcher/build-cuda-slim.log}
        if pgrep -f "bootstrap.py build-cuda-slim" >/dev/null; then
            echo "the slim CUDA wheel is being built (pid $(pgrep -f "bootstrap.py build-cuda-slim" | head -1)); run"
            echo "prepare again when it is done"
        else
            mkdir -p "$(dirname "$log")"
            nohup nice -n 19 ionice -c3 python3 packaging/bootstrap.py build-cuda-slim >"$log" 2>&1 &
            echo "started building the slim CUDA wheel in the background (pid $!, log: $log; one to three"
            echo "hours on 2 shared cores); run prepare again when it is done"
        fi
        stage_source
    fi
    check_size
}

check_size() {  # the size of what is carried, its largest files, and a refusal over the limit
    local total
    total=$(find "$DIR" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
    echo "to carry: $DIR, $(mib "$total") MiB (limit $CARRY_LIMIT_MIB MiB); the largest files:"
    (cd "$DIR" && find . -type f -printf '%s %P\n' | sort -rn | head -8 | awk '{printf "  %7.2f MiB  %s\n", $1 / 1048576, $2}')
    if [ "$total" -gt $(( CARRY_LIMIT_MIB * 1048576 )) ]; then
        echo "refused: $DIR is $(mib "$total") MiB, over the $CARRY_LIMIT_MIB MiB limit (the device tool carries 64 MiB"
        echo "with the repository); the largest files above are the reason"
        exit 1
    fi
}

stage_source() {  # llama-cpp-python's source without models, docs, tests and unused backends
    mkdir -p "$DIR/src"
    python3 -m pip download -q --no-deps --no-binary :all: -d "$DIR/src" "llama-cpp-python==$LLAMA" || exit 1
    (cd "$DIR/src" && tar xzf "llama_cpp_python-$LLAMA.tar.gz" && rm "llama_cpp_python-$LLAMA.tar.gz")
    p="$DIR/src/llama_cpp_python-$LLAMA"
    v="$p/vendor/llama.cpp"
    rm -rf "$p/.git" "$p/docs" "$p/examples" "$v/models" "$v/docs" "$v/media" "$v/examples" "$v/tests" \
           "$v/gguf-py" "$v/benches" "$v/.github" "$v/conversion" "$v/scripts"
    find "$v/tools" -mindepth 1 -maxdepth 1 ! -name mtmd ! -name CMakeLists.txt -exec rm -rf {} +
    find "$v/ggml/src" -mindepth 1 -maxdepth 1 -type d -name 'ggml-*' ! -name ggml-cpu ! -name ggml-cuda \
         -exec rm -rf {} +
    .venv/bin/python -c "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('b', 'packaging/bootstrap.py')
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
from pathlib import Path
print('CPU variants left out:', b.limit_cpu_variants(Path(sys.argv[1]), b.SLIM_CPU_VARIANTS))" "$p"
    echo "staged llama-cpp-python's source: the GPU machine builds it (no slim wheel yet)"
}

# ----------------------------------------------------------------------------- run (there, or --dry-run here)

record() {  # NAME STATUS SECONDS PLANNED CAP NOTE
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$WORK/steps.tsv"
}

# step NAME PLANNED CAP NOTE -- COMMAND...: COMMAND under min(CAP, time left), logged, recorded
step() {
    local name=$1 planned=$2 cap=$3 note=$4
    shift 5
    local left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt 10 ]; then
        echo "==> $name: skipped, ${left}s left of the ${TOTAL_S}s deadline"
        record "$name" skipped 0 "$planned" "$cap" "out of time"
        return
    fi
    local limit=$(( cap < left ? cap : left ))
    echo "==> $name (limit ${limit}s): $*"
    local t0 rc
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$WORK/logs/$name.log"
    rc=${PIPESTATUS[0]}
    local took=$(( $(date +%s) - t0 )) status=ok
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=timeout
    elif [ "$rc" -eq 3 ]; then status=missed  # a bench ran and missed a target (tests/bench/verdict.py)
    elif [ "$rc" -ne 0 ]; then status="FAILED($rc)"; fi
    case "$rc" in 132|134|135|136|139) status="CRASHED($(kill -l $(( rc - 128 )) 2>/dev/null || echo $rc))"
        backtrace "$name" "$@" ;; esac
    record "$name" "$status" "$took" "$planned" "$cap" "$note"
}

# backtrace NAME COMMAND...: a step that died by a signal runs again under cuda-gdb (gdb where there is
# no cuda-gdb), which prints the named stack of the crashing thread and the loaded libraries into
# logs/NAME.backtrace.log (the carried wheel keeps its symbol tables: bootstrap.py slim_wheel)
backtrace() {
    local name=$1 dbg left
    shift
    dbg=$(command -v cuda-gdb || command -v gdb || true)
    left=$(( DEADLINE - $(date +%s) - 15 ))
    if [ -z "$dbg" ] || [ "$left" -lt 30 ]; then
        echo "==> $name crashed; no backtrace (${dbg:-no debugger}, ${left}s left)" | tee "$WORK/logs/$name.backtrace.log"
        return
    fi
    echo "==> $name crashed: again under $(basename "$dbg") for its backtrace (limit $(( left < 150 ? left : 150 ))s)"
    timeout -k 5 $(( left < 150 ? left : 150 )) "$dbg" -batch -q -ex "set pagination off" \
        -ex "handle SIGPIPE SIGUSR1 SIGUSR2 nostop noprint pass" -ex run -ex "bt 40" -ex "info sharedlibrary" \
        -ex "thread apply all bt 8" --args "$@" >"$WORK/logs/$name.backtrace.log" 2>&1
    grep -E "^#[0-9]+ " "$WORK/logs/$name.backtrace.log" | head -12
}

# bench NAME PLANNED CAP NOTE "GPU ARGS" "DRY ARGS": `$PY -m ...` with GPU ARGS there; in the dry run
# GPU ARGS go through the module's own parser only (gpu_check.py argcheck), then DRY ARGS run ("-": none)
bench() {
    local name=$1 planned=$2 cap=$3 note=$4 gpu=$5 dry=$6
    if [ "$DRY" = 0 ]; then
        # shellcheck disable=SC2086
        step "$name" "$planned" "$cap" "$note" -- $PY -m $gpu
        return
    fi
    # shellcheck disable=SC2086
    if [ "$dry" = "-" ]; then
        step "$name" "$planned" "$cap" "${note:+$note; }dry run: arguments checked only" -- \
            $PY packaging/gpu_check.py argcheck $gpu
    else
        step "$name" "$planned" "$cap" "${note:+$note; }dry run: arguments checked, then ran $dry" -- \
            bash -c "$PY packaging/gpu_check.py argcheck $gpu && $PY -m $dry"
    fi
}

has_option() {  # MODULE OPTION: the module's --help names OPTION
    timeout 60 $PY -m "$1" --help 2>/dev/null | grep -q -- "$2"
}

find_cublas() {  # the folder of the image's libcublas.so.13: the toolkit, else a pip package of it
    local d
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64; do
        [ -e "$d/libcublas.so.13" ] && { echo "$d"; return; }
    done
    d=$(python3 -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null)
    # shellcheck disable=SC2086
    find $d /usr/lib /usr/local/lib -name 'libcublas.so.13' -printf '%h\n' 2>/dev/null | head -1
}

install() {  # the carried wheels onto PYTHONPATH (there), or pip's dry run of the same files (here)
    local wheels=("$DIR"/wheels/*.whl) cuda=("$DIR"/cuda-wheel/*.whl)
    [ -e "${wheels[0]}" ] || wheels=()
    [ -e "${cuda[0]}" ] || cuda=()
    if [ "$DRY" = 1 ]; then
        if [ ${#wheels[@]} -eq 0 ] && [ ${#cuda[@]} -eq 0 ]; then
            echo "nothing carried in $DIR (prepare not run): the dry run uses .venv's packages"
            return 0
        fi
        GPU_CHECK_IMPORTS="" $PY -m pip install --dry-run -q --no-index --no-deps --only-binary=:all: --target "$WORK/site" \
            "${PYTAGS[@]}" "${wheels[@]}" "${cuda[@]}" || return 1
        echo "pip accepts ${#wheels[@]} small wheels and $(basename "${cuda[0]:-no CUDA wheel}") for CPython 3.12"
        return 0
    fi
    $PY -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$WORK/site" "${wheels[@]}" || return 1
    if [ ${#cuda[@]} -gt 0 ]; then
        echo "carried CUDA wheel: $(basename "${cuda[0]}"), $(( $(stat -c %s "${cuda[0]}") / 1048576 )) MiB"
        $PY -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$WORK/site" "${cuda[0]}" \
            || return 1
    elif [ -d "$DIR/src/llama_cpp_python-$LLAMA" ]; then
        echo "no carried CUDA wheel: building llama.cpp here for ${CLOVER_CUDA_ARCHS:-90-real} (slim recipe)"
        local t0
        t0=$(date +%s)
        [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
        CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CLOVER_CUDA_ARCHS:-90-real} -DCMAKE_PROJECT_llama_cpp_INCLUDE=$PWD/packaging/llama_cpp_slim.cmake" \
        CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
            $PY -m pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation \
            --config-settings=install.strip=false --target "$WORK/site" \
            "$DIR/src/llama_cpp_python-$LLAMA" 2>&1 | tail -20
        local rc=${PIPESTATUS[0]}
        echo "the CUDA build there took $(( $(date +%s) - t0 )) s" | tee "$WORK/built.txt"
        [ "$rc" -eq 0 ] || return 1
    else
        echo "nothing to install llama.cpp from: run \`bash packaging/gpu_check.sh prepare\` and carry $DIR"
        return 1
    fi
}

run_check() {
    DRY=0
    [ "${1:-}" = "--dry-run" ] && DRY=1
    START=$(date +%s)
    DEADLINE=$(( START + TOTAL_S ))
    WORK=${GPU_CHECK_WORK:-/tmp/clover-gpu-check}
    OUTDIR=${OUT:-artifacts/gpu-check}
    rm -rf "$WORK" && mkdir -p "$WORK/logs" "$WORK/shapes" "$OUTDIR"
    export CLOVER_HOME="$WORK/home" PYTHONUNBUFFERED=1
    if [ "$DRY" = 1 ]; then
        PY=${GPU_CHECK_PYTHON:-.venv/bin/python}
        # 2 threads on 2 shared cores: spinning OpenMP workers made one tune run 300x slower under load
        export OMP_WAIT_POLICY=PASSIVE
        # every import of every step is written down, for the audit at the end
        mkdir -p "$WORK/audit"
        cat >"$WORK/audit/sitecustomize.py" <<'PY'
import atexit, os, sys
def _imports():
    if not os.environ.get("GPU_CHECK_IMPORTS"):
        return
    with open(os.environ["GPU_CHECK_IMPORTS"], "a") as f:
        f.write(" ".join(sorted({m.split(".")[0] for m in list(sys.modules)})) + "\n")
atexit.register(_imports)
PY
        export GPU_CHECK_IMPORTS="$WORK/imports.txt" PYTHONPATH="$WORK/audit${PYTHONPATH:+:$PYTHONPATH}"
    else
        PY=${GPU_CHECK_PYTHON:-python3}
        export PYTHONPATH="$WORK/site:$PWD"
    fi
    {
        echo "GPU check $([ "$DRY" = 1 ] && echo "DRY RUN (no GPU; tiny budgets)" || echo "on $(hostname)"), $(date -u +%FT%TZ)"
        echo "python: $($PY -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
    } >"$WORK/header.txt"
    trap finish EXIT

    local shapes="$WORK/shapes"
    if [ "$DRY" = 0 ]; then
        step gpu-info 1 15 "" -- nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv
    else
        record gpu-info skipped 0 1 15 "dry run: no GPU"
    fi
    export DRY PY WORK DIR
    if [ "$DRY" = 0 ] && ! ls "$DIR"/cuda-wheel/*.whl >/dev/null 2>&1; then
        step install 15 360 "no carried wheel: built there" -- bash "$SELF" _install
    else
        step install 15 90 "" -- bash "$SELF" _install
    fi
    local cublas rt
    cublas=$(find_cublas)
    if [ -n "$cublas" ]; then
        # the loader finds it on LD_LIBRARY_PATH; linked into the app's GPU-runtime folder too, the app
        # preloads it as it would the runtime it downloads (and doctor says CUDA is ready, not missing)
        export LD_LIBRARY_PATH="$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        rt=$($PY -c "from app.machine.gpu_runtime import runtime_dir; print(runtime_dir())" 2>/dev/null)
        [ -n "$rt" ] && mkdir -p "$rt" && ln -sf "$cublas"/libcublas*.so* "$rt"/
        echo "cuBLAS: $cublas${rt:+ (linked into $rt)}" >>"$WORK/header.txt"
    else
        echo "cuBLAS: not found (the CUDA backend will not load)" >>"$WORK/header.txt"
    fi
    [ -f "$WORK/built.txt" ] && cat "$WORK/built.txt" >>"$WORK/header.txt"
    step doctor 4 30 "" -- $PY -m app doctor
    # the load crash of the first lent H200 (SIGSEGV in print_info): who holds libstdc++ in the global
    # scope, what our libraries import of it, and a small model loaded through print_info
    step isolation 5 40 "libstdc++ census, then a load" -- $PY packaging/gpu_check.py isolation "$WORK"
    # the most valuable figure first: the Clover shape planned for a 24 GB and a 16 GB card, generating
    bench gpu-speed 60 120 "" \
        "tests.bench.gpu_speed --vram-gb 24,16 --dir $WORK --json $WORK/gpu_speed.json" "-"
    # what decides drafting's speed on this GPU: verify batches of 1-8 tokens at three depths, four slots
    # against one at a time, the MTP head's step; with the acceptance measured on SmolLM2 (resources/
    # drafting/), the expected n-gram speed-up and MTP tok/s (expected, not measured). The dry run: the
    # tiny qwen35moe, two shallow depths
    bench batch-costs 40 90 "verify batches, 4 slots, MTP head step; expected drafting figures" \
        "tests.bench.batch_costs --dir $WORK --json $WORK/batch_costs.json --store" \
        "tests.bench.batch_costs --model qwen35moe --depths 16,256 --rounds 5 --json $WORK/batch_costs.json --store"
    ui_stream
    step shapes 1 20 "" -- $PY packaging/gpu_check.py shapes "$shapes" $([ "$DRY" = 1 ] && echo --dry-run)
    local fu=""
    has_option tests.bench.followups --on-device && fu="--on-device"
    bench followups 30 75 "qwen35moe${fu:+, checkpoints on the device}" \
        "tests.bench.followups $fu" \
        "tests.bench.followups $fu --tokens 600 --turns 3 --answer 8"
    local mtp=""
    has_option tests.bench.speculative mtp && mtp="the bench offers MTP: see its log"
    bench speculative 35 60 "${mtp:-n-grams on/off}" \
        "tests.bench.speculative --model $shapes/clover-mtp.gguf --rounds 1 --tokens 128 --no-stock" \
        "tests.bench.speculative --model $shapes/clover-mtp.gguf --rounds 1 --tokens 8 --no-stock"
    for gb in 24 16; do
        bench "tune-${gb}gb" 70 85 "" \
            "app tune $shapes/clover.gguf --vram-gb $gb --budget-s 60" \
            "app tune $shapes/clover.gguf --vram-gb $gb --budget-s 1 --tune-ctx 256"
    done
    # PySide6 is not on that machine: the Qt plugin is off and only the GPU tests are collected
    step gpu-tests 30 75 "" -- $PY -m pytest -p no:pytestqt -p no:cacheprovider -m gpu tests/machine/test_gpu_cuda.py -v -rs
    if [ -f tests/bench/mtp.py ]; then
        # MTP drafting's own bench: the Clover shape's head, exactness, and the policy's cost when
        # nothing is accepted (zero weights: the head's guesses are never the model's)
        local margs="--model $shapes/clover-mtp.gguf"
        has_option tests.bench.mtp --rounds && margs="$margs --rounds 1"
        has_option tests.bench.mtp --prompts && margs="$margs --prompts 2"
        has_option tests.bench.mtp --tokens && margs="$margs --tokens 64"
        has_option tests.bench.mtp --long-tokens && margs="$margs --long-tokens 128"
        bench mtp 30 60 "MTP head drafting, exactness (zero weights)" \
            "tests.bench.mtp $margs" "-"
    else
        record mtp skipped 0 30 60 "tests/bench/mtp.py is not there yet"
    fi
    if [ -f tests/bench/parallel_serve.py ]; then
        # the tiny hybrid (--hybrid): its default model, SmolLM2, comes from the registry, and without
        # --hybrid it would build llama-batched-bench, which needs the registry too
        local pargs=""
        has_option tests.bench.parallel_serve --hybrid && pargs="--hybrid"
        if has_option tests.bench.parallel_serve --parallel; then pargs="$pargs --parallel 4"
        elif has_option tests.bench.parallel_serve --slots; then pargs="$pargs --slots 4"; fi
        # dry run: arguments only (being written now; a real round takes ~40 s on 2 cores)
        bench parallel-serve 45 60 "4 slots${pargs:+ ($pargs)}" "tests.bench.parallel_serve $pargs" "-"
    else
        record parallel-serve skipped 0 45 60 "tests/bench/parallel_serve.py is not there yet"
    fi
    if [ "$DRY" = 1 ]; then
        step audit 1 30 "the packages the steps imported, against the GPU machine's image" -- \
            $PY packaging/gpu_check.py audit "$WORK/imports.txt" "$DIR/wheels"
    fi
}

ui_stream() {  # the window's transcript streaming at the tok/s batch-costs measured (where Qt is: not on the GPU image)
    local rate
    rate=$($PY -c "import json, sys; print(round(json.load(open(sys.argv[1]))['plain_tps']))" \
        "$WORK/batch_costs.json" 2>/dev/null)
    if [ -z "$rate" ]; then
        record ui-stream skipped 0 15 45 "no tok/s measured (batch-costs failed)"
    elif ! $PY -c "import PySide6" >/dev/null 2>&1; then
        record ui-stream skipped 0 15 45 "PySide6 is not on this machine (too large to carry): here, python -m tests.bench.ui_stream --rate $rate"
    else
        # Qt is no package of the GPU image: its imports stay out of the audit
        GPU_CHECK_IMPORTS="" step ui-stream 15 45 "at the $rate tok/s measured" -- \
            $PY -m tests.bench.ui_stream --rate "$rate" --replies "$([ "$DRY" = 1 ] && echo 2 || echo 5)" --tokens 300
    fi
}

finish() {
    local rc=$?
    trap - EXIT
    python3 packaging/gpu_check.py summary "$WORK" "$OUTDIR"
    local summary_rc=$?
    tar czf "$OUTDIR/logs.tar.gz" -C "$WORK" logs steps.tsv header.txt $(cd "$WORK" && ls gpu_speed.json batch_costs.json 2>/dev/null) 2>/dev/null
    echo "summary: $OUTDIR/summary.txt; logs: $OUTDIR/logs.tar.gz; $(( $(date +%s) - START )) s in all"
    [ "$rc" -ne 0 ] && exit "$rc"
    exit "$summary_rc"
}

case "${1:-}" in
    prepare) prepare ;;
    size) check_size ;;  # prepare's last word, alone
    run) shift; run_check "$@" ;;
    _install) install ;;  # run's install step, in its own process (under `timeout`)
    *) echo "usage: $0 prepare | run [--dry-run]" >&2; exit 2 ;;
esac
