"""The first page: three first steps, each one click from a working chat (set up Clover-35B-A3B
with its plan for this machine in a few words, try the small test model, open a GGUF file), what
this machine has in a few plain words, the GPU runtime's install when that is what stands between
the card and CUDA, and the last model again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app import APP_NAME
from app.ui.base import theme
from app.ui.base.messages import messages
from app.ui.base.ops import Op
from app.ui.base.props import props

if TYPE_CHECKING:
    from app.machine.gpu import GpuProbe
    from app.machine.llama_backend import LlamaBuild

# catalog entries (resources/catalog.json)
CLOVER, BASE_MODEL, TEST_MODEL = "clover-35b-a3b", "qwen3.6-35b-a3b", "smollm2-135m"


def _card(title: str, lines: list[tuple[str, str]]) -> QFrame:
    card = props(QFrame(), objectName="card")
    layout = QVBoxLayout(card)
    theme.pad(layout, "space_4", "space_3", "space_1")
    layout.addWidget(props(QLabel(title), objectName="cardTitle"))
    for style, text in lines:
        label = props(QLabel(text), objectName=style, wordWrap=True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(label)
    return card


def machine_lines(gpus: GpuProbe, llama: LlamaBuild | None, llama_error: str | None) -> list[tuple[str, str]]:
    """What this machine has and what runs where, each fact said once."""
    from app.machine.gpu_runtime import readiness

    lines: list[tuple[str, str]] = []
    load = llama.load if llama is not None else None
    variant = f" ({load.cpu_variant})" if load is not None and load.cpu_variant else ""
    if gpus.has_gpu:
        for g in gpus.gpus:
            lines.append(("fact", f"{g.name}: {g.total_gib:.1f} GiB, {g.free_gib:.1f} GiB free"))
    else:
        lines.append(("warning", f"No NVIDIA GPU: models run on the CPU{variant}."))  # why: Details and doctor
    if llama is None:
        lines.append(("warning", f"llama.cpp could not be loaded: {llama_error}"))
        return lines
    if gpus.has_gpu and llama.cuda_loaded:
        lines.append(("fact", f"Models run on the GPU; what does not fit stays in system RAM, on the CPU{variant}."))
    elif gpus.has_gpu:
        lines.append(("warning", readiness(gpus, llama).text))
    lines.append(("fact", f"llama.cpp from llama-cpp-python {llama.version}."))
    return lines


def clover_words(gpus: GpuProbe) -> str:
    """Clover-35B-A3B on this machine, in a few words."""
    if not gpus.has_gpu:
        return "Here it runs on the CPU, a few tokens per second; a 24 GB card runs it all on the GPU."
    gib = max(g.total_gib for g in gpus.gpus)
    if gib >= 23:
        return f"Here: all on the {gib:.0f} GiB card, with its full context."
    if gib >= 15:
        return f"Here: the {gib:.0f} GiB card holds most of it, some experts in system RAM (about half the speed)."
    return f"Here: a {gib:.0f} GiB card, most experts in system RAM; the speed depends on the CPU."


def featured(gpus: GpuProbe) -> list[tuple[str, str, str]]:
    """(catalog id, title, its plan here in a few words): the model this app is for first, the model it
    is derived from to compare, the test model for a first try."""
    return [(CLOVER, "Clover-35B-A3B", clover_words(gpus)),
            (BASE_MODEL, "Qwen3.6-35B-A3B, to compare",
             "The model Clover is derived from: the same size and the same plan here, upstream llama.cpp as it is."),
            (TEST_MODEL, "SmolLM2-135M, the test model", "About 100 MB: a chat in under a minute, to see it work.")]


def step_card(title: str, line: str, button: QPushButton) -> QFrame:
    """One first step: what it is, in a line, and its button."""
    card = props(QFrame(), objectName="firstStep")
    row = QHBoxLayout(card)
    theme.pad(row, "space_4", "space_3", "space_3")
    text = QVBoxLayout()
    text.setSpacing(theme.metric("space_half"))
    text.addWidget(props(QLabel(title), objectName="firstStepTitle", wordWrap=True))
    text.addWidget(props(QLabel(line), objectName="firstStepLine", wordWrap=True))
    row.addLayout(text, 1)
    row.addWidget(button, 0, Qt.AlignmentFlag.AlignVCenter)
    return card


class WelcomePage(QScrollArea):
    find_requested = Signal()
    load_requested = Signal(str)  # the last model's path
    setup_requested = Signal(str)  # a catalog entry's id: set it up (or load it, when it is ready)
    open_requested = Signal()  # open a GGUF file

    def __init__(self, gpus: GpuProbe) -> None:
        super().__init__()
        self.gpus: GpuProbe = gpus
        self.llama: LlamaBuild | None = None
        self.runtime_op: Op | None = None
        self._last = ""
        props(self, widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        page = props(QWidget(), objectName="page")
        wl = QVBoxLayout(page)
        wl.setSpacing(theme.metric("space_2"))
        wl.addWidget(props(QLabel(APP_NAME), objectName="title"))
        wl.addWidget(props(QLabel("Start with one of these; each ends in a chat."), objectName="subtitle",
                           wordWrap=True))
        self.clover_button = props(QPushButton("Set up"), objectName="primary")
        self.clover_button.clicked.connect(lambda: self.setup_requested.emit(CLOVER))
        self.test_button = QPushButton("Try it")
        self.test_button.clicked.connect(lambda: self.setup_requested.emit(TEST_MODEL))
        self.open_button = QPushButton("Open…")
        self.open_button.clicked.connect(self.open_requested.emit)
        self.last_model_button = props(QPushButton("Load"), objectName="primary")
        self.last_model_button.clicked.connect(lambda: self.load_requested.emit(self._last))
        self.last_model_step = step_card("", "The model you used last time.", self.last_model_button)
        self.last_model_title = self.last_model_step.findChild(QLabel, "firstStepTitle")
        self.last_model_step.setVisible(False)
        wl.addWidget(self.last_model_step)
        for title, line, button in (
                ("Set up Clover-35B-A3B", clover_words(gpus), self.clover_button),
                ("Try the small test model", "SmolLM2-135M, about 100 MB: a chat in under a minute, to see it work.",
                 self.test_button),
                ("Open a GGUF file", "A model you already have; My models remembers it.", self.open_button)):
            wl.addWidget(step_card(title, line, button))
        self.machine_card = _card("This machine", [])  # its lines come with the build (set_build)
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
        self.find_button = props(QPushButton("Browse more models"), objectName="welcomeLink")
        self.find_button.clicked.connect(self.find_requested.emit)
        wl.addWidget(self.find_button, 0, Qt.AlignmentFlag.AlignLeft)
        wl.addStretch(1)
        self.setWidget(page)

    def set_build(self, llama: LlamaBuild | None, llama_error: str | None) -> None:
        """The machine's lines and the GPU runtime offer, once llama.cpp's build is read (after the
        window's first paint: loading llama.cpp takes a quarter of a second)."""
        self.llama = llama
        layout = cast(QVBoxLayout, self.machine_card.layout())
        for style, text in machine_lines(self.gpus, llama, llama_error):
            label = props(QLabel(text), objectName=style, wordWrap=True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            layout.addWidget(label)
        self._show_runtime_offer()

    def offer_last_model(self, path: str) -> None:
        self._last = path
        if self.last_model_title is not None:
            self.last_model_title.setText(f"Load {Path(path).name} again")
        self.last_model_step.setVisible(True)

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
