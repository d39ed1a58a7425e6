"""Screenshots of the real window for people to look at (not a test): every page the layout test
walks (tests/ui/page_walk.py: a conversation with reasoning, code, a table and a long answer under a
long model name, with and without each side panel, the Tools panel's MCP servers; the model's
Details; Find a model with results; Set up; Scenarios; its BFCL part with two kept runs compared and
a case open; Engines; Tune), at each screen size, then the set-up page's plan picture for a
Clover-shaped model on a 16 GB and a 24 GB card and a Hub file that does not fit.

    python -m tests.ui.screenshots OUT_DIR [--theme light|dark] [--sizes 1024x640,1366x768]
    python -m tests.ui.screenshots docs/images --readme   # the README's chat, light and dark

Sizes are the screen's, in physical pixels: at QT_SCALE_FACTOR=1.5 a 1366x768 screen gives a
911x512 window. Run it under a real display (Xvfb and a window manager) to see the window as a user
would; offscreen it still writes the same grabs. The engine is a double that streams a canned
answer, so no model is needed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from tests.ui.page_walk import logical_size, make_window, settle, walk


def readme_pictures(out: Path) -> int:
    """The README's pictures: this script's chat at 1366x768, once per theme, each in a process of its own
    (a theme is the application's), saved as OUT/chat-THEME.png."""
    import shutil
    import sys

    for theme in ("light", "dark"):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "tests.ui.screenshots", tmp, "--theme", theme,
                            "--sizes", "1366x768"], check=True, stdout=subprocess.DEVNULL,
                           env={**os.environ, "QT_SCALE_FACTOR": "1"})
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(tmp) / f"chat-{theme}-1366x768-1x.png", out / f"chat-{theme}.png")
            print(out / f"chat-{theme}.png")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--theme", default="light", choices=("light", "dark"))
    parser.add_argument("--sizes", default="1024x640,1366x768",
                        help="screen sizes in physical pixels, comma-separated, or 'max'")
    parser.add_argument("--screen", action="store_true", help="also capture the whole X11 screen")
    parser.add_argument("--readme", action="store_true",
                        help="write OUT/chat-light.png and OUT/chat-dark.png, the chat at 1366x768 (the README's)")
    args = parser.parse_args()
    if args.readme:
        return readme_pictures(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CLOVER_HOME", tempfile.mkdtemp(prefix="clover-screens-"))

    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header
    from tests.helpers.clover_shape import write_clover_shaped

    scale = float(os.environ.get("QT_SCALE_FACTOR", "1"))
    window, engine = make_window(args.theme)
    window.show()
    size_tag = ""

    def shot(name: str) -> None:
        settle(0.3)
        path = args.out / f"{name}-{args.theme}-{size_tag}-{scale:g}x.png"
        window.grab().save(str(path))
        if args.screen:  # the whole screen, window frame and all (ImageMagick's import, under X11)
            subprocess.run(["import", "-window", "root", str(path.with_name(path.stem + "-screen.png"))],
                           check=False)
        print(path, f"{window.width()}x{window.height()} (minimum {window.minimumSizeHint().width()}x"
                    f"{window.minimumSizeHint().height()})")

    for size in args.sizes.split(","):
        if size == "max":
            window.showMaximized()
        else:
            width, height = (int(x) for x in size.split("x"))
            window.resize(*logical_size(width, height, scale))
        settle(0.3)
        size_tag = size
        for state in walk(window, engine):
            if state.name in ("details", "picker"):  # a pop-up: its own window
                menu = state.viewports[0]
                path = args.out / f"{state.name}-{args.theme}-{size_tag}-{scale:g}x.png"
                menu.grab().save(str(path))
                print(path)
                continue
            shot(state.name)
            if state.name == "chat-tools-open":  # the MCP servers, further down the Tools panel
                scroll = window.side_tabs.currentWidget()
                scroll.verticalScrollBar().setValue(window.tools_panel.mcp.y())
                shot("chat-tools-mcp")
                for box in window.tools_panel.mcp.boxes.values():  # tools left out; a server that exited
                    if box.notes.isVisibleTo(box):
                        scroll.verticalScrollBar().setValue(window.tools_panel.mcp.y() + box.y())
                        break
                shot("chat-tools-mcp-errors")
                scroll.verticalScrollBar().setValue(0)
            if state.name == "settings":  # the sections further down the Settings page
                scroll = window.settings_view.scroll_area
                for section in ("Engine", "Folders"):
                    scroll.verticalScrollBar().setValue(window.settings_form.sections[section].y())
                    shot(f"settings-{section.lower()}")
                scroll.verticalScrollBar().setValue(0)

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


def hub_pages(window, settle, shot) -> None:  # noqa: ANN001 (the helpers of main)
    """The model browser on a fake Hub: a repo with the small quants and a Clover-shaped file, planned
    for this machine (the recommended file marked), then for the same card with only 4 GiB of RAM
    free, where the Clover file does not fit and asks for confirmation before any download."""
    from dataclasses import replace

    from app.fetch import hub
    from app.machine.system_memory import SystemMemory
    from tests.helpers.fake_hub import fake_hub
    from tests.helpers.hub_repos import clover_hub_state

    state, _files = clover_hub_state(Path(tempfile.mkdtemp(prefix="clover-hub-")))
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
        view.machine = replace(view.machine, ram=SystemMemory(8 * 2**30, 4 * 2**30))
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
