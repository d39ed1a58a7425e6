"""Screenshots of the real window for people to look at (not a test): a conversation with reasoning,
code, a table and tool-free Markdown under a long model name, the side panels open, and the set-up
page's plan picture for a Clover-shaped model on a 16 GB and a 24 GB card.

    python -m tests.ui.screenshots OUT_DIR [--theme light|dark] [--size 1366x768]

Run it under a real display (Xvfb and a window manager) to see the window as a user would, at
`QT_SCALE_FACTOR=1.5` too; offscreen it still writes the same grabs. The engine is a double that
streams a canned answer, so no model is needed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from app.engine.local import ChatRequest, ModelInfo, Reply, ReplyStats
from app.machine.llama_load import LoadSettings

LONG_NAME = "Clover-35B-A3B-Instruct-2612-Thinking-UD-Q4_K_XL-imatrix-calibrated-long-context-edition"
ANSWER = """Here is a **FizzBuzz** that returns a list, with `range` and a comprehension:

```python
def fizzbuzz(n: int) -> list[str]:
    # multiples of 15 first, then 3, then 5
    out = []
    for i in range(1, n + 1):
        out.append("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i))
    return out
```

| n | output | length |
|:--|:-------|-------:|
| 3 | Fizz | 4 |
| 5 | Buzz | 4 |
| 15 | FizzBuzz | 8 |

