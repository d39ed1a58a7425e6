"""Clipping cannot go unnoticed: every page (the chat with a long answer and code, with and without
each side panel, and the Settings panel's Local server section with the server running; Find a model
with results; Engines; Set up; Scenarios, and its BFCL part with kept runs compared and a case open;
Tune; Downloads with a running, a paused and a failed set-up; the model's Details) at 1024x640,
1366x768, and a 1366x768 screen at QT_SCALE_FACTOR=1.5 (911x512 logical pixels). A visible widget
that reaches past its page's viewport, or past a parent that cuts it off, fails; so does a page
whose primary button is out of view before any scrolling. One process per scale factor (Qt reads it
once)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.fetch.bfcl_dataset import local_folder
from tests.conftest import ROOT
from tests.ui.page_walk import SIZES

PROBE = r"""
import json, sys
from tests.ui.page_walk import make_window, walk, problems, logical_size, settle
sizes = json.loads(sys.argv[1])
window, engine = make_window()
window.show()
report = []
for width, height, scale in sizes:
    w, h = logical_size(width, height, scale)
    window.resize(w, h)
    settle(0.3)
    size = f"{width}x{height}@{scale}x"
    if (window.width(), window.height()) != (w, h):
        report.append(f"{size}: the window cannot be {w}x{h}, it stays {window.width()}x{window.height()}")
    for state in walk(window, engine):
        report += [f"{size} {p}" for p in problems(window, state)]
        report.append(f"VISITED {size} {state.name}")
print("REPORT " + json.dumps(report))
window.close()
"""


@pytest.mark.slow  # a fresh window per size in a subprocess, every page walked: about 12 s a scale
@pytest.mark.parametrize("scale", sorted({s for _w, _h, s in SIZES}))
@pytest.mark.timeout(900)  # the probe's own 10-min limit speaks first
def test_no_page_clips_or_hides_its_button(scale, clover_home):
    sizes = [s for s in SIZES if s[2] == scale]
    env = {"QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": str(scale), "CLOVER_HOME": str(clover_home),
           "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(clover_home)}
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(sizes)], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line.removeprefix("REPORT "))
    visited = [r for r in report if r.startswith("VISITED ")]
    found = [r for r in report if not r.startswith("VISITED ")]
    pages = {"welcome", "chat", "chat-settings-open", "chat-tools-open", "settings-server", "details", "picker", "hub",
             "hub-offline", "setup", "scenarios", "engines", "tune", "my_models", "downloads", "settings"}
    if local_folder() is not None:  # the BFCL part with kept runs needs the test files (bfcl-eval)
        pages |= {"bfcl", "bfcl-runs", "bfcl-case"}
    for width, height, _scale in sizes:
        assert {v.split()[-1] for v in visited if f" {width}x{height}@" in v} == pages
    assert "Negative sizes" not in out.stderr, out.stderr[-2000:]
    assert not found, f"{len(found)} problem(s):\n" + "\n".join(found)
