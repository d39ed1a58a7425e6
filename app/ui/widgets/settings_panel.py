"""The settings form, built from the declarations in app/base/settings.py (one place for type, default,
title and range): a spin box, check box, choice or text field per visible option, in sections, each
with a one-line explanation under it (the first sentence of its description; the whole description is
its tooltip). Per-model options (sampling, thinking) follow the loaded model; changes are saved at
once. The last section is the local server's: its port, requests at once and API key, then the
address each kind of client uses (app/ui/widgets/server_panel.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from PySide6.QtCore import QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
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
from app.chat.presets import Preset
from app.engine.contract import SamplingParams
from app.engine.prompt_cache import clear_folder, folder_size, prompt_cache_folder
from app.ui.base.props import props
from app.ui.widgets.preset_row import PresetRow
from app.ui.widgets.server_panel import ServerPanel

# what the form shows, by section, in this order (the others are set elsewhere: thinking and its budget in
# the composer)
SECTIONS = (
    ("Chat", ("chat.system_prompt", "sampling.temperature", "sampling.top_p", "sampling.max_tokens",
              "chat.enter_sends", "chat.highlight_code", "ui.theme")),
    ("Model and engine", ("chat.template", "engine.threads", "engine.speculative", "model.reload_last")),
    ("Prompt cache", ("cache.ram_mb", "cache.disk_gb")),
    ("Local server", ("server.port", "server.parallel")),
)
SHOWN = tuple(key for _title, keys in SECTIONS for key in keys)
# the line under an option whose description does not start with one that says what it is
HINTS = {
    "chat.system_prompt": "What the model is told before every conversation.",
    "model.reload_last": "Open the model used last when the app starts.",
    "server.port": "Where the local server listens; the next free port is used when this one is taken.",
}
NEXT_LOAD = "Takes effect at the next model load."
API_KEY_HINT = "Clients must send this key (Bearer token or x-api-key); empty: no key asked."
ZERO_TITLES = {"cache.ram_mb": "as planned", "cache.disk_gb": "off", "engine.threads": "automatic",
               "server.parallel": "automatic"}
# how a choice reads in its menu, where capitalising its value is not enough
CHOICE_TITLES = {"mtp": "MTP", "ngram": "N-grams", "longest-context": "Longest context",
                 "": "The file's own", "chatml": "ChatML", "llama3": "Llama 3", "llama2": "Llama 2",
                 "mistral-v7": "Mistral v7", "phi3": "Phi-3", "gpt-oss": "gpt-oss", "deepseek3": "DeepSeek V3",
                 "command-r": "Command R", "llama4": "Llama 4"}


def hint(option: Option) -> str:
    """One line that says what the option does: the first sentence of its description (and when it
    takes effect, where that is at the next load)."""
    if option.key in HINTS:
        return HINTS[option.key]
    text = option.description or option.title
    first = text.split(". ", 1)[0].rstrip(".") + "."
    return f"{first} {NEXT_LOAD}" if NEXT_LOAD in text and NEXT_LOAD not in first else first


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
        by_key = {o.key: o for o in OPTIONS}
        self.hints: dict[str, QLabel] = {}  # the line under each setting
        self.sections: dict[str, QLabel] = {}
        for title, keys in SECTIONS:
            self._section(form, title)
            if title == "Chat":
                form.addRow(self.model_note)
                self.presets = PresetRow(self._chat_values, self.use_preset)
                form.addRow("Preset", self.presets)
            for key in keys:
                option = by_key[key]
                widget = self._widget(option)
                widget.setToolTip(option.description or option.title)
                self.widgets[key] = widget
                form.addRow(option.title, widget)
                self._hint(form, key, hint(option))
            if title == "Model and engine":
                self.log_button = props(QPushButton("Open log folder"), toolTip=str(log_file()))
                self.log_button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
                self.log_button.clicked.connect(open_log_folder)
                form.addRow("Log", self.log_button)
                self._hint(form, "log", "What the app did, to look at or to send with a problem report.")
            if title == "Prompt cache":
                self.cache_size = props(QLabel(), objectName="subtitle")
                self.cache_clear = props(QPushButton("Clear"), toolTip=str(prompt_cache_folder()))
                self.cache_clear.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
                self.cache_clear.clicked.connect(self.clear_cache)
                row = QHBoxLayout()
                row.addWidget(self.cache_size)
                row.addWidget(self.cache_clear)
                row.addStretch(1)
                form.addRow("On disk", row)
                self._hint(form, "cache.on_disk", "What the prompt cache holds on disk now, for every model. "
                                                  "Clear removes it (the next prompts are read in full).")
                self.show_cache_size()
        self.api_key = QLineEdit()
        self.api_key.setPlaceholderText("none")
        self.api_key.setToolTip(API_KEY_HINT)
        form.addRow("API key", self.api_key)
        self._hint(form, "server.api_key", API_KEY_HINT)
        self.server = ServerPanel()
        form.addRow(self.server)
        self.load_values()

    def sampling(self) -> SamplingParams:
        """The chat's sampling parameters as set here now (a value: the chat controller never reads
        this panel's widgets)."""
        w = self.widgets
        return SamplingParams(temperature=cast(QDoubleSpinBox, w["sampling.temperature"]).value(),
                              top_p=cast(QDoubleSpinBox, w["sampling.top_p"]).value(),
                              max_tokens=cast(QSpinBox, w["sampling.max_tokens"]).value())

    def system_prompt(self) -> str:
        return cast(QPlainTextEdit, self.widgets["chat.system_prompt"]).toPlainText()

    def show_cache_size(self) -> None:
        entries, size = folder_size(prompt_cache_folder())
        self.cache_size.setText(f"{size / 1e6:,.0f} MB in {entries} entr{'y' if entries == 1 else 'ies'}"
                                if entries else "empty")
        self.cache_clear.setEnabled(entries > 0)

    def clear_cache(self) -> None:
        clear_folder(prompt_cache_folder())
        self.show_cache_size()

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt's name)
        self.show_cache_size()
        super().showEvent(event)

    def _section(self, form: QFormLayout, title: str) -> None:
        label = props(QLabel(title), objectName="cardTitle")
        if self.sections:
            label.setContentsMargins(0, 10, 0, 0)  # space above every section but the first
        self.sections[title] = label
        form.addRow(label)

    def _hint(self, form: QFormLayout, key: str, text: str) -> None:
        label = props(QLabel(text), objectName="subtitle", wordWrap=True)
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # wraps, never widens
        label.setContentsMargins(0, 0, 0, 4)  # a gap before the next setting: the line belongs to the one above
        self.hints[key] = label
        form.addRow(label)

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
            whole.setSingleStep(256 if key in ("sampling.max_tokens", "cache.ram_mb") else 1)
            whole.setSpecialValueText(ZERO_TITLES.get(key, ""))  # what 0 means, where it means more than 0
            whole.valueChanged.connect(lambda v: self._changed(key, int(v)))
            self._setters[key] = lambda v: whole.setValue(int(v))
            return whole
        if option.choices:
            combo = QComboBox()
            for c in option.choices:
                combo.addItem(CHOICE_TITLES.get(c, c.replace("-", " ").capitalize()), c)
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
        self.presets.refresh()

    def _chat_values(self) -> tuple[str, float, float]:
        """The system prompt, temperature and top-p the fields hold (what a preset names)."""
        s = self.sampling()
        return self.system_prompt(), s.temperature, s.top_p

    def use_preset(self, preset: Preset) -> None:
        """Fill the system prompt and sampling from `preset`; each is saved as if typed."""
        self._setters["chat.system_prompt"](preset.system_prompt)
        self._setters["sampling.temperature"](preset.temperature)
        self._setters["sampling.top_p"](preset.top_p)

    def _changed(self, key: str, value: Any) -> None:
        if self._loading:
            return
        try:
            self.settings.set(key, value, self.model)
        except ValueError:
            return
        self.settings.save()
        if key in ("chat.system_prompt", "sampling.temperature", "sampling.top_p"):
            self.presets.refresh()  # the preset the fields now match, or Custom
        self.changed.emit(key, value)
