"""My models: the GGUF files on this machine (the models folder and the files opened by hand, from
app/model/local_models.py), one card each: name, architecture, size, quantization, the plan for this
machine in a few words, when it was last used; Load, Tune (measure its fastest settings here, on the
Tune page's chart), Show in folder, and Delete, which asks first and says the size it frees. The list
is read again each time the page is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QShowEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMessageBox, QPushButton, QVBoxLayout, QWidget

from app.fetch.hub import quant_of
from app.model.local_models import _parts as parts_of
from app.model.local_models import size_words, when_words
from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.elided_label import ElidedLabel

if TYPE_CHECKING:
    from app.model.local_models import LocalModel
    from app.ui.controllers.model_controller import ModelController

_arches: dict[tuple[Path, int, float], str] = {}  # read once per file version


def architecture(path: Path) -> str:
    """The file's architecture as its header names it ("qwen35moe"), or "" where it cannot be read."""
    from app.gguf.gguf_read import read_header

    try:
        stat = path.stat()
        key = (path, stat.st_size, stat.st_mtime)
        if key not in _arches:
            _arches[key] = read_header(path).architecture or ""
        return _arches[key]
    except (OSError, ValueError):
        return ""


def ask_delete(parent: QWidget, text: str) -> bool:
    """Yes or no, before a file is deleted (tests replace MyModelsView.ask)."""
    answer = QMessageBox.question(parent, "Delete the model?", text,
                                  QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                                  QMessageBox.StandardButton.Cancel)
    return answer == QMessageBox.StandardButton.Yes


class MyModelsView(QWidget):
    load_requested = Signal(str)  # a file's path: load it and chat
    open_requested = Signal()  # "Open a GGUF file…"
    tune_requested = Signal(str)  # a file's path: tune it and show the chart

    def __init__(self, model: ModelController) -> None:
        super().__init__()
        self.setObjectName("page")
        self.model = model
        self.ask: Callable[[QWidget, str], bool] = ask_delete
        self.reveal: Callable[[Path], object] = lambda folder: QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
        layout = QVBoxLayout(self)
        theme.pad(layout, "space_2", "space_2", "space_2")
        head = QHBoxLayout()
        self.summary = props(QLabel(), objectName="subtitle", wordWrap=True)
        head.addWidget(self.summary, 1)
        self.open_button = props(QPushButton("Open a GGUF file…"), objectName="primary")
        self.open_button.setIcon(theme.icon("folder-open", "on_accent"))
        self.open_button.clicked.connect(self.open_requested.emit)
        head.addWidget(self.open_button)
        layout.addLayout(head)
        self.rows_box = QVBoxLayout()
        self.rows_box.setSpacing(theme.metric("space_2"))
        layout.addLayout(self.rows_box)
        layout.addStretch(1)
        self.rows: dict[Path, QFrame] = {}

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        self.refresh()
        super().showEvent(event)

    def refresh(self) -> None:
        """Read the models again and show one card each."""
        for row in self.rows.values():
            row.setParent(None)
            row.deleteLater()
        self.rows.clear()
        models, plans = self.model.local_models()
        total = sum(m.size for m in models)
        self.summary.setText(
            f"{len(models)} model{'s' if len(models) != 1 else ''} on this machine, {size_words(total)}, in "
            f"{self.model.library.folder} and the files opened by hand." if models else
            f"No model on this machine yet: set one up from Discover, or open a GGUF file. Models are kept in "
            f"{self.model.library.folder}.")
        for m in models:
            self.rows[m.path] = self._row(m, plans.get(m.path, ""))
            self.rows_box.addWidget(self.rows[m.path])

    def _row(self, m: LocalModel, plan: str) -> QFrame:
        card = props(QFrame(), objectName="modelRow")
        layout = QHBoxLayout(card)
        theme.pad(layout, "space_3", "space_2", "space_2")
        text = QVBoxLayout()
        text.setSpacing(theme.metric("space_half"))
        title = ElidedLabel(m.name, "modelRowTitle", Qt.TextElideMode.ElideMiddle)  # a long name never widens it
        title.setToolTip(str(m.path))
        text.addWidget(title)
        facts = [f for f in (architecture(m.path), size_words(m.size), quant_of(m.path.name)) if f]
        facts.append(when_words(m.last_used))
        if m.by_hand:
            facts.append("opened by hand")
        text.addWidget(props(QLabel(" · ".join(facts)), objectName="modelRowLine", wordWrap=True))
        if plan:
            text.addWidget(props(QLabel(f"Here: {plan}"), objectName="modelRowLine", wordWrap=True))
        layout.addLayout(text, 1)
        load = props(QPushButton("Load"), objectName="primary", toolTip="Load it and chat")
        load.clicked.connect(lambda: self.load_requested.emit(str(m.path)))
        tune = props(QPushButton("Tune"), objectName="rowAction",
                     toolTip="Measure the fastest settings for this model on this machine")
        tune.clicked.connect(lambda: self.tune_requested.emit(str(m.path)))
        show = props(QPushButton("Show in folder"), objectName="rowAction")
        show.clicked.connect(lambda: self.reveal(m.path.parent))
        delete = props(QPushButton("Delete"), objectName="rowDelete", toolTip=f"Delete the file ({size_words(m.size)})")
        delete.clicked.connect(lambda: self.delete(m))
        for button in (load, tune, show, delete):
            layout.addWidget(button)
        return card

    def delete(self, m: LocalModel) -> bool:
        """Delete a model's file (every part of a split one), once the user said yes."""
        info = self.model.info
        if info is not None and info.arch != "remote" and Path(info.path).resolve() == m.path:
            QMessageBox.information(self, "The model is loaded", "Eject the model before deleting its file.")
            return False
        parts = [p for p in parts_of(m.path) if p.is_file()]
        where = "\n".join(str(p) for p in parts)
        if not self.ask(self, f"Delete {m.name}? This frees {size_words(m.size)}.\n\n{where}"):
            return False
        for p in parts:
            p.unlink(missing_ok=True)
        self.refresh()
        return True
