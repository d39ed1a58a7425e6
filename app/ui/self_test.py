"""`--self-test [MODEL]`: what a bundle runs to prove it works on this machine.

Opens the real window (offscreen when there is no display), checks the icon and style sheet,
llama.cpp's build and, given a GGUF, loads it and decodes a few tokens. Runs in a throw-away data
folder so a user's conversations are never touched. Prints each check; exits 0 only if all pass.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import cast

from app.base.exit_codes import ExitCode


def run_self_test(model: str | None) -> int:
    from app.ui.display import why_no_window

    if why_no_window():  # no display, or Qt's X11 libraries missing: a self-test needs no screen
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    home = tempfile.mkdtemp(prefix="clover-self-test-")
    os.environ["CLOVER_HOME"] = home
    failures = 0

    def check(name: str, fn: Callable[[], str]) -> None:
        nonlocal failures
        try:
            detail = fn()
            print(f"ok    {name}: {detail}", flush=True)
        except Exception as exc:  # a self-test reports every failure, then fails
            failures += 1
            print(f"FAIL  {name}: {type(exc).__name__}: {exc}", flush=True)

    from PySide6.QtWidgets import QApplication

    from app.ui.application import configure

    app = cast(QApplication, QApplication.instance() or QApplication([sys.argv[0]]))
    check("resources", lambda: configure(app) or "icon and style sheet loaded")

    def llama() -> str:
        from app.machine.snapshot import Machine

        b = Machine.read().require_build()
        return f"llama-cpp-python {b.version}, backends {', '.join(b.backends)}; using {b.backend_choice()}"

    check("llama.cpp", llama)

    def window() -> str:
        from app.ui.main_window import MainWindow

        w = MainWindow()
        w.show()
        app.processEvents()
        size = w.grab().size()
        w.close()
        return f"main window shown ({size.width()}x{size.height()}, platform {app.platformName()})"

    check("window", window)

    if model:
        def decode() -> str:
            from app.engine.contract import ChatRequest, SamplingParams
            from app.engine.hosted import HostedEngine
            from app.machine.llama_load import LoadSettings

            engine = HostedEngine()  # as the window runs it: in a process of its own
            t0 = time.perf_counter()
            engine.load(model, LoadSettings(n_ctx=512, n_outputs_max=1))
            reply = engine.generate(ChatRequest([{"role": "user", "content": "What is the capital of France?"}],
                                                sampling=SamplingParams(temperature=0.0, max_tokens=8)))
            engine.unload()
            if reply.stats.generated_tokens == 0:
                raise RuntimeError("no token was generated")
            return (f"{reply.stats.generated_tokens} tokens in {time.perf_counter() - t0:.1f} s "
                    f"({reply.stats.generation_tps:.0f} tok/s): {(reply.reasoning + reply.text)[:60]!r}")

        check("decode", decode)
    print("self-test passed" if not failures else f"self-test FAILED ({failures} check(s))", flush=True)
    return ExitCode.OK if not failures else ExitCode.FAILED
