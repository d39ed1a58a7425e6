"""The real main window for UI tests: styled, shown, no GPU (NVML "not found"), optional engine double."""

from __future__ import annotations

import pytest

from app.machine import gpu
from tests.helpers.fakes import FakeNVML, NVMLError_LibraryNotFound


def no_gpu():
    return gpu.probe_with(FakeNVML(init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found")))


@pytest.fixture()
def make_window(qtbot):
    from PySide6.QtWidgets import QApplication

    from app.ui.application import configure
    from app.ui.main_window import MainWindow

    def make(**kwargs) -> MainWindow:
        configure(QApplication.instance())
        window = MainWindow(gpus=kwargs.pop("gpus", None) or no_gpu(), **kwargs)
        qtbot.addWidget(window)
        window.show()
        return window

    return make
