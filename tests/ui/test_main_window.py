"""The main window opens, shows what was found, and is captured as a screenshot for people to look at."""

from __future__ import annotations

from app.machine import gpu
from app.ui.application import configure
from app.ui.main_window import MainWindow
from tests.helpers.fakes import FakeNVML, NVMLError_LibraryNotFound, rtx_4090


def _texts(widget) -> str:
    from PySide6.QtWidgets import QLabel

    return "\n".join(label.text() for label in widget.findChildren(QLabel))


def test_main_window_opens_and_screenshot(qtbot, qapp, artifacts_dir):
    configure(qapp)
    window = MainWindow(gpus=gpu.probe_with(FakeNVML([rtx_4090()])))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    assert window.windowTitle() == "Clover Launcher"
    text = _texts(window)
    assert "NVIDIA GeForce RTX 4090: 24.0 GiB, 23.6 GiB free" in text
    assert "llama.cpp (llama-cpp-python 0.3.36)" in text
    assert "RTX 4090" in window.status_label.text()

    shot = window.grab()
    assert not shot.isNull() and shot.width() >= 780  # the offscreen screen is 800 px wide: the window fits it
    path = artifacts_dir / "main_window.png"
    assert shot.save(str(path))
    assert path.stat().st_size > 5000


def test_main_window_without_gpu_says_cpu_mode(qtbot, qapp):
    window = MainWindow(gpus=gpu.probe_with(FakeNVML(init_error=NVMLError_LibraryNotFound("not found"))))
    qtbot.addWidget(window)
    window.show()
    assert "No NVIDIA GPU found" in _texts(window)
    assert "CPU mode" in window.status_label.text()


def test_the_load_first_banner_goes_when_a_model_loads(qtbot, make_window):
    from tests.ui.page_walk import CannedEngine

    engine = CannedEngine()
    window = make_window(engine=engine)
    window.input.setPlainText("hello")
    window.send()
    assert window.error_banner.isVisible() and window.error_banner.text().startswith(
        "Load a model first (Find a model, or Open model…)")
    assert "…." not in window.error_banner.text()
    from app.machine.llama_load import LoadSettings

    window._on_loaded(engine.load("/models/m.gguf", LoadSettings()))
    assert not window.error_banner.isVisible()
    assert "NVML" not in window.model_bar.label.text() and "NVML" not in window.status_label.text()
