"""The window fits small screens: with a long model name loaded, the settings and tools panels open
and an error showing, its minimum size stays at most 1000x640 logical pixels, it fits a 1366x768
laptop at 125 % and a 1080p one at 150 %, and it comes back on a visible screen."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

LONG_NAME = "Clover-35B-A3B-Preview-UD-Q4_K_XL-imatrix-calibrated-with-a-very-long-publisher-suffix " * 2
TASKBAR = 48  # physical pixels a desktop keeps for its panel

PROBE = r"""
import json, os, sys
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.ui.application import configure
configure(app)
from tests.ui.test_layout import crowd
from tests.ui.conftest import no_gpu
from app.ui.main_window import MainWindow
w = MainWindow(gpus=no_gpu())
w.show()
crowd(w)
app.processEvents()
m = w.minimumSizeHint().expandedTo(w.minimumSize())
print(json.dumps({"w": m.width(), "h": m.height(), "dpr": w.devicePixelRatio()}))
w.close()
"""


def crowd(window) -> None:
    """A long model name, both panels open, an error shown, every page visited."""
    from app.engine.contract import ModelInfo
    from app.machine.llama_load import LoadSettings
    from app.ui.base.messages import messages

    info = ModelInfo("/models/" + LONG_NAME.replace(" ", "-") + ".gguf", LONG_NAME, "qwen35moe", 131072, True, False,
                     LoadSettings(), tools_in_template=False)
    window.model._on_loaded(info)
    window.tools_panel.use_tools.setChecked(True)
    window.tools_panel._load_example("weather")
    window.composer.settings_button.setChecked(True)
    window.composer.tools_button.setChecked(True)
    window.side_panel.setVisible(True)
    messages().error("A long error " * 30)
    for page in ("hub", "setup", "scenarios", "engines", "welcome", "chat"):
        window.navigate(page)


def test_minimum_size_with_everything_open(qtbot, make_window):
    window = make_window()
    crowd(window)
    qtbot.wait(20)
    m = window.minimumSizeHint().expandedTo(window.minimumSize())
    assert m.width() <= 1000 and m.height() <= 640, (m.width(), m.height())
    assert "⚠" in window.composer.chips.text() and "ignores tools" in window.composer.chips.text()
    assert window.model_bar.label.toolTip().startswith(LONG_NAME.split()[0])
    window.resize(m)  # and it can be made that small
    qtbot.wait(20)
    assert window.width() <= 1000


@pytest.mark.slow  # a window in a subprocess per scale
@pytest.mark.parametrize("scale, screen", [(1.25, (1366, 768)), (1.5, (1920, 1080))])
def test_fits_laptop_screens_when_scaled(scale, screen, clover_home):
    env = {"QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": str(scale), "CLOVER_HOME": str(clover_home),
           "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    size = json.loads(out.stdout.strip().splitlines()[-1])
    assert size["dpr"] == pytest.approx(scale)
    assert size["w"] * scale <= screen[0] and size["h"] * scale <= screen[1] - TASKBAR, (size, screen)


def test_window_state_is_saved_and_restored_onto_a_visible_screen(qtbot, make_window):
    from PySide6.QtCore import QRect
    from PySide6.QtGui import QGuiApplication

    window = make_window()
    window.resize(700, 500)  # inside the offscreen platform's 800x600 screen
    window.close()  # saves geometry and layout
    from app.base.settings import Settings

    saved = Settings.load()
    assert saved.get("ui.geometry") and saved.get("ui.state")
    again = make_window()
    assert (again.width(), again.height()) == (700, 500)
    # a window saved on a screen that is gone (far right) comes back onto the screen there is
    again.setGeometry(QRect(9000, 9000, 3000, 2000))
    again.fit_to_screen()
    area = QGuiApplication.primaryScreen().availableGeometry()
    assert area.contains(again.frameGeometry().topLeft())
    assert again.width() <= area.width() and again.height() <= area.height()
