"""Every page of the real window in a state a user sees (a long answer with code, each side panel,
the model browser with a repo planned, a saved endpoint, a tune chart, the model's Details), and
a check of each: no visible widget reaches past what shows it horizontally (the page's viewport,
or a parent that cuts it off), and the page's primary button is in view without scrolling.

Shared by tests/ui/test_page_layout.py (which fails on any finding) and tests/ui/screenshots.py
(which saves a picture of each state). The engine is a double that streams a canned answer, the
Hub a local fake, so no model or network is needed.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractScrollArea,
    QApplication,
    QPlainTextEdit,
    QScrollArea,
    QTextEdit,
    QWidget,
)

from app.engine.contract import ReplyStats
from app.machine.llama_load import LoadSettings
from app.ui.widgets.code_block import CodeBlock
from tests.helpers.fakes import ScriptedEngine, Turn

LONG_NAME = "Clover-35B-A3B-Instruct-2612-Thinking-UD-Q4_K_XL-imatrix-calibrated-long-context-edition"
# the sizes a user meets: a small laptop, the common laptop, and the common laptop at 150 % (a
# 1366x768 screen at QT_SCALE_FACTOR=1.5 leaves 911x512 logical pixels)
SIZES = ((1024, 640, 1.0), (1366, 768, 1.0), (1366, 768, 1.5))
LONG_WORDS = ("The plan keeps the experts of the first eleven blocks in system RAM and the rest on the GPU; "
              "llama.cpp moves each expert tensor by name (blk.0.ffn_up_exps and its siblings), so the "
              "attention and the shared expert of every block stay on the card. ") * 3
ANSWER = f"""Here is a **FizzBuzz** that returns a list, with `range` and a comprehension:

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

{LONG_WORDS}

A path without spaces: /home/someone/.local/share/clover-launcher/models/{LONG_NAME}.gguf

