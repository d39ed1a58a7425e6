"""The CPU probe's child process (app/machine/cpu_probe.py starts it): one CPU module of ggml as the
only backend, the probe model loaded, 8 tokens and then 1 decoded. Exit 0 and "decoded" when the
variant runs here; a signal or an error rules it out. No Qt.

    python -m app.machine.cpu_probe_child MODULE MODEL
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

from app.machine.llama_backend import llama_with_only


def main(module: str, model: str) -> int:
    """The probe itself: `module` the only backend, the probe model loaded, 8 tokens then 1 decoded."""
    try:
        lc = llama_with_only(Path(module))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    quiet = lc.llama_log_callback(lambda level, text, data: None)  # kept alive while llama.cpp may call it
    lc.llama_log_set(quiet, ctypes.c_void_p(0))
    mp = lc.llama_model_default_params()
    mp.n_gpu_layers = 0
    m = lc.llama_model_load_from_file(model.encode(), mp)
    if not m:
        print("the probe model did not load", file=sys.stderr)
        return 1
    cp = lc.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 64, 16, 16
    cp.n_threads = cp.n_threads_batch = max(1, min(4, os.cpu_count() or 1))
    ctx = lc.llama_init_from_model(m, cp)
    if not ctx:
        print("no context for the probe model", file=sys.stderr)
        return 1
    for tokens in (list(range(3, 11)), [11]):
        arr = (lc.llama_token * len(tokens))(*tokens)
        rc = lc.llama_decode(ctx, lc.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            print(f"llama_decode returned {rc}", file=sys.stderr)
            return 1
    lc.llama_free(ctx)
    lc.llama_model_free(m)
    print("decoded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