Run it with `python fizz.py`; each call is O(n)."""


class CannedEngine:
    kind = "fake"

    def __init__(self) -> None:
        self.info: ModelInfo | None = None

    @property
    def loaded(self) -> bool:
        return self.info is not None

    def load(self, path, settings, progress=None) -> ModelInfo:
        self.info = ModelInfo(str(path), LONG_NAME, "qwen35moe", settings.n_ctx, True, True, settings, True)
        return self.info

    def unload(self) -> None:
        self.info = None

    def count_tokens(self, request: ChatRequest) -> int:
        return 42

    def generate(self, request, on_event=None, should_stop=None, on_logprob=None) -> Reply:
        reasoning = "The user wants FizzBuzz in Python and a table of the first outputs. A list is easiest to test."
        for word in reasoning.split(" "):
            if on_event:
                on_event("reasoning", word + " ")
            time.sleep(0.002)
        for line in ANSWER.splitlines(keepends=True):
            if on_event:
                on_event("answer", line)
            time.sleep(0.002)
        stats = ReplyStats(prompt_tokens=42, prompt_evaluated=42, prompt_seconds=0.05, ttft_seconds=0.21,
                           generated_tokens=187, wall_seconds=0.9, stop_reason="end")
        return Reply(ANSWER, reasoning, ANSWER, reasoning, stats)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--theme", default="light", choices=("light", "dark"))
    parser.add_argument("--size", default="1366x768", help="the window's size in logical pixels, or 'max'")
    parser.add_argument("--screen", action="store_true", help="also capture the whole X11 screen")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CLOVER_HOME", tempfile.mkdtemp(prefix="clover-screens-"))

    from PySide6.QtWidgets import QApplication

    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header
    from app.machine import gpu
    from app.ui.application import configure
    from app.ui.main_window import MainWindow
    from tests.helpers.clover_shape import write_clover_shaped
    from tests.helpers.fakes import FakeGpu, FakeNVML

    app = QApplication.instance() or QApplication([])
    configure(app, args.theme)
    tag = f"{args.theme}-{os.environ.get('QT_SCALE_FACTOR', '1')}x"
    engine = CannedEngine()
    window = MainWindow(gpus=gpu.probe_with(FakeNVML([FakeGpu("NVIDIA GeForce RTX 4080", 15.99, used_gib=0.5)])),
                        engine=engine)
    if args.size == "max":
        window.showMaximized()
    else:
        w, h = (int(x) for x in args.size.split("x"))
        window.resize(w, h)
        window.show()
    window._on_loaded(engine.load("clover.gguf", LoadSettings(n_ctx=131_072)))

    def settle(seconds: float = 0.3) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    def shot(name: str) -> None:
        settle()
        path = args.out / f"{name}-{tag}.png"
        window.grab().save(str(path))
        if args.screen:  # the whole screen, window frame and all (ImageMagick's import, under X11)
            subprocess.run(["import", "-window", "root", str(path.with_name(f"{name}-{tag}-screen.png"))],
                           check=False)
        print(path, f"{window.width()}x{window.height()} (minimum {window.minimumSizeHint().width()}x"
                    f"{window.minimumSizeHint().height()})")

    done: list = []
    window.reply_finished.connect(done.append)
    window.input.setPlainText("Write FizzBuzz in Python and show a table of the first outputs.")
    window.send()
    while not done:
        settle(0.05)
    shot("chat")
    window.settings_button.click()
    shot("chat-settings-open")
    window.tools_button.click()
    shot("chat-tools-open")
    window.tools_button.click()

    header_path = write_clover_shaped(Path(tempfile.mkdtemp()) / "clover-shape.gguf")
    view = window.setup_view
    window.navigate("setup")
    view.select("clover-35b-a3b")
    view.facts = facts_from_header(read_header(header_path))
    for gb in (16.0, 24.0):
        view.what_if.setCurrentIndex(view.what_if.findData(gb))
        view._show_plan()
        print(f"  {gb:.0f} GB: {view.plan_text.text()}")
        shot(f"setup-plan-{gb:.0f}gb")
    hub_pages(window, settle, shot)
    window.close()
    return 0


def hub_pages(window, settle, shot) -> None:
    """The model browser on a fake Hub: a repo with the small quants and a Clover-shaped file, planned
    for this machine (the recommended file marked), then for the same card with only 4 GiB of RAM
    free, where the Clover file does not fit and asks for confirmation before any download."""
    from app.fetch import hub
    from app.machine.system_memory import SystemMemory
    from tests.helpers.clover_shape import write_clover_shaped
    from tests.helpers.fake_hub import FakeRepo, HubState, fake_hub
    from tests.helpers.hub_repos import tiny_quants

    folder = Path(tempfile.mkdtemp(prefix="clover-hub-"))
    files = tiny_quants(folder, stem="Clover-35B-A3B")
    clover = write_clover_shaped(folder / "Clover-35B-A3B-Q4_K_M.gguf")
    files["Clover-35B-A3B-Q4_K_M.gguf"] = clover
    state = HubState()
    state._sha[clover] = "0" * 64  # a sparse 20 GB file: its real hash is not the point here
    state.add(FakeRepo("clover-lab/Clover-35B-A3B-GGUF", files, downloads=12_000, likes=340))
    with fake_hub(state) as url:
        os.environ["HF_ENDPOINT"] = url
        hub.CACHE._mem.clear()
        view = window.hub_view
        window.navigate("hub")
        view.query.setText("Clover-35B-A3B")
        view.search(view.query.text())
        done: list = []
        view.planned.connect(lambda *a: done.append(1))
        view.open_repo("clover-lab/Clover-35B-A3B-GGUF")
        while not done:
            settle(0.05)
        settle(1.0)
        shot("hub-recommended")
        view._ram = SystemMemory(8 * 2**30, 4 * 2**30)
        done.clear()
        view.what_if.setCurrentIndex(view.what_if.findData(8.0))  # re-plans from the cached headers
        while not done:
            settle(0.05)
        done.clear()
        view.what_if.setCurrentIndex(0)
        while not done:
            settle(0.05)
        settle(1.0)
        row = next(i for i, fp in enumerate(view.plans) if fp.file.name.startswith("Clover-35B-A3B-Q4_K_M"))
        view.files.selectRow(row)
        view.setup_selected()
        print(f"  4 GiB of RAM free: {view.confirm_text.text()}")
        shot("hub-does-not-fit")


if __name__ == "__main__":
    raise SystemExit(main())
