"""The welcome page offers the GPU runtime download when it is what stands between the GPU and
CUDA, runs it in the background with progress, and says what to do next or what went wrong.
(The download itself is tested against a local package index in tests/machine/test_gpu_runtime.py.)"""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from app.machine import gpu, gpu_runtime
from app.machine.gpu_runtime import Readiness
from tests.helpers.fakes import FakeNVML, rtx_4090


def offer(monkeypatch, install) -> None:
    monkeypatch.setattr(gpu_runtime, "readiness", lambda gpus, build: Readiness(
        "action", "The GPU runtime is needed", can_install=True))
    monkeypatch.setattr(gpu_runtime, "install", install)


def test_the_runtime_is_offered_installed_with_progress_and_then_restart_is_asked(qtbot, make_window, monkeypatch,
                                                                                 tmp_path):
    gate = threading.Event()

    def install(progress, cancel):
        progress("download", 0.5, "210 of 421 MB")
        gate.wait(10)
        progress("unpack", 1.0, "unpacked")
        return tmp_path / "gpu-runtime"

    offer(monkeypatch, install)
    w = make_window(gpus=gpu.probe_with(FakeNVML([rtx_4090()])))
    size = sum(f.size for f in gpu_runtime.files_for_platform()) / 1e6
    page = w.welcome
    qtbot.waitUntil(page.runtime_button.isVisible)  # offered once the window has painted its first frame
    assert page.runtime_button.text() == f"Install the GPU runtime ({size:.0f} MB)"
    qtbot.mouseClick(w.welcome.runtime_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.welcome.runtime_status.text() == "210 of 421 MB", timeout=5000)
    assert page.runtime_bar.isVisible() and page.runtime_bar.value() == 500 and page.runtime_button.text() == "Cancel"
    gate.set()
    qtbot.waitUntil(lambda: "Restart Clover Launcher" in w.welcome.runtime_status.text(), timeout=5000)
    assert str(tmp_path / "gpu-runtime") in w.welcome.runtime_status.text() and not w.welcome.runtime_button.isVisible()
    w.close()


def test_a_failed_or_cancelled_download_says_so_and_offers_a_retry(qtbot, make_window, monkeypatch):
    started = threading.Event()

    def install(progress, cancel):
        started.set()
        while not cancel():
            threading.Event().wait(0.02)
        raise gpu_runtime.GpuRuntimeError("cancelled; the part file is kept, a retry resumes")

    offer(monkeypatch, install)
    w = make_window(gpus=gpu.probe_with(FakeNVML([rtx_4090()])))
    qtbot.waitUntil(w.welcome.runtime_button.isVisible)
    qtbot.mouseClick(w.welcome.runtime_button, Qt.MouseButton.LeftButton)
    assert started.wait(5)
    qtbot.mouseClick(w.welcome.runtime_button, Qt.MouseButton.LeftButton)  # "Cancel"
    qtbot.waitUntil(lambda: "not installed" in w.welcome.runtime_status.text(), timeout=5000)
    assert "a retry resumes" in w.welcome.runtime_status.text() and w.welcome.runtime_button.text().startswith("Retry")
    w.close()


def test_no_offer_without_a_gpu(make_window):
    w = make_window()
    assert not w.welcome.runtime_button.isVisible() and not w.welcome.runtime_bar.isVisible()
    w.close()