Run it with `python fizz.py`; each call is O(n)."""
REASONING = "The user wants FizzBuzz in Python and a table of the first outputs. A list is easiest to test."


def canned_engine() -> ScriptedEngine:
    """The engine double: a model 'loads' at once and every reply streams REASONING word by word, then
    ANSWER line by line, about a millisecond each."""
    stats = ReplyStats(prompt_tokens=1290, prompt_evaluated=12, prompt_seconds=0.05, ttft_seconds=0.21,
                       generated_tokens=187, wall_seconds=0.9, stop_reason="length")
    stream = [("reasoning", w + " ") for w in REASONING.split(" ")]
    stream += [("answer", line) for line in ANSWER.splitlines(keepends=True)]
    return ScriptedEngine(Turn(ANSWER, REASONING, stats=stats, stream=stream), rate=1000, prompt_tokens=42,
                          name=LONG_NAME, arch="qwen35moe")


@dataclass
class PageState:
    """One state of one page: where it shows (its viewports) and the button a user looks for."""

    name: str
    viewports: list[QWidget]  # what shows the page: a scroll area's viewport, or the page itself
    primary: QWidget | None = None  # must be in view without scrolling
    extra_roots: list[QWidget] = field(default_factory=list)  # also checked (the model bar, the composer)
    primary_in: QWidget | None = None  # where the primary button shows, when not in the viewports (the composer)


def settle(seconds: float = 0.2) -> None:
    app = QApplication.instance()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def _viewport(widget: QWidget) -> QWidget:
    return widget.viewport() if isinstance(widget, QScrollArea) else widget


def _scroll_to_top(widget: QWidget) -> None:
    for area in [widget, *widget.findChildren(QScrollArea)]:
        if isinstance(area, QScrollArea):
            area.verticalScrollBar().setValue(0)
            area.horizontalScrollBar().setValue(0)


def _describe(w: QWidget) -> str:
    text = ""
    for getter in ("text", "title", "placeholderText"):
        fn = getattr(w, getter, None)
        if callable(fn):
            try:
                value = fn()
            except TypeError:
                continue
            if isinstance(value, str) and value:
                text = value
                break
    name = w.objectName()
    return f"{type(w).__name__}{'#' + name if name else ''}{' ' + repr(text[:40]) if text else ''}"


def _rect_in(w: QWidget, top: QWidget) -> QRect:
    return QRect(w.mapTo(top, QPoint(0, 0)), w.size())


# tables, lists, text and code blocks: they scroll their content (a code block sideways, under its own bar)
SCROLLS_ITSELF = (QAbstractItemView, QPlainTextEdit, QTextEdit, CodeBlock)


def clipped(root: QWidget, top: QWidget) -> list[str]:
    """Each visible widget under `root` that reaches past the horizontal extent of `root` or of any
    widget between them (a parent cuts off what reaches past it). Widgets that scroll their own
    content (lists, tables, text and code views) are checked, not their content; a QScrollArea's
    content is checked against its viewport."""
    found: list[str] = []

    def visit(parent: QWidget, left: int, right: int) -> None:
        for child in parent.children():
            if not isinstance(child, QWidget) or child.isWindow() or not child.isVisible():
                continue
            r = _rect_in(child, top)
            if r.width() <= 0 or r.height() <= 0:
                continue
            if r.left() < left or r.right() > right:
                found.append(f"{_describe(child)} spans x {r.left()}..{r.right()}, shown {left}..{right}")
            if isinstance(child, SCROLLS_ITSELF):
                continue
            inner = _rect_in(child.viewport(), top) if isinstance(child, QAbstractScrollArea) else r
            visit(child, max(left, inner.left()), min(right, inner.right()))

    r = _rect_in(root, top)
    visit(root, r.left(), r.right())
    return found


def problems(window: QWidget, state: PageState) -> list[str]:
    """What a user would find wrong with this state: clipped widgets, a primary button out of view."""
    found = []
    for view in state.viewports + state.extra_roots:
        found += [f"{state.name}: {p}" for p in clipped(view, window)]
    if state.primary is not None:
        b = state.primary
        areas = [state.primary_in] if state.primary_in is not None else state.viewports
        shown = any(_rect_in(view, window).contains(_rect_in(b, window)) for view in areas)
        if not b.isVisible() or not shown or not window.rect().contains(_rect_in(b, window)):
            found.append(f"{state.name}: primary button {_describe(b)} is not in view without scrolling "
                         f"(at {_rect_in(b, window).getCoords()}, window {window.width()}x{window.height()})")
    return found


def walk(window, engine: ScriptedEngine) -> Iterator[PageState]:
    """Bring the window into each state in turn; yields when the state is on screen (settled)."""
    chrome = [window.model_bar, window.statusBar()]
    if engine.info is None:
        window.model._on_loaded(engine.load("/models/" + LONG_NAME + ".gguf", LoadSettings(n_ctx=131_072)))
    window.navigate("welcome")
    settle()
    yield PageState("welcome", [_viewport(window._page_of["welcome"])], window.welcome.clover_button, chrome)

    done: list = []
    window.chat.reply_finished.connect(done.append)
    if not window.transcript.messages:
        window.composer.input.setPlainText("Write FizzBuzz in Python and show a table of the first outputs. " * 3)
        window.chat.send()
        while not done:
            settle(0.05)
    window.navigate("chat")  # a second walk (the next size) finds the conversation there already
    transcript = window.transcript
    chat = [window.model_bar, window.composer, window.statusBar()]
    c = window.composer
    for panel, button in (("", None), ("settings", c.settings_button), ("tools", c.tools_button)):
        if panel == "tools":
            _mcp_servers(window)
        if button is not None:
            button.setChecked(True)
        settle(0.3)
        roots = chat + ([window.side_tabs.currentWidget().viewport()] if button is not None else [])
        state = PageState("chat" + (f"-{panel}-open" if panel else ""), [transcript.viewport()],
                          window.composer.send_button, roots, primary_in=window.composer)
        transcript.verticalScrollBar().setValue(transcript.verticalScrollBar().maximum())
        settle(0.1)
        yield state
        if button is not None:
            button.setChecked(False)
    yield from _server(window, chrome)
    settle()

    menu = window.model_bar.details.menu()
    menu.popup(window.model_bar.details.mapToGlobal(QPoint(0, window.model_bar.details.height())))
    settle(0.3)
    yield PageState("details", [menu], None, [])
    menu.hide()

    yield from _hub(window)

    window.navigate("setup")
    view = window.setup_view
    view.select("clover-35b-a3b")
    settle(0.5)
    _scroll_to_top(view)
    yield PageState("setup", [view.scroll_area.viewport()], view.start_button, chrome)

    window.navigate("scenarios")
    window.scenarios_place.show_tab(0)
    settle()
    yield PageState("scenarios", [_viewport(window.scenarios_place.part(0))], window.scenarios_view.run_button, chrome)
    yield from _bfcl(window, chrome)

    yield from _engines(window, chrome)
    yield from _tune(window, chrome)
    yield from _my_models(window, chrome)
    yield from _picker(window)
    yield from _downloads(window, chrome)

    window.navigate("settings")
    settle()
    yield PageState("settings", [window.settings_view.scroll_area.viewport()], None, chrome)
    window.navigate("chat")


BFCL_LABEL = "engine-double-writes-the-answers"  # the runs' model: a double, named as one


def _bfcl(window, chrome) -> Iterator[PageState]:
    """The Scenarios place's BFCL part with two kept quick runs of an engine double (thinking off, then
    on; tests/helpers/bfcl_writer.py), both ticked: its controls, the runs with their comparison, and a
    wrong case opened. Runs already kept in CLOVER_HOME (a real model's, for the docs' pictures) are
    shown instead. Nothing where the test files are not here (bfcl-eval is a test dependency)."""
    from app.bench.bfcl_bench import BenchOptions, bench_engine
    from app.bench.bfcl_cases import load_cases
    from app.bench.bfcl_store import list_runs
    from app.fetch.bfcl_dataset import local_folder
    from tests.helpers.bfcl_writer import bfcl_engine

    folder = local_folder()
    if folder is None:
        return
    view = window.bfcl_view
    if len(list_runs()) < 2:
        cases = load_cases(folder, quick=True)
        for thinking, wrong_every in ((False, 3), (True, 5)):
            engine = bfcl_engine(folder, wrong_every=wrong_every, name=BFCL_LABEL)
            engine.load(f"/models/{BFCL_LABEL}.gguf", LoadSettings(n_ctx=32_768))
            bench_engine(engine, cases, label=BFCL_LABEL, source_text=engine.info.path, plan="", thinking=thinking,
                         options=BenchOptions(data=folder), machine=window.machine)
    window.navigate("scenarios")
    window.scenarios_place.show_tab(1)
    settle(0.3)
    view.reload_runs()
    view.ticked = [str(r.path) for r in view.runs[:2]]
    view.current_run = next((str(r.path) for r in view.runs[:2] if r.info.thinking), str(view.runs[0].path))
    view.reload_runs()
    wait_for(lambda: view.counts is not None, 30)
    scroll = window.scenarios_place.part(1)
    _scroll_to_top(scroll)
    settle(0.3)
    yield PageState("bfcl", [scroll.viewport()], view.run_button, chrome)
    scroll.verticalScrollBar().setValue(view.runs_title.y() - 8)
    settle(0.2)
    yield PageState("bfcl-runs", [scroll.viewport()], None, chrome)
    records = view._records()
    wrong = next((r for r in records if not r.valid and r.category == "simple_python" and r.calls),
                 next((r for r in records if not r.valid and r.calls), records[0]))  # kept runs of a real model
    view.cases_table.selectRow([r.id for r in records].index(wrong.id))
    settle(0.3)
    scroll.verticalScrollBar().setValue(view.case_page.y() - 60)
    settle(0.2)
    yield PageState("bfcl-case", [scroll.viewport()], None, chrome)
    scroll.verticalScrollBar().setValue(0)


def _server(window, chrome) -> Iterator[PageState]:
    """The Settings page's Server section with the server running: its state and the address each
    client uses (Claude Code, Codex, OpenAI clients, /health)."""
    window.navigate("settings")
    if window.server.server is None:
        window.server.toggle()
    settle(0.3)
    scroll = window.settings_view.scroll_area
    form = window.settings_form
    scroll.verticalScrollBar().setValue(form.sections["Server"].y())  # the key, the state and every address
    settle(0.2)
    yield PageState("settings-server", [scroll.viewport()], form.server.button, chrome)
    scroll.verticalScrollBar().setValue(0)
    window.server.stop()
    window.navigate("chat")


MCP_SERVER = "weather-and-drones_demo-server"
MCP_BROKEN = "github-issues-and-pull-requests"
MCP_BAD_SCHEMA = "bad-schemas"  # lists a good tool and two whose schemas are not valid
MCP_EXITS = "exits-at-once"  # writes to its stderr and exits with code 4


def _mcp_servers(window) -> None:
    """The Tools panel with four MCP servers: the demo server (started, its tools listed), one whose
    program is missing (a long path in its error, its log open), one that lists two tools whose
    schemas are not valid (left out, saying why) and one that exits at once (its stderr's end shown)."""
    import json

    from app.base.paths import app_dirs
    from app.chat.mcp_demo_server import demo_server_config
    from tests.helpers import mcp_servers

    panel = window.tools_panel.mcp
    if set(panel.boxes) != {MCP_SERVER, MCP_BROKEN, MCP_BAD_SCHEMA, MCP_EXITS}:
        demo = demo_server_config(MCP_SERVER)
        missing = "/opt/mcp-servers/github-issues-and-pull-requests-server/bin/mcp-server-github-issues"
        config = {"mcpServers": {MCP_SERVER: {"command": demo.command, "args": list(demo.args),
                                              "cwd": str(Path(__file__).resolve().parents[2])},
                                 MCP_BROKEN: {"command": missing, "args": ["--stdio"]},
                                 MCP_BAD_SCHEMA: mcp_servers.config("badschema"),
                                 MCP_EXITS: mcp_servers.config("exit")}}
        folder = app_dirs().config
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "mcp.json").write_text(json.dumps(config))
        panel.reload()
    wait_for(lambda: all(b.status.text() != "starting…" for b in panel.boxes.values()), 60)
    panel.boxes[MCP_BROKEN].log_button.setChecked(True)


