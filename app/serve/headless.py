"""`python -m app serve MODEL`: the local OpenAI-compatible server without the window. No Qt.

It plans and loads the model as the window does (the machine's GPU and RAM, a tune result cached for
this model and build, the load-time patch of a vendor-dialect file), with `--parallel` slots sharing one
KV pool of the context (auto, the default: the plan's AUTO_SLOTS where its memory allows, fewer
otherwise, said in the load line with why; or N), then serves the window's API (app/serve/server.py)
until Ctrl-C or SIGTERM, which stop it cleanly: the listening socket closes, replies being written end
(within REPLY_GRACE seconds, then they are cut), the model is unloaded.

Exit codes: 0 stopped by a signal; 1 the model does not fit, does not load or no port could be had;
2 bad arguments (a port outside 0-65535, a host other than loopback without an API key unless
`insecure_no_key`: `listen_problem`, which the window's server is held to as well) or a file that
is not a readable GGUF model (a missing one in one sentence). A `--ctx` the model's training window
or this machine's memory cuts is said in the load line, with what it was cut to and why.
"""

from __future__ import annotations

import ipaddress
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app.base.exit_codes import ExitCode
from app.base.settings import BY_KEY
from app.engine.builtin_template import builtin_names
from app.engine.contract import EngineError
from app.engine.local import Engine
from app.engine.planned_load import fit_problem, load_as_planned
from app.engine.prompt_cache import cache_line
from app.model.plan import PlanRequest, plan_for_file
from app.serve.server import LocalServer

SPECULATIVE = ("auto", "mtp", "ngram", "off")
REPLY_GRACE = 30.0  # seconds the replies being written at a stop get to end
CACHE_DISK_GB = int(BY_KEY["cache.disk_gb"].default)  # the window's default, also serve's
MAX_PARALLEL = 64  # llama.cpp's LLAMA_MAX_SEQ is 256; past a few dozen, one card's memory runs out first


