"""Settings forms, built from the declarations in app/base/settings.py (one place for type, default,
title and range): a spin box, check box, choice or text field per option, in sections, each with a
one-line explanation under it (the first sentence of its description; the whole description is its
tooltip). `SettingsForm` builds any list of sections; the chat's side panel (`SettingsPanel`) holds
what changes per conversation (system prompt, sampling, presets), the Settings page
(app/ui/views/settings_view.py) everything else. Per-model options follow the loaded model; changes
are saved at once, and a form shows the stored values again whenever it is shown."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.base.settings import BY_KEY, Option, Settings
from app.chat.presets import Preset
from app.engine.contract import SamplingParams
from app.ui.base.props import props
from app.ui.widgets.preset_row import PresetRow

Sections = Sequence[tuple[str, Sequence[str]]]
# the chat's side panel: what changes from one conversation to the next (thinking and its budget are
# the composer's)
CHAT_SECTIONS: Sections = (
    ("System prompt and sampling", ("chat.system_prompt", "sampling.temperature", "sampling.top_p",
                                    "sampling.max_tokens")),
)
# the Settings page, in this order; the page adds what is not an option (the API key, the server's
# addresses, the folders, the prompt cache on disk)
PAGE_SECTIONS: Sections = (
    ("Appearance", ("ui.theme", "ui.font_scale")),
    ("Chat defaults", ("chat.enter_sends", "chat.highlight_code", "model.reload_last")),
    ("Engine", ("chat.template", "engine.threads", "engine.speculative", "engine.reproducible", "cache.ram_mb")),
    ("Server", ("server.port", "server.parallel")),
    ("Folders", ()),
    ("Privacy", ("cache.disk_gb",)),
)
SHOWN = tuple(key for sections in (CHAT_SECTIONS, PAGE_SECTIONS) for _title, keys in sections for key in keys)
# the line under an option whose description does not start with one that says what it is
HINTS = {
    "chat.system_prompt": "What the model is told before every conversation.",
    "model.reload_last": "Open the model used last when the app starts.",
    "server.port": "Where the local server listens; the next free port is used when this one is taken.",
}
NEXT_LOAD = "Takes effect at the next model load."
ZERO_TITLES = {"cache.ram_mb": "as planned", "cache.disk_gb": "off", "engine.threads": "automatic",
               "server.parallel": "automatic"}
STEPS = {"sampling.max_tokens": 256, "cache.ram_mb": 256}
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


class SettingsForm(QWidget):
    """A form of `sections` (title, option keys), each option with its editor and its line; a
    subclass adds rows of its own after a section (`after_section`)."""

    changed = Signal(str, object)  # key, value

    def __init__(self, settings: Settings, sections: Sections) -> None:
        super().__init__()
        self.settings = settings
        self.model: str | None = None
        self.widgets: dict[str, QWidget] = {}
        self.hints: dict[str, QLabel] = {}  # the line under each setting
        self.sections: dict[str, QLabel] = {}
        self._setters: dict[str, Callable[[Any], None]] = {}
        self._loading = False
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.form = QFormLayout()
        self.form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        outer.addLayout(self.form)
        outer.addStretch(1)  # extra height goes below the form, not between its rows
        for title, keys in sections:
            self._section(title)
            self.before_options(title)
            for key in keys:
                self.add_option(BY_KEY[key])
            self.after_section(title)

    def before_options(self, title: str) -> None:
        """Rows a form puts at the top of a section, before its options."""

    def after_section(self, title: str) -> None:
        """Rows a form puts at the end of a section."""

    def add_option(self, option: Option) -> None:
        widget = self._widget(option)
        widget.setToolTip(option.description or option.title)
        self.widgets[option.key] = widget
        self.form.addRow(option.title, widget)
        self.add_hint(option.key, hint(option))

    def add_row(self, title: str, widget: QWidget, key: str, line: str) -> None:
        """A row that is not an option (a button, a folder), with its line like an option's."""
        self.form.addRow(title, widget)
        self.add_hint(key, line)

    def _section(self, title: str) -> None:
        label = props(QLabel(title), objectName="cardTitle", wordWrap=True)
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # a narrow panel wraps it
        if self.sections:
            label.setContentsMargins(0, 10, 0, 0)  # space above every section but the first
        self.sections[title] = label
        self.form.addRow(label)

    def add_hint(self, key: str, text: str) -> None:
        label = props(QLabel(text), objectName="subtitle", wordWrap=True)
        label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # wraps, never widens
        label.setContentsMargins(0, 0, 0, 4)  # a gap before the next setting: the line belongs to the one above
        self.hints[key] = label
        self.form.addRow(label)

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
            whole.setSingleStep(STEPS.get(key, 1))
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
        self.load_values()

    def load_values(self) -> None:
        self._loading = True
        try:
            for key, setter in self._setters.items():
                setter(self.settings.get(key, self.model))
        finally:
            self._loading = False

    def showEvent(self, event: Any) -> None:  # noqa: N802 (Qt's name)
        self.load_values()  # what the other form, or a shortcut (the text size), changed meanwhile
        super().showEvent(event)

    def _changed(self, key: str, value: Any) -> None:
        if self._loading:
            return
        try:
            self.settings.set(key, value, self.model)
        except ValueError:
            return
        self.settings.save()
        self.changed.emit(key, value)


class SettingsPanel(SettingsForm):
    """The chat's side panel: the system prompt, sampling and presets, what changes per conversation.
    The chat controller reads its values (`sampling`, `system_prompt`), never its widgets."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, CHAT_SECTIONS)
        self.set_model(None)

    def before_options(self, title: str) -> None:
        self.model_note = props(QLabel(), objectName="subtitle", wordWrap=True)
        self.model_note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.form.addRow(self.model_note)
        self.presets = PresetRow(self._chat_values, self.use_preset)
        self.form.addRow("Preset", self.presets)

    def set_model(self, model: str | None) -> None:
        self.model_note.setText("Sampling is kept for each model: these values are the loaded model's." if model
                                else "Sampling for models not loaded yet.")
        self.model_note.setToolTip(model or "")
        super().set_model(model)

    def load_values(self) -> None:
        super().load_values()
        self.presets.refresh()

    def sampling(self) -> SamplingParams:
        """The chat's sampling parameters as set here now."""
        w = self.widgets
        return SamplingParams(temperature=cast(QDoubleSpinBox, w["sampling.temperature"]).value(),
                              top_p=cast(QDoubleSpinBox, w["sampling.top_p"]).value(),
                              max_tokens=cast(QSpinBox, w["sampling.max_tokens"]).value())

    def system_prompt(self) -> str:
        return cast(QPlainTextEdit, self.widgets["chat.system_prompt"]).toPlainText()

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
        super()._changed(key, value)
        if not self._loading and key in ("chat.system_prompt", "sampling.temperature", "sampling.top_p"):
            self.presets.refresh()  # the preset the fields now match, or Custom
