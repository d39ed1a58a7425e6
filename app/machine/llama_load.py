"""Loading a model into llama.cpp with the settings of a plan, and reading what llama.cpp reports. No Qt.

llama-cpp-python 0.3.36 exposes neither `llama_model_params.tensor_buft_overrides` (which
tensors go to which buffer type: how `--n-cpu-moe` keeps experts in system RAM) nor
`llama_context_params.n_outputs_max`. Its `Llama` builds both structs from
`llama_model_default_params()` / `llama_context_default_params()` inside its constructor, so
`load_llama` swaps those two functions, for the duration of one constructor call and under a
lock, for versions that fill in our fields. The override array is a NULL-terminated ctypes array
of {pattern, buffer type}; the CPU buffer type is `ggml_backend_cpu_buffer_type()`, the very
pointer llama.cpp compares against (llama-model-loader.cpp).

`capture_log` routes llama.cpp's log to Python for a while; `parse_buffers` reads the buffer
sizes llama.cpp prints (model, KV, RS, compute, output) and `parse_overrides` the tensors whose
buffer type was overridden: the proof that an override did what the plan meant.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.gguf.model_facts import GGML_TYPE_IDS
from app.machine.llama_backend import lib_file, llama, physical_cores

_HOOK_LOCK = threading.Lock()
_LOG_LOCK = threading.Lock()


@dataclass(frozen=True)
class LoadSettings:
    """Everything llama.cpp needs to load a model the way a plan says."""

    n_ctx: int = 4096
    n_gpu_layers: int = -1  # -1: all (only meaningful with a GPU build)
    cpu_moe_blocks: tuple[int, ...] = ()  # blocks whose routed experts stay in system RAM
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    n_batch: int = 512
    n_ubatch: int = 512
    n_outputs_max: int = 0  # 0: llama.cpp's default (n_batch); 1: logits of the last token only
    n_threads: int | None = None  # generation; None: the physical cores (default_threads)
    n_threads_batch: int | None = None  # prompt processing; None: as n_threads
    use_mmap: bool = True
    main_gpu: int = 0
    # context checkpoints kept where the cache cannot be cut back (hybrid and recurrent models: the plan
    # sizes them from its RAM budget); 0: every prompt of such a model is evaluated from its start
    ctx_checkpoints: int = 16
    # speculative decoding: "auto" (the model's MTP head where the file has one, else n-grams), "mtp",
    # "ngram", "off" (app.engine.mtp.drafter); with auto and mtp the head's weights are loaded (load_mtp);
    # a draft is at most draft_max tokens, and the context keeps logits and (hybrid models) rollback
    # snapshots of the recurrent state for that many
    speculative: str = "auto"
    draft_max: int = 8
    # replies written at once (parallel slots): n_seq_max sequences sharing one pool of n_ctx KV cells
    # (llama.cpp's unified cache: any of them may use it all) and, on hybrid models, each with its own
    # recurrent state; 1: one sequence. Every slot drafts (n-grams, or the MTP head where it is loaded)
    parallel: int = 1
    # False: the partitioned cache instead, each slot its own n_ctx (n_ctx x parallel cells in all): a
    # sequence's cells, and so the order and the kernels llama.cpp's attention reads them with, then
    # depend on it alone (the tests that compare a reply bit for bit with a cold one); the plan counts
    # the unified cache
    kv_unified: bool = True
    # replies that do not depend on other traffic (the setting engine.reproducible; app.model.plan_memory.
    # reproducible_layout sets the rest: the partitioned cache, no flash attention on the CPU, no drafts):
    # the slots read a prompt piece in a step of its own (app.engine.slot_step.StepRows._apart)
    reproducible: bool = False
    # the prompt cache (app/engine/prompt_cache.py): budgets of its RAM and disk tiers, in MiB (0: that tier
    # off); the plan sizes the RAM tier from what it leaves free, the disk tier is the settings' or serve's
    cache_ram_mb: int = 0
    cache_disk_mb: int = 0
    # metadata llama.cpp reads as if the file said it (a patch profile applied at load time)
    kv_overrides: tuple[tuple[str, bool | int | float | str], ...] = ()
    # the chat format: "" the file's own (where it has none, llama.cpp's built-in for its architecture),
    # else a llama.cpp built-in by name ("chatml", "gemma", "llama3"...: app.engine.builtin_template)
    chat_template: str = ""

    @property
    def drafts(self) -> bool:
        """Speculative decoding: every slot drafts (with the MTP head where it is loaded, `mtp`)."""
        return self.speculative != "off" and self.draft_max > 0

    @property
    def mtp(self) -> bool:
        """A file's MTP head is loaded and drafts, if it has one, whatever the slot count: for every slot
        (its draft context holds a sequence a slot, app.engine.mtp.HeadContext)."""
        return self.drafts and self.speculative in ("auto", "mtp")

    def override_patterns(self) -> list[str]:
        if not self.cpu_moe_blocks:
            return []
        blocks = "|".join(str(b) for b in sorted(set(self.cpu_moe_blocks)))
        return [rf"^blk\.({blocks})\.ffn_(up|down|gate|gate_up)_(ch|)exps"]


def cpu_buffer_type() -> int:
    """ggml_backend_cpu_buffer_type(): the pointer llama.cpp recognises as 'keep in system RAM'.
    It lives in ggml-base, whichever CPU backend module was loaded."""
    llama()
    lib = ctypes.CDLL(str(lib_file("ggml-base")))
    fn = lib.ggml_backend_cpu_buffer_type
    fn.restype = ctypes.c_void_p
    fn.argtypes = []
    return fn()


@dataclass(frozen=True)
class Threads:
    generation: int
    batch: int
    why: str


def default_threads() -> Threads:
    """llama.cpp's threads when nothing is set: one per physical core, for generation and prompts.

    llama-cpp-python's own default is half the logical CPUs (`cpu_count // 2`): one thread on a
    2-core machine, which measured 24 tok/s against 41 with two on SmolLM2. Generation is bound by
    memory bandwidth and the cores' arithmetic units; hyper-threads of the same core add little.
    """
    n = physical_cores()
    return Threads(n, n, f"{n} physical core{'s' if n != 1 else ''}")


class TensorBuftOverride(ctypes.Structure):
    """struct llama_model_tensor_buft_override { const char * pattern; ggml_backend_buffer_type_t buft; }"""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def override_array(patterns: list[str], buft: int) -> Any:
    """A NULL-terminated llama_model_tensor_buft_override[] (patterns kept alive by the array)."""
    array = (TensorBuftOverride * (len(patterns) + 1))()
    keep = [p.encode() for p in patterns]
    for i, pattern in enumerate(keep):
        array[i].pattern = pattern
        array[i].buft = buft
    array[len(patterns)].pattern = None
    array[len(patterns)].buft = None
    array._keep = keep  # type: ignore[attr-defined]
    return array


def kv_override_array(overrides: dict[str, bool | int | float | str]) -> Any:
    """A NULL-terminated llama_model_kv_override[] (as llama-cpp-python's Llama builds it)."""
    C = llama().llama_cpp
    array = (C.llama_model_kv_override * (len(overrides) + 1))()
    for i, (key, value) in enumerate(overrides.items()):
        array[i].key = key.encode("utf-8")
        if isinstance(value, bool):
            array[i].tag, array[i].value.val_bool = C.LLAMA_KV_OVERRIDE_TYPE_BOOL, value
        elif isinstance(value, int):
            array[i].tag, array[i].value.val_i64 = C.LLAMA_KV_OVERRIDE_TYPE_INT, value
        elif isinstance(value, float):
            array[i].tag, array[i].value.val_f64 = C.LLAMA_KV_OVERRIDE_TYPE_FLOAT, value
        else:
            raw = str(value).encode("utf-8")
            if len(raw) >= 128:
                raise ValueError(f"override {key}: strings are limited to 127 bytes")
            array[i].tag = C.LLAMA_KV_OVERRIDE_TYPE_STR
            ctypes.memmove(ctypes.addressof(array[i].value) + C.llama_model_kv_override_value.val_str.offset,
                           raw.ljust(128, b"\0"), 128)
    return array


@contextlib.contextmanager
def _default_params_hook(model_update: Callable, context_update: Callable) -> Iterator[None]:
    C = llama().llama_cpp

    original_model, original_context = C.llama_model_default_params, C.llama_context_default_params

    def model_params() -> Any:
        params = original_model()
        model_update(params)
        return params

    def context_params() -> Any:
        params = original_context()
        context_update(params)
        return params

    with _HOOK_LOCK:
        C.llama_model_default_params = model_params
        C.llama_context_default_params = context_params
        try:
            yield
        finally:
            C.llama_model_default_params = original_model
            C.llama_context_default_params = original_context


def load_llama(path: str | Path, settings: LoadSettings, *, verbose: bool = False,
               progress: Callable[[float], bool] | None = None, **llama_kwargs: Any) -> Any:
    """A `llama_cpp.Llama` loaded with `settings` (tensor overrides and n_outputs_max included).

    `progress(fraction)` is called while the weights load; returning False aborts the load
    (llama-cpp-python then raises ValueError).
    """
    lc = llama()
    C = lc.llama_cpp

    overrides = override_array(settings.override_patterns(), cpu_buffer_type()) if settings.cpu_moe_blocks else None
    callback = None
    if progress is not None:
        def on_progress(fraction: float, user_data: object) -> bool:
            try:
                return bool(progress(float(fraction)))
            except Exception:  # never let an exception cross into C: abort the load instead
                return False

        callback = C.llama_progress_callback(on_progress)
    model_update, context_update = _updaters(settings, overrides, callback)

    kwargs = dict(
        model_path=str(path), n_ctx=settings.n_ctx * (1 if settings.kv_unified else max(settings.parallel, 1)),
        n_gpu_layers=settings.n_gpu_layers,
        n_batch=settings.n_batch,
        n_ubatch=settings.n_ubatch, flash_attn=settings.flash_attn, type_k=GGML_TYPE_IDS[settings.type_k],
        type_v=GGML_TYPE_IDS[settings.type_v], use_mmap=settings.use_mmap,
        main_gpu=settings.main_gpu, verbose=verbose,
    )
    if settings.kv_overrides:
        kwargs["kv_overrides"] = dict(settings.kv_overrides)
    threads = default_threads()
    kwargs["n_threads"] = settings.n_threads or threads.generation
    kwargs["n_threads_batch"] = settings.n_threads_batch or settings.n_threads or threads.batch
    kwargs.update(llama_kwargs)
    with _default_params_hook(model_update, context_update):
        llm = lc.Llama(**kwargs)
    llm._clover_keepalive = (overrides, callback)  # llama.cpp holds these pointers: keep them alive
    return llm


def _updaters(settings: LoadSettings, overrides: Any,
              progress_callback: Any = None) -> tuple[Callable[[Any], None], Callable[[Any], None]]:
    def model_update(params: Any) -> None:
        if overrides is not None:
            params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
        if progress_callback is not None:
            params.progress_callback = progress_callback
        if settings.mtp:  # the multi-token-prediction head's block, where the file has one (else no-op)
            params.load_mtp = True

    def context_update(params: Any) -> None:
        if settings.parallel > 1:  # one pool of n_ctx cells for every slot (llama_n_ctx_seq = n_ctx)
            params.n_seq_max = settings.parallel
            params.kv_unified = settings.kv_unified
        if settings.n_outputs_max:  # every slot may want its row of logits in one step
            params.n_outputs_max = max(settings.n_outputs_max, settings.parallel)
        if settings.drafts:
            # a verify batch needs every position's logits (every slot's pending token and guesses in
            # one step, within the batch), and a hybrid model's recurrent state a snapshot per draft
            # token and sequence to roll a rejected tail back (n_rs_seq: ignored by other models)
            if settings.n_outputs_max:
                rows = max(settings.parallel, 1) * (settings.draft_max + 1)
                params.n_outputs_max = max(settings.n_outputs_max, min(rows, settings.n_batch))
            params.n_rs_seq = settings.draft_max

    return model_update, context_update


def simulate(path: str | Path, settings: LoadSettings) -> tuple[BufferReport, list[str]]:
    """llama.cpp's own sizing of a load, without allocating it (`no_alloc`, as llama-fit-params does).

    Reads only the header; returns the compute, output and recurrent-state buffer sizes that
    llama.cpp prints (model and KV buffers are reported as 0 in this mode) and the log.
    """
    C = llama().llama_cpp

    overrides = override_array(settings.override_patterns(), cpu_buffer_type()) if settings.cpu_moe_blocks else None
    model_update, context_update = _updaters(settings, overrides)
    mparams = C.llama_model_default_params()
    model_update(mparams)
    kv_array = kv_override_array(dict(settings.kv_overrides)) if settings.kv_overrides else None
    if kv_array is not None:
        mparams.kv_overrides = kv_array
    mparams.n_gpu_layers = 0x7FFFFFFF if settings.n_gpu_layers < 0 else settings.n_gpu_layers
    mparams.no_alloc = True
    mparams.load_mode = C.LLAMA_LOAD_MODE_NONE  # no_alloc cannot map the file
    cparams = C.llama_context_default_params()
    context_update(cparams)
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = settings.n_ctx, settings.n_batch, settings.n_ubatch
    cparams.flash_attn_type = (C.LLAMA_FLASH_ATTN_TYPE_ENABLED if settings.flash_attn
                               else C.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    cparams.type_k, cparams.type_v = GGML_TYPE_IDS[settings.type_k], GGML_TYPE_IDS[settings.type_v]
    with capture_log() as lines:
        model = C.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            raise RuntimeError(f"llama.cpp could not read {path}:\n" + "\n".join(lines[-20:]))
        try:
            ctx = C.llama_init_from_model(model, cparams)
            if not ctx:
                raise RuntimeError("llama.cpp could not size a context:\n" + "\n".join(lines[-20:]))
            C.llama_free(ctx)
        finally:
            C.llama_model_free(model)
    return parse_buffers(lines), lines


# ----------------------------------------------------------------------------- llama.cpp's log


@contextlib.contextmanager
def capture_log() -> Iterator[list[str]]:
    """Collect llama.cpp's log lines (every level, debug included) while the block runs."""
    llama_cpp = llama()
    default_callback = llama_cpp._logger.llama_log_callback  # llama-cpp-python's own, put back after

    lines: list[str] = []
    pending: list[str] = []

    @llama_cpp.llama_log_callback
    def callback(level: int, text: bytes, user_data: object) -> None:
        pending.append(text.decode("utf-8", "replace"))
        joined = "".join(pending)
        if "\n" in joined:
            *complete, rest = joined.split("\n")
            lines.extend(complete)
            pending[:] = [rest] if rest else []

    with _LOG_LOCK:
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
        try:
            yield lines
        finally:
            if pending:
                lines.append("".join(pending))
            llama_cpp.llama_log_set(default_callback, ctypes.c_void_p(0))


_BUFFER_RE = re.compile(r"^\w+: +(\S+) +(model|KV|RS|compute|output) buffer size = +([\d.]+) MiB")
_OVERRIDE_RE = re.compile(r"^tensor (\S+) \(.*\) buffer type overridden to (\S+)")


@dataclass
class BufferReport:
    """Buffer sizes llama.cpp printed, in bytes, by kind and buffer name (CPU, CUDA0, CPU_Mapped, ...)."""

    sizes: dict[str, dict[str, int]] = field(default_factory=dict)

    def total(self, kind: str, where: Callable[[str], bool] = lambda name: True) -> int:
        return sum(v for name, v in self.sizes.get(kind, {}).items() if where(name))


def parse_buffers(lines: list[str]) -> BufferReport:
    report = BufferReport()
    for line in lines:
        m = _BUFFER_RE.match(line.strip())
        if m:
            name, kind, mib = m.group(1), m.group(2), float(m.group(3))
            bucket = report.sizes.setdefault(kind, {})
            bucket[name] = bucket.get(name, 0) + int(round(mib * 1024 * 1024))
    return report


def parse_overrides(lines: list[str]) -> dict[str, str]:
    """tensor name -> buffer type, for every tensor llama.cpp says it overrode."""
    found = {}
    for line in lines:
        m = _OVERRIDE_RE.match(line.strip())
        if m:
            found[m.group(1)] = m.group(2)
    return found