def is_loopback(host: str) -> bool:
    """`host` reaches this machine only: localhost, 127.0.0.0/8 or ::1."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def listen_problem(host: str, port: int, api_key: str | None, *, insecure_no_key: bool = False,
                   window: bool = False) -> str | None:
    """Why the server must not listen on host:port, in one sentence (None: it may): a port outside
    0-65535 (0: any free one), a host that is not an address, or a host other than loopback without
    an API key, which would let every machine that reaches this one use the model, unless
    `insecure_no_key`. `window`: the sentence names the window's settings instead of the flags."""
    if not 0 <= port <= 65535:
        return (f"The local server port must be 1 to 65535, not {port}." if window
                else f"--port must be 1 to 65535 (or 0: any free port), not {port}")
    if not is_loopback(host):
        try:
            socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except (OSError, UnicodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return f"--host {host!r} is not an address this machine can listen on ({why})"
        if not (api_key or "").strip() and not insecure_no_key:
            if window:
                return (f"The local server would listen on {host}, where every machine that reaches this one "
                        "could use the model: set a Local server API key first.")
            return (f"--host {host} would let every machine that reaches this one use the model: give --api-key "
                    "(or $CLOVER_API_KEY), or --insecure-no-key to serve without a key all the same")
    return None


def _file_error(path: Path, exc: BaseException) -> str:
    """A file that cannot be planned, in one sentence: the path once, no "[Errno 2]"."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename if exc.filename is not None else path}: {exc.strerror}"
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return text if str(path) in text else f"{path}: {text}"


def ctx_note(asked: int | None, loaded: int, trained: int) -> str:
    """What the load line adds when the context loaded is shorter than `--ctx` asked: what it was
    cut to and why ("" when it was not cut)."""
    if asked is None or loaded >= asked:
        return ""
    why = []
    if asked > trained:
        why.append(f"the model was trained for {trained:,} tokens")
    if loaded < min(asked, trained):
        why.append(f"{loaded:,} is what fits this machine's memory")
    return f" (--ctx {asked:,} cut to {loaded:,}: {' and '.join(why) or 'as llama.cpp loaded it'})"


def slots_line(model_id: str | None, slots: int, n_ctx: int, note: str = "", reproducible: bool = False) -> str:
    """The load line: the slots and the context they share (or each has: --reproducible), and (--parallel
    auto) why that many."""
    head = (f"model {model_id}: 1 slot of {n_ctx:,} tokens" if slots <= 1
            else f"model {model_id}: {slots} slots, each with its own {n_ctx:,}-token context" if reproducible
            else f"model {model_id}: {slots} slots sharing one {n_ctx:,}-token context")
    if reproducible:
        head += ", reproducible replies (the same at temperature 0 whatever runs beside them; no drafts)"

    return head + (f" ({note.replace('automatic', '--parallel auto', 1)})" if note else "")


def serve_model(model: str | Path, *, host: str = "127.0.0.1", port: int = 8080, ctx: int | None = None,
                parallel: int | str = "auto", speculative: str = "auto", api_key: str | None = None,
                insecure_no_key: bool = False, say: Callable[[str], None] = print,
                stop: threading.Event | None = None, cache_ram_mb: int | None = None,
                cache_disk_gb: int = CACHE_DISK_GB, chat_template: str = "", reproducible: bool = False) -> int:
    """Plan, load and serve until `stop` is set (a signal sets it when this runs in the main thread).
    `parallel`: "auto" (AUTO_SLOTS where the plan's memory allows, fewer otherwise) or 1 to MAX_PARALLEL."""
    from app.gguf.gguf_file import GGUFError
    from app.machine.snapshot import Machine

    problem = listen_problem(host, port, api_key, insecure_no_key=insecure_no_key)
    if problem is not None:
        say(f"error: {problem}")
        return ExitCode.BAD_INPUT
    if speculative not in SPECULATIVE:
        say(f"error: --speculative must be one of {', '.join(SPECULATIVE)}")
        return ExitCode.BAD_INPUT
    asked = parallel_arg(parallel)
    if asked is None:
        say(f"error: --parallel must be auto or 1 to {MAX_PARALLEL}, not {parallel}")
        return ExitCode.BAD_INPUT
    if ctx is not None and ctx < 256:
        say("error: --ctx must be at least 256 tokens")
        return ExitCode.BAD_INPUT
    if (cache_ram_mb is not None and cache_ram_mb < 0) or cache_disk_gb < 0:
        say("error: --cache-ram and --cache-disk must be 0 (off) or more")
        return ExitCode.BAD_INPUT
    if chat_template and chat_template not in builtin_names():
        say(f"error: --chat-template {chat_template}: llama.cpp has no such built-in template (it has: "
            f"{', '.join(builtin_names())})")
        return ExitCode.BAD_INPUT
    path = Path(model)
    try:
        planned = plan_for_file(path, Machine.read(),
                                PlanRequest(n_ctx=ctx, parallel=asked, min_ctx=min(ctx or 4096, 4096),
                                            reproducible=reproducible),
                                speculative=speculative,
                                cache_ram_mb=-1 if cache_ram_mb == 0 else cache_ram_mb or 0,
                                cache_disk_gb=cache_disk_gb)
    except (GGUFError, OSError, KeyError, ValueError) as exc:
        say(f"error: {_file_error(path, exc)}")
        return ExitCode.BAD_INPUT
    if speculative == "mtp" and not planned.facts.extra_blocks:
        say(f"error: --speculative mtp: {path.name} has no multi-token-prediction head (nextn_predict_layers "
            "is 0); use auto, ngram or off")
        return ExitCode.BAD_INPUT
    plan = planned.plan
    problem = fit_problem(path, planned)  # it holds the plan's reason: said once, in the error line
    if problem is None:
        say(plan.reason)
    for line in (planned.overlay, planned.tuned):
        if line:
            say(line)
    if problem is not None:
        say(f"error: {problem}")
        return ExitCode.FAILED
    engine = Engine()
    shown = [-1]

    def progress(fraction: float) -> bool:
        step = int(fraction * 4)
        if step > shown[0]:
            shown[0] = step
            say(f"loading {path.name}: {fraction:.0%}")
        return not (stop is not None and stop.is_set())

    if chat_template:
        planned = replace(planned, settings=replace(planned.settings, chat_template=chat_template))
    try:
        load_as_planned(engine, path, planned, progress=progress)
    except EngineError as exc:
        say(f"error: {exc}")
        return ExitCode.FAILED
    server = LocalServer(engine, host=host, port=port, api_key=api_key)
    try:
        url = server.start()
    except (OSError, OverflowError) as exc:  # OverflowError: a port tried past 65535
        engine.unload()
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        say(f"error: could not listen on {host}:{port}: {why}")
        return ExitCode.FAILED
    stop = stop or threading.Event()
    restore = _on_signals(stop)
    info = engine.info
    assert info is not None
    say(slots_line(server.model_id(), info.parallel, info.n_ctx, plan.slots_note, info.settings.reproducible)
        + ctx_note(ctx, info.n_ctx, planned.facts.n_ctx_train))
    say(f"speculative decoding: {info.drafting}")  # as loaded: under auto, what the load measured decided
    if info.template_note:  # the file has no chat template, or --chat-template chose one
        say(info.template_note)
    from app.machine.llama_backend import build_info

    say(f"runs on {build_info().backend_choice()}")  # the CPU variant, and any the probe skipped
    say(cache_line(planned.settings))
    if not is_loopback(host) and not api_key:
        say(f"warning: listening on {host} without an API key (--insecure-no-key): every machine that reaches "
            "this one can use the model")
    say(f"listening on {url}")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        say("stopping")
        server.stop(grace=REPLY_GRACE)
        engine.unload()
        restore()
    return ExitCode.OK


def parallel_arg(value: int | str) -> int | None:
    """--parallel as the plan takes it: 0 for auto, else 1 to MAX_PARALLEL (None: neither)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return 0
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if 1 <= n <= MAX_PARALLEL else None


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