def _engines(window, chrome) -> Iterator[PageState]:
    from app.engine.endpoints import save_endpoint
    from app.engine.remote import Endpoint

    save_endpoint(Endpoint("gpu-box llama-server", "http://gpu-box.local:8080/v1", "", None))
    view = window.engines_view
    view.refresh()
    window.navigate("engines")
    view.list.setCurrentRow(0)
    view.check_label.setText("✓ connected in 0.21 s: 3 models: Clover-35B-A3B-Q4_K_M, Qwen3.6-35B-A3B-Q4_K_M, "
                             "SmolLM2-135M-Instruct-Q8_0")
    view.status.setText("done · saved /home/someone/.local/share/clover-launcher/comparisons/"
                        "2026-01-01T12-00-00-comparison.md")
    settle()
    _scroll_to_top(window.models_view.page("engines"))
    yield PageState("engines", [_viewport(window.models_view.page("engines"))], view.use_button, chrome)


def _my_models(window, chrome) -> Iterator[PageState]:
    """My models with two tiny models in the models folder (one with a long name) and one opened by hand."""
    from tests.helpers.gguf_models import write_llama, write_qwen35moe

    folder = window.model.library.folder
    folder.mkdir(parents=True, exist_ok=True)
    for name, write in (("SmolLM2-135M-Instruct.Q4_1.gguf", write_llama),
                        ("Clover-35B-A3B-Instruct-imatrix-with-a-long-name-UD-Q4_K_XL.gguf", write_qwen35moe)):
        if not (folder / name).exists():
            write(folder / name)
    by_hand = folder.parent / "by-hand" / "Qwen3.6-35B-A3B-Q8_0.gguf"  # outside the models folder
    if not by_hand.exists():
        by_hand.parent.mkdir(parents=True, exist_ok=True)
        write_llama(by_hand)
    window.model.library.used(by_hand)
    window.navigate("my_models")
    settle(0.3)
    page = window.models_view.page("my_models")
    view = window.my_models_view
    yield PageState("my_models", [_viewport(page)], view.open_button, chrome)


