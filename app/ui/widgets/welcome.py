"""The first page: what this machine has (GPUs, the llama.cpp build, the 16/24 GB guidance), the GPU
runtime's install when that is what stands between the card and CUDA, Find a model, and the last
model again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QProgressBar, QPushButton, QScrollArea, QVBoxLayout, QWidget

from app import APP_NAME
from app.ui.base.messages import messages
from app.ui.base.ops import Op
from app.ui.base.props import props

if TYPE_CHECKING:
    from app.machine.gpu import GpuProbe
    from app.machine.llama_backend import LlamaBuild


def _card(title: str, lines: list[tuple[str, str]]) -> QFrame:
    card = props(QFrame(), objectName="card")
    layout = QVBoxLayout(card)
    layout.setContentsMargins(16, 12, 16, 12)
    layout.addWidget(props(QLabel(title), objectName="cardTitle"))
    for style, text in lines:
        label = props(QLabel(text), objectName=style)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(label)
    return card


def machine_lines(gpus: GpuProbe, llama: LlamaBuild | None, llama_error: str | None) -> list[tuple[str, str]]:
    from app.machine.gpu_runtime import readiness

    lines: list[tuple[str, str]] = []
    if gpus.has_gpu:
        for g in gpus.gpus:
            lines.append(("fact", f"{g.name}: {g.total_gib:.1f} GiB, {g.free_gib:.1f} GiB free"))
    else:
        lines.append(("warning", "No NVIDIA GPU found: models run on the CPU."))  # why: Details and doctor
    if llama is not None:
        build = "CUDA" if llama.cuda else "CPU only"
        lines.append(("fact", f"llama.cpp (llama-cpp-python {llama.version}): {build} build; "
                              f"runs on {llama.backend_choice()}"))
        ready = readiness(gpus, llama)
        if gpus.has_gpu and ready.level != "ok":
            lines.append(("warning", ready.text))
    else:
        lines.append(("warning", f"llama.cpp could not be loaded: {llama_error}"))
    return lines


def gpu_advice(gpus: GpuProbe) -> str:
    """The 16 GB / 24 GB guidance in words, for this machine's card (or the lack of one)."""
    if not gpus.has_gpu:
        return ("Without an NVIDIA GPU, Clover runs on the CPU at a few tokens per second. A 24 GB card runs it "
                "entirely on the GPU (about 200 tokens/s on an RTX 4090); a 16 GB card keeps the experts of about "
                "ten blocks in system RAM (about half that speed).")
    gib = max(g.total_gib for g in gpus.gpus)
    if gib >= 23:
        return f"A {gib:.0f} GiB card: Clover fits entirely on the GPU with its full context."
    if gib >= 15:
        return (f"A {gib:.0f} GiB card: the experts of some blocks stay in system RAM; expect about half the speed "
                "of a 24 GB card. Find a model shows the plan for each file.")
    return (f"A {gib:.0f} GiB card: most experts stay in system RAM and speed depends on the CPU; a smaller "
            "quantization helps. Find a model shows the plan for each file.")


class WelcomePage(QScrollArea):
    find_requested = Signal()
    load_requested = Signal(str)  # the last model's path

    def __init__(self, gpus: GpuProbe, llama: LlamaBuild | None, llama_error: str | None) -> None:
        super().__init__()
        self.gpus, self.llama = gpus, llama
        self.runtime_op: Op | None = None
        self._last = ""
        props(self, widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        page = props(QWidget(), objectName="page")
        wl = QVBoxLayout(page)
        wl.addWidget(props(QLabel(APP_NAME), objectName="title"))
        intro = props(QLabel("Clover-35B-A3B on your own NVIDIA card. “Find a model” searches the Hugging Face Hub and "
                             "plans every file for this machine before anything is downloaded; “Open model…” takes a "
                             "GGUF you have."), objectName="subtitle")
        intro.setWordWrap(True)
        wl.addWidget(intro)
        lines = machine_lines(gpus, llama, llama_error) + [("fact", gpu_advice(gpus))]
        self.machine_card = _card("This machine", lines)
        wl.addWidget(self.machine_card)
        self.runtime_button = props(QPushButton(), objectName="primary")
        self.runtime_button.clicked.connect(self.install_gpu_runtime)
        self.runtime_bar = props(QProgressBar(), maximum=1000, textVisible=False)
        self.runtime_status = props(QLabel(), objectName="fact", wordWrap=True)
        wl.addWidget(self.runtime_button, 0, Qt.AlignmentFlag.AlignLeft)
        wl.addWidget(self.runtime_bar)
        wl.addWidget(self.runtime_status)
        for w in (self.runtime_button, self.runtime_bar, self.runtime_status):
            w.setVisible(False)
        self._show_runtime_offer()
        self.find_button = props(QPushButton("Find a model"), objectName="primary")
        self.find_button.clicked.connect(self.find_requested.emit)
        wl.addWidget(self.find_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.last_model_button = QPushButton("")
        self.last_model_button.setVisible(False)
        self.last_model_button.clicked.connect(lambda: self.load_requested.emit(self._last))
        wl.addWidget(self.last_model_button, 0, Qt.AlignmentFlag.AlignLeft)
        wl.addStretch(1)
        self.setWidget(page)

    def offer_last_model(self, path: str) -> None:
        self._last = path
        self.last_model_button.setText(f"Load {Path(path).name} again")
        self.last_model_button.setVisible(True)

    def _show_runtime_offer(self) -> None:
        """The cuBLAS runtime download, offered when it is what stands between this GPU and CUDA."""
        from app.machine.gpu_runtime import files_for_platform, readiness

        ready = readiness(self.gpus, self.llama) if self.gpus.has_gpu else None
        offer = ready is not None and ready.can_install
        if offer:
            size = sum(f.size for f in files_for_platform()) / 1e6
            self.runtime_button.setText(f"Install the GPU runtime ({size:.0f} MB)")
        self.runtime_button.setVisible(offer)

    def install_gpu_runtime(self) -> None:
        """Download, verify and unpack the runtime in the background, with progress and Cancel."""
        from app.machine import gpu_runtime

        if self.runtime_op is not None:
            self.runtime_op.cancel()
            return

        def done(folder: Path) -> None:
            self.runtime_op = None
            self.runtime_button.setVisible(False)
            self.runtime_bar.setVisible(False)
            self.runtime_status.setText(f"The GPU runtime is installed in {folder}. Restart Clover Launcher to use "
                                        "the GPU.")
            messages().info("GPU runtime installed: restart to use the GPU")

        def failed(exc: BaseException) -> None:
            self.runtime_op = None
            self.runtime_button.setText("Retry the GPU runtime download")
            self.runtime_bar.setVisible(False)
            self.runtime_status.setText(f"The GPU runtime was not installed: {exc}")

        def progress(_step: str, fraction: float, text: str) -> None:
            self.runtime_bar.setRange(0, 0 if fraction < 0 else 1000)
            self.runtime_bar.setValue(int(max(fraction, 0) * 1000))
            self.runtime_status.setText(text)

        self.runtime_bar.setVisible(True)
        self.runtime_status.setVisible(True)
        self.runtime_button.setText("Cancel")
        self.runtime_op = (Op(self, lambda ctx: gpu_runtime.install(ctx.report, ctx.is_cancelled), name="GPU runtime")
                           .progress(progress).success(done).failure(failed).run())
