"""`python -m app serve MODEL`: the local OpenAI-compatible server without the window. No Qt.

It plans and loads the model as the window does (the machine's GPU and RAM, a tune result cached for
this model and build, the load-time patch of a vendor-dialect file), with `--parallel N` slots, then
serves the window's API (app/serve/server.py) until Ctrl-C or SIGTERM, which stop it cleanly: the
listening socket closes, replies being written end, the model is unloaded.

Exit codes: 0 stopped by a signal; 1 the model does not fit, does not load or no port could be had;
2 bad arguments or a file that is not a readable GGUF model.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app.base.exit_codes import ExitCode
from app.engine.local import Engine, EngineError
from app.model.plan import PlanRequest, plan_for_file
from app.serve.server import LocalServer

SPECULATIVE = ("auto", "mtp", "ngram", "off")
MAX_PARALLEL = 64  # llama.cpp's LLAMA_MAX_SEQ is 256; past a few dozen, one card's memory runs out first


def serve_model(model: str | Path, *, host: str = "127.0.0.1", port: int = 8080, ctx: int | None = None,
                parallel: int = 1, speculative: str = "auto", api_key: str | None = None,
                say: Callable[[str], None] = print, stop: threading.Event | None = None) -> int:
    """Plan, load and serve until `stop` is set (a signal sets it when this runs in the main thread)."""
    from app.gguf.gguf_file import GGUFError
    from app.machine.snapshot import Machine

    if speculative not in SPECULATIVE:
        say(f"error: --speculative must be one of {', '.join(SPECULATIVE)}")
        return ExitCode.BAD_INPUT
    if not 1 <= parallel <= MAX_PARALLEL:
        say(f"error: --parallel must be 1 to {MAX_PARALLEL}")
        return ExitCode.BAD_INPUT
    if ctx is not None and ctx < 256:
        say("error: --ctx must be at least 256 tokens")
        return ExitCode.BAD_INPUT
    path = Path(model)
    try:
        planned = plan_for_file(path, Machine.read(),
                                PlanRequest(n_ctx=ctx, parallel=parallel, min_ctx=min(ctx or 4096, 4096)),
                                speculative=speculative)
    except (GGUFError, OSError, KeyError, ValueError) as exc:
        say(f"error: {path}: {exc}")
        return ExitCode.BAD_INPUT
    if speculative == "mtp" and not planned.facts.extra_blocks:
        say(f"error: --speculative mtp: {path.name} has no multi-token-prediction head (nextn_predict_layers "
            "is 0); use auto, ngram or off")
        return ExitCode.BAD_INPUT
    plan = planned.plan
    say(plan.reason)
    for line in (planned.overlay, planned.tuned):
        if line:
            say(line)
    if not plan.fits:
        say(f"error: the model does not fit this machine: {'; '.join(plan.suggestions) or plan.reason}")
        return ExitCode.FAILED
    if parallel > 1 and speculative != "off":
        say(f"{parallel} slots: speculative decoding is off (it drafts for one reply at a time)")
    elif plan.breakdown.mtp:
        say("speculative decoding: the model's multi-token-prediction head drafts")
    settings = replace(planned.settings, parallel=parallel)
    engine = Engine()
    shown = [-1]

    def progress(fraction: float) -> bool:
        step = int(fraction * 4)
        if step > shown[0]:
            shown[0] = step
            say(f"loading {path.name}: {fraction:.0%}")
        return not (stop is not None and stop.is_set())

    try:
        engine.load(path, settings, progress=progress)
    except EngineError as exc:
        say(f"error: {exc}")
        return ExitCode.FAILED
    server = LocalServer(engine, host=host, port=port, api_key=api_key)
    try:
        url = server.start()
    except OSError as exc:
        engine.unload()
        say(f"error: could not listen on {host}:{port}: {exc}")
        return ExitCode.FAILED
    stop = stop or threading.Event()
    restore = _on_signals(stop)
    info = engine.info
    assert info is not None
    say(f"model {server.model_id()}: {parallel} slot{'s' if parallel > 1 else ''} of {info.n_ctx:,} tokens")
    say(f"listening on {url}")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        say("stopping")
        server.stop()
        engine.unload()
        restore()
    return ExitCode.OK


def _on_signals(stop: threading.Event) -> Callable[[], None]:
    """Ctrl-C and SIGTERM set `stop` (only the main thread can take signals; elsewhere, nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