def _downloads(window, chrome) -> Iterator[PageState]:
    """The Downloads place with three real set-ups from a slow local server: one paused (and offered
    by the resume banner, as after a restart), one that failed (a file no longer there), one running
    with its speed and time left. Each is cancelled and removed afterwards."""
    from tests.helpers.gguf_models import write_llama
    from tests.helpers.http_server import ServerState, serve

    model = write_llama(Path(tempfile.mkdtemp(prefix="clover-downloads-")) / "tiny.gguf")
    with open(model, "ab") as f:  # long enough to stay running while it is looked at (the plan reads 1 MiB)
        f.truncate(32 << 20)
    view, registry = window.setup_view, window.downloads.downloads
    clover, smol = "/Clover-35B-A3B-Instruct-2612-UD-Q4_K_XL.gguf", "/SmolLM2-135M-Instruct.Q4_1.gguf"
    with serve(ServerState(files={clover: model, smol: model}, bytes_per_second=400_000)) as base:
        jobs = []
        for name, path in (("Clover-35B-A3B-Instruct-2612-Thinking-UD-Q4_K_XL-imatrix", clover),
                           ("Qwen3.6-35B-A3B-Q4_K_M", "/gone/Qwen3.6-35B-A3B-Q4_K_M.gguf"),
                           ("SmolLM2-135M-Instruct.Q4_1", smol)):
            entry = view.add_url(name, base + path)
            job = registry.submit(name, "setup", {"id": entry.id, "url": base + path}, view._work(entry, base + path))
            registry.start(job)
            wait_for(lambda job=job: job.state == "failed" or job.stage == "download" and job.speed > 0, 60)
            if not jobs:
                registry.pause(job.id)
                wait_for(lambda job=job: job.state == "paused", 30)
            jobs.append(job)
        window.resume_banner.offer(jobs[:1])
        window.navigate("downloads")
        settle(0.5)
        page = window._page_of["downloads"]
        _scroll_to_top(page)
        rows = window.downloads_view.rows
        yield PageState("downloads", [_viewport(page)], rows[jobs[2].id].buttons["pause"], chrome)
        window.resume_banner.setVisible(False)
        for job in jobs:
            registry.cancel(job.id)
            wait_for(lambda job=job: job.state != "running", 30)
            registry.remove(job.id)
        settle(0.2)


