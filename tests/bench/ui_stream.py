"""The chat window under a fast stream: a fake engine emits 1000 tokens/s into a growing transcript.

    python -m tests.bench.ui_stream [--replies 20] [--tokens 500] [--rate 1000]

Runs the real window offscreen with an engine double on the real engine thread. While it streams,
a 5 ms timer on the GUI thread records how late it fires: the worst lateness is the longest the
event loop was blocked (target < 16 ms, one frame at 60 Hz). For each reply it records the GUI
thread's CPU time per token (target at most 250 us): flat from the first replies to the last means
the cost of a token does not grow with the transcript.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.engine.local import ReplyStats  # noqa: E402
from app.machine.llama_load import LoadSettings  # noqa: E402
from tests.bench.verdict import Verdicts
from tests.helpers.fakes import ScriptedEngine, Turn  # noqa: E402

# Prose, inline code, a list, a table and a fenced block that opens and closes: the answer is
# rendered with the code-block widgets and Pygments highlighting (the setting's default, on).
WORDS = ("the quick brown fox jumps over the lazy dog while **bold** text, `code` and a list\n- item\n"
         "flows past in a long answer\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\nthen\n\n```python\n"
         "def f(x):\n    return [i * x for i in range(10)]  # a comment\n```\n\nand on ").split(" ")


def streaming_engine(rate: float, tokens: int) -> ScriptedEngine:
    """Streams `tokens` words at `rate` per second, the first tenth as reasoning."""
    stream = [("reasoning" if i < tokens // 10 else "answer", WORDS[i % len(WORDS)] + " ") for i in range(tokens)]
    full = "".join(text for _kind, text in stream)
    stats = ReplyStats(prompt_tokens=10, prompt_evaluated=10, prompt_seconds=0.001, ttft_seconds=0.001,
                       generated_tokens=tokens, stop_reason="length")
    return ScriptedEngine(Turn(full, stats=stats, stream=stream), rate=rate, name="fake")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--rate", type=float, default=1000.0)
    args = parser.parse_args()

    import tempfile

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.machine import gpu
    from app.ui.application import configure
    from app.ui.main_window import MainWindow

    os.environ["CLOVER_HOME"] = tempfile.mkdtemp(prefix="clover-ui-bench-")
    app = QApplication.instance() or QApplication([])
    configure(app)
    engine = streaming_engine(args.rate, args.tokens)

    class NoGpu:
        def nvmlInit(self):
            raise RuntimeError("benchmark: no GPU")

    window = MainWindow(gpus=gpu.probe_with(NoGpu()), engine=engine)
    window.resize(1100, 720)
    window.show()
    deadline = time.monotonic() + 30
    while window.warm_up.ident is None and time.monotonic() < deadline:  # it starts after the first frame
        app.processEvents()
        time.sleep(0.01)
    window.warm_up.join(30)  # the parser and lexers compile while the user reads: steady state is measured
    for _ in range(20):  # and the window's own idle-time warm-up (fonts, rich text) has run
        app.processEvents()
        time.sleep(0.01)
    info = engine.load("fake.gguf", LoadSettings())
    window.model._on_loaded(info)  # the fake model is "loaded": skip planning a file that does not exist

    lateness: list[float] = []
    last = [time.perf_counter()]
    ticker = QTimer()
    ticker.setInterval(5)

    def tick() -> None:
        now = time.perf_counter()
        lateness.append((now - last[0]) * 1000 - 5)
        last[0] = now

    ticker.timeout.connect(tick)
    per_token_us: list[float] = []
    stalls: list[float] = []
    waiting = QEventLoop()  # the window's own event loop, as in the app (a polling loop cost the thread 13 ms
    guard = QTimer(singleShot=True, interval=120_000)  # a second of its own); a reply that never ends fails
    guard.timeout.connect(waiting.quit)
    for i in range(args.replies):
        done: list = []
        window.chat.reply_finished.connect(done.append)
        window.chat.reply_finished.connect(waiting.quit)
        window.composer.input.setPlainText(f"question {i}")
        lateness.clear()
        cpu0 = time.thread_time()
        last[0] = time.perf_counter()
        ticker.start()
        window.chat.send()
        if not done:
            guard.start()
            waiting.exec()
            guard.stop()
        ticker.stop()
        cpu = time.thread_time() - cpu0
        window.chat.reply_finished.disconnect()
        if not done:
            raise SystemExit(f"reply {i + 1} did not finish within 120 s")
        per_token_us.append(cpu / args.tokens * 1e6)
        stalls.append(max(lateness) if lateness else 0.0)
        print(f"  reply {i + 1:3d}: transcript {len(window.transcript.messages):4d} messages, "
              f"GUI CPU {per_token_us[-1]:6.1f} us/token, worst event-loop stall {stalls[-1]:5.1f} ms")
    first = statistics.mean(per_token_us[:3])
    last3 = statistics.mean(per_token_us[-3:])
    worst = max(stalls)
    blocks = sum(len(m.body.code_blocks()) for m in window.transcript.messages if hasattr(m.body, "code_blocks"))
    print(f"\n{args.replies} replies x {args.tokens} tokens at {args.rate:.0f} tok/s; code highlighting "
          f"{'on' if window.transcript.highlight else 'off'}, {blocks} code blocks in the transcript")
    verdicts = Verdicts()
    print(f"  worst event-loop stall       {worst:6.1f} ms   (target < 16 ms)  "
          f"{verdicts.check('worst event-loop stall (ms)', worst, worst < 16, '< 16 ms', '{:.1f}')}")
    print(f"  GUI cost per token, first 3  {first:6.1f} us")
    most = max(per_token_us)
    print(f"  GUI cost per token, last 3   {last3:6.1f} us")
    print(f"  GUI cost per token, worst    {most:6.1f} us   (target <= 250 us)  "
          f"{verdicts.check('GUI cost per token (us)', most, most <= 250, '<= 250 us', '{:.0f}')}")
    print(f"  last / first                 {last3 / first:6.2f}      (flat: about 1)")
    window.close()
    return verdicts.finish()


if __name__ == "__main__":
    raise SystemExit(main())
