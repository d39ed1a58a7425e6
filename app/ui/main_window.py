"""The main window: for now a home page with what the launcher found on this machine."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QMainWindow, QVBoxLayout, QWidget

from app import APP_NAME
from app.gpu import GpuProbe, probe
from app.llama_backend import LlamaBuild, build_info


def _card(title: str, lines: list[tuple[str, str]]) -> QFrame:
    card = QFrame(objectName="card")
    layout = QVBoxLayout(card)
    layout.setContentsMargins(16, 12, 16, 12)
    heading = QLabel(title, objectName="cardTitle")
    layout.addWidget(heading)
    for style, text in lines:
        label = QLabel(text, objectName=style)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(label)
    return card


def machine_lines(gpus: GpuProbe, llama: LlamaBuild | None, llama_error: str | None) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    if gpus.has_gpu:
        for g in gpus.gpus:
            lines.append(("fact", f"{g.name}: {g.total_gib:.1f} GiB, {g.free_gib:.1f} GiB free"))
    else:
        lines.append(("warning", f"No NVIDIA GPU found ({gpus.message}). Models run on the CPU, slowly."))
    if llama is not None:
        build = "CUDA" if llama.cuda else "CPU only"
        lines.append(("fact", f"llama.cpp (llama-cpp-python {llama.version}): {build} build"))
        if gpus.has_gpu and not llama.cuda:
            lines.append(("warning", "A GPU is present but this llama.cpp has no CUDA: re-run the set-up "
                                     "with the CUDA toolkit installed."))
    else:
        lines.append(("warning", f"llama.cpp could not be loaded: {llama_error}"))
    return lines


class MainWindow(QMainWindow):
    def __init__(self, gpus: GpuProbe | None = None) -> None:
        super().__init__()
        self.setWindowTitle(APP_NAME)
        self.resize(960, 640)
        self.gpus = gpus if gpus is not None else probe()
        try:
            llama, llama_error = build_info(), None
        except Exception as exc:  # shown in the window, not a crash: the rest of the app still works
            llama, llama_error = None, f"{type(exc).__name__}: {exc}"

        page = QWidget(objectName="page")
        layout = QVBoxLayout(page)
        layout.setContentsMargins(32, 28, 32, 28)
        layout.setSpacing(16)
        layout.addWidget(QLabel(APP_NAME, objectName="title"))
        layout.addWidget(QLabel("Clover-35B-A3B on your own NVIDIA card, in one click.", objectName="subtitle"))
        self.machine_card = _card("This machine", machine_lines(self.gpus, llama, llama_error))
        layout.addWidget(self.machine_card)
        layout.addStretch(1)
        self.setCentralWidget(page)
        self.status_label = QLabel(self.gpus.summary(), objectName="fact")
        self.statusBar().addWidget(self.status_label, 1)