def _picker(window) -> Iterator[PageState]:
    """The model picker's list with the models My models shows, each with its Tune button."""
    window.navigate("chat")
    window.model_bar.picker.open_popup()
    settle(0.3)
    yield PageState("picker", [window.model_bar.popup], None, [])
    window.model_bar.popup.hide()


def _tune(window, chrome) -> Iterator[PageState]:
    from app.machine.tune import Trial, chart_rows

    view = window.tune_view
    window.navigate("tune")
    view.show_model("/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    view.trials = []
    base = {"n_threads": 4, "n_ubatch": 512, "flash_attn": True, "type_k": "f16", "n_cpu_moe": 0}
    tried = [dict(base, n_threads=t) for t in (4, 2, 3, 5, 6)] + [dict(base, n_threads=3, flash_attn=False),
                                                                   dict(base, n_threads=3, type_k="q8_0"),
                                                                   dict(base, n_threads=3, n_ubatch=256)]
    speeds = (41.0, 44.5, 52.3, 47.9, 39.2, 49.0, 51.1, 52.0)
    for i, (settings, tps) in enumerate(zip(tried, speeds, strict=True)):  # as the sweep reports them
        view._on_progress("tune", (i + 1) / 12, f"{Trial(settings).label()}: {tps:.1f} tok/s, prompt 310 tok/s")
        view._on_trial((Trial(settings, gen_tps=tps, prompt_tps=310.0), base))
    for settings, tps in ((tried[2], 53.0), (base, 40.6)):  # the final runs, side by side
        view._on_trial((Trial(settings, gen_tps=tps, prompt_tps=310.0, repeat=True), base))
    view.chart.set_rows(chart_rows(view.trials, base, tried[2]))  # the choice, marked
    settle()
    _scroll_to_top(window._page_of["tune"])
    yield PageState("tune", [_viewport(window._page_of["tune"])], view.run_button, chrome)


def _hub(window) -> Iterator[PageState]:
    """The model browser on a fake Hub: two repositories found, one opened, every file planned."""
    from app.fetch import hub
    from tests.helpers.fake_hub import FakeRepo, fake_hub
    from tests.helpers.hub_repos import clover_hub_state

    state, files = clover_hub_state(Path(tempfile.mkdtemp(prefix="clover-hub-")))
    state.add(FakeRepo("someone-with-a-long-name/Clover-35B-A3B-Instruct-imatrix-GGUF", dict(files), downloads=900,
                       likes=12))
    old = os.environ.get("HF_ENDPOINT")
    with fake_hub(state) as url:
        os.environ["HF_ENDPOINT"] = url
        hub.CACHE._mem.clear()
        view = window.hub_view
        window.navigate("hub")
        wait_for(lambda: view.op is None or not view.op.running, 30)
        found: list = []
        view.query.setText("Clover-35B-A3B")
        view.search(view.query.text())
        wait_for(lambda: view.results.count() >= 2, 30)
        view.planned.connect(lambda *a: found.append(1))
        view.results.setCurrentRow(0)
        wait_for(lambda: bool(found), 60)
        settle(0.5)  # as a user sees it after opening the repository: the page brought it into view
        yield PageState("hub", [_viewport(window.models_view.page("hub"))], view.setup_button,
                        [window.model_bar, window.statusBar()])
    os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: offline, as a user without a network
    hub.CACHE._mem.clear()
    view.search("Qwen3.6")
    wait_for(lambda: view.op is None or not view.op.running, 30)
    settle(0.3)
    _scroll_to_top(window.models_view.page("hub"))
    yield PageState("hub-offline", [_viewport(window.models_view.page("hub"))], view.search_button,
                    [window.model_bar, window.statusBar()])
    if old is None:
        os.environ.pop("HF_ENDPOINT", None)
    else:
        os.environ["HF_ENDPOINT"] = old


def wait_for(condition: Callable[[], bool], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("the window did not get there in time")
        settle(0.05)


def make_window(theme_name: str = "light"):
    """The real window, styled, on a GPU-less machine (NVML not found), with the canned engine."""
    from app.ui.application import configure
    from app.ui.main_window import MainWindow
    from tests.ui.conftest import no_gpu

    app = QApplication.instance() or QApplication([])
    configure(app, theme_name)
    engine = canned_engine()
    return MainWindow(gpus=no_gpu(), engine=engine), engine


def logical_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """The window's size in logical pixels for a physical width x height at `scale`."""
    return round(width / scale), round(height / scale)
