"""The settings form, built from the declarations in app/base/settings.py (one place for type, default,
title and range): a spin box, check box, choice or text field per visible option. Per-model options
(sampling, thinking) follow the loaded model; changes are saved at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.base.logs import log_file
from app.base.settings import OPTIONS, Option, Settings
from app.ui.base.props import props

# what the form shows, in this order (the others are set elsewhere: thinking in the composer)
SHOWN = ("chat.system_prompt", "sampling.temperature", "sampling.top_p", "sampling.max_tokens", "chat.enter_sends",
         "chat.highlight_code", "ui.theme", "engine.threads", "engine.speculative", "model.reload_last",
         "server.port", "server.parallel")


def open_log_folder() -> bool:
    """Show the logs folder in the desktop's file manager."""
    folder = log_file().parent
    folder.mkdir(parents=True, exist_ok=True)
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))


class SettingsPanel(QWidget):
    changed = Signal(str, object)  # key, value

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.model: str | None = None
        self.widgets: dict[str, QWidget] = {}
        self._setters: dict[str, Callable[[Any], None]] = {}
        self._loading = False
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        form = QFormLayout()
        outer.addLayout(form)
        outer.addStretch(1)  # extra height goes below the form, not between its rows
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.model_note = props(QLabel(), objectName="subtitle")
        self.model_note.setWordWrap(True)
        form.addRow(self.model_note)
        by_key = {o.key: o for o in OPTIONS}
        for key in SHOWN:
            option = by_key[key]
            widget = self._widget(option)
            widget.setToolTip(option.description or option.title)
            self.widgets[key] = widget
            form.addRow(option.title, widget)
        self.api_key = QLineEdit()
        self.api_key.setPlaceholderText("optional: clients must send it as a Bearer token")
        form.addRow("Local server API key", self.api_key)
        self.log_button = props(QPushButton("Open log folder"), toolTip=str(log_file()))
        self.log_button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self.log_button.clicked.connect(open_log_folder)
        form.addRow("Log", self.log_button)
        self.load_values()

    def _widget(self, option: Option) -> QWidget:
        """The editor for one option; its changes go to the store, and `_setters` shows a stored value."""
        key = option.key
        if option.type is bool:
            check = QCheckBox()
            check.toggled.connect(lambda v: self._changed(key, bool(v)))
            self._setters[key] = lambda v: check.setChecked(bool(v))
            return check
        if option.type is float:
            real = props(QDoubleSpinBox(), minimum=option.minimum or 0.0, maximum=option.maximum or 1e9,
                         singleStep=0.05, decimals=2)
            real.valueChanged.connect(lambda v: self._changed(key, float(v)))
            self._setters[key] = lambda v: real.setValue(float(v))
            return real
        if option.type is int:
            whole = props(QSpinBox(), minimum=int(option.minimum or 0), maximum=int(option.maximum or 2**31 - 1))
            whole.setSingleStep(256 if key == "sampling.max_tokens" else 1)
            whole.valueChanged.connect(lambda v: self._changed(key, int(v)))
            self._setters[key] = lambda v: whole.setValue(int(v))
            return whole
        if option.choices:
            combo = QComboBox()
            for c in option.choices:
                combo.addItem(c.replace("-", " ").capitalize(), c)
            combo.currentIndexChanged.connect(lambda _i: self._changed(key, combo.currentData()))
            self._setters[key] = lambda v: combo.setCurrentIndex(max(0, combo.findData(v)))
            return combo
        if key == "chat.system_prompt":
            text = QPlainTextEdit()
            text.setMaximumHeight(70)
            text.textChanged.connect(lambda: self._changed(key, text.toPlainText()))
            self._setters[key] = lambda v: text.setPlainText(str(v))
            return text
        line = QLineEdit()
        line.editingFinished.connect(lambda: self._changed(key, line.text()))
        self._setters[key] = lambda v: line.setText(str(v))
        return line

    def set_model(self, model: str | None) -> None:
        """Show (and edit) the values of this model's per-model options."""
        self.model = model
        self.model_note.setText(f"Sampling for {model} (kept for this model)" if model else
                                "Sampling for models not loaded yet")
        self.load_values()

    def load_values(self) -> None:
        self._loading = True
        try:
            for key, setter in self._setters.items():
                setter(self.settings.get(key, self.model))
        finally:
            self._loading = False

    def _changed(self, key: str, value: Any) -> None:
        if self._loading:
            return
        try:
            self.settings.set(key, value, self.model)
        except ValueError:
            return
        self.settings.save()
        self.changed.emit(key, value)
