"""The model picker at the top of the chat: a button that names the loaded model and its state, and
opens a pop-up list of the models on this machine (name; size, the plan in a few words, last used),
each with a Tune button (measure its fastest settings), and "Open a file…" and "Find more models" at
its foot. Which files, and their facts, come from
app/model/local_models.py through whoever fills the list (`set_models`); the picker only shows them
and says what was chosen.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.model.local_models import size_words, when_words
from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.elided_label import ElidedLabel

if TYPE_CHECKING:
    from app.model.local_models import LocalModel

PATH = Qt.ItemDataRole.UserRole


class _Row(QWidget):
    """One model in the list: its name, and its facts in a muted line under it."""

    def __init__(self, model: LocalModel, plan: str, current: bool) -> None:
        super().__init__()
        row = QHBoxLayout(self)
        space = theme.metric("space_1")
        row.setContentsMargins(theme.metric("space_2"), space, space, space)
        row.setSpacing(theme.metric("space_2"))
        box = QVBoxLayout()
        box.setSpacing(0)
        self.name = ElidedLabel(model.name + ("  (loaded)" if current else ""), "modelRowName")
        self.facts = ElidedLabel(model_facts(model, plan), "modelRowFacts", Qt.TextElideMode.ElideRight)
        self.facts.setToolTip(f"{model.path}\n{self.facts.full_text()}")
        box.addWidget(self.name)
        box.addWidget(self.facts)
        row.addLayout(box, 1)
        self.tune_button = props(QToolButton(), objectName="rowTune", autoRaise=True,
                                 toolTip=f"Tune {model.name}: measure its fastest settings on this machine")
        self.tune_button.setIcon(theme.icon("gauge", "icon", theme.metric("icon_sm")))
        row.addWidget(self.tune_button, 0, Qt.AlignmentFlag.AlignVCenter)


def model_facts(model: LocalModel, plan: str) -> str:
    """A row's second line: "98 MB · all on GPU · 8k context · used 3 h ago"."""
    return " · ".join(x for x in (size_words(model.size), plan, when_words(model.last_used),
                                  "opened by hand" if model.by_hand else "") if x)


class ModelPopup(QFrame):
    """The pop-up under the picker: the list, then Open a file… and Find more models."""

    chosen = Signal(str)  # a model's path; the foot's buttons are connected by the window
    tune_requested = Signal(str)  # a model's path: tune it

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("modelPopup")
        box = QVBoxLayout(self)
        space = theme.metric("space_1")
        box.setContentsMargins(space, space, space, space)
        box.setSpacing(space)
        self.list = props(QListWidget(), objectName="modelList")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.itemClicked.connect(self._on_clicked)
        self.list.itemActivated.connect(self._on_clicked)
        box.addWidget(self.list, 1)
        self.empty = props(QLabel("No model on this machine yet: open a GGUF file or find one to download."),
                           objectName="modelListEmpty", wordWrap=True, visible=False)
        box.addWidget(self.empty)
        foot = QHBoxLayout()
        self.open_button = props(QPushButton("Open a file…"), objectName="popupAction")
        self.open_button.clicked.connect(self.hide)
        self.find_button = props(QPushButton("Find more models"), objectName="popupAction")
        self.find_button.clicked.connect(self.hide)
        foot.addWidget(self.open_button)
        foot.addWidget(self.find_button)
        foot.addStretch(1)
        box.addLayout(foot)
        self._restyle()
        theme.notifier().changed.connect(self._restyle)

    def _restyle(self) -> None:
        self.open_button.setIcon(theme.icon("folder-open", "icon", theme.metric("icon_sm")))
        self.find_button.setIcon(theme.icon("search", "icon", theme.metric("icon_sm")))

    def set_models(self, models: list[LocalModel], plans: dict[Path, str], current: Path | None) -> None:
        self.list.clear()
        for m in models:
            item = QListWidgetItem()
            item.setData(PATH, str(m.path))
            row = _Row(m, plans.get(m.path, ""), m.path == current)
            row.tune_button.clicked.connect(lambda _=False, path=str(m.path): self._tune(path))
            item.setSizeHint(QSize(0, row.sizeHint().height()))
            self.list.addItem(item)
            self.list.setItemWidget(item, row)
            if m.path == current:
                item.setSelected(True)
        self.empty.setVisible(not models)
        self.list.setVisible(bool(models))

    def rows(self) -> list[tuple[str, str, str]]:
        """(path, name, facts) of each row, top to bottom, as shown."""
        out = []
        for i in range(self.list.count()):
            item = self.list.item(i)
            row = self.list.itemWidget(item)
            assert isinstance(row, _Row)
            out.append((str(item.data(PATH)), row.name.full_text(), row.facts.full_text()))
        return out

    def _tune(self, path: str) -> None:
        self.hide()
        self.tune_requested.emit(path)

    def _on_clicked(self, item: QListWidgetItem) -> None:
        self.hide()
        self.chosen.emit(str(item.data(PATH)))

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        if event.key() == Qt.Key.Key_Escape:
            self.hide()
            return
        super().keyPressEvent(event)


class ModelPicker(QPushButton):
    """The button: the model's name (elided, so a long name never widens the window), its state
    ("loaded", "loading 42 %") and a chevron; a click asks for the list (`opening`) and shows it."""

    opening = Signal()  # about to show the list: fill it now

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("modelPicker")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        row = QHBoxLayout(self)
        row.setContentsMargins(theme.metric("space_3"), theme.metric("space_1"), theme.metric("space_2"),
                               theme.metric("space_1"))
        row.setSpacing(theme.metric("space_2"))
        self.label = ElidedLabel("No model loaded", "modelName", Qt.TextElideMode.ElideRight)  # the name first
        self.label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        row.addWidget(self.label, 1)
        self.state = props(QLabel(), objectName="modelState", visible=False)
        self.state.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        row.addWidget(self.state)
        self.chevron = QLabel()
        self.chevron.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        row.addWidget(self.chevron)
        self.popup = ModelPopup(self)
        self.clicked.connect(self.open_popup)
        self.setToolTip("Choose a model on this machine, open a file, or find more")
        self._restyle()
        theme.notifier().changed.connect(self._restyle)

    def _restyle(self) -> None:
        self.chevron.setPixmap(theme.icon("chevron-down", "icon", theme.metric("icon_sm")).pixmap(
            theme.metric("icon_sm"), theme.metric("icon_sm")))

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name): the layout's, not a button's text
        layout = self.layout()
        return layout.sizeHint() if layout is not None else super().sizeHint()

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        layout = self.layout()
        return layout.minimumSize() if layout is not None else super().minimumSizeHint()

    def set_state(self, text: str) -> None:
        self.state.setText(text)
        self.state.setVisible(bool(text))

    def open_popup(self) -> None:
        self.opening.emit()
        window = self.window()
        width = min(max(self.width(), 30 * theme.px("base")), window.width() - 2 * theme.metric("space_4"))
        rows = max(self.popup.list.count(), 1)
        row_height = self.popup.list.sizeHintForRow(0) if self.popup.list.count() else 0
        height = min(rows * row_height + 2 * theme.metric("space_1"), window.height() // 2)
        self.popup.list.setFixedHeight(height)
        self.popup.resize(width, self.popup.sizeHint().height())
        self.popup.move(self.mapToGlobal(QPoint(0, self.height())))
        self.popup.show()
        self.popup.list.setFocus()
