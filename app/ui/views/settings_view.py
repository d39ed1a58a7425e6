"""The Settings place: every setting on one page, in a readable column, by section (appearance, chat
defaults, engine, server, folders, privacy), each with its line of explanation. The form is built
from the same declarations as the chat's side panel (app/ui/widgets/settings_panel.py), which keeps
only what changes per conversation; this page adds what is not an option: the server's API key and
addresses, the folders the app keeps its files in, and the prompt cache on disk with Clear.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.base.logs import log_file
from app.base.paths import app_dirs
from app.base.settings import Settings
from app.engine.prompt_cache_files import clear_folder, folder_size, prompt_cache_folder
from app.ui.base import theme
from app.ui.base.props import props
from app.ui.widgets.elided_label import ElidedLabel
from app.ui.widgets.server_panel import ServerPanel
from app.ui.widgets.settings_panel import PAGE_SECTIONS, SettingsForm

API_KEY_HINT = "Clients must send this key (Bearer token or x-api-key); empty: no key asked."
PRIVACY = ("Conversations, settings and the local server's request list stay on this computer; the app goes "
           "online only when you search, download or install something.")
# the folders: (key, title, its line); where each is comes from app_dirs() when the page is built
FOLDERS = (
    ("folder.models", "Models", "Where set-ups and downloads put model files; My models lists them."),
    ("folder.data", "Conversations", "The conversations, the set-ups' state and the prompt cache on disk."),
    ("folder.config", "Settings files", "These settings, your catalog entries, endpoints and MCP servers."),
    ("log", "Log", "What the app did, to look at or to send with a problem report."),
)


def open_folder(folder: Path) -> bool:
    """Show a folder in the desktop's file manager (made first, so there is something to show)."""
    folder.mkdir(parents=True, exist_ok=True)
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))


def folder_of(key: str) -> Path:
    dirs = app_dirs()
    return {"folder.models": dirs.models, "folder.data": dirs.data, "folder.config": dirs.config,
            "log": log_file().parent}[key]


class AllSettings(SettingsForm):
    """The Settings page's form: the page's sections, and the rows that are not options."""

    def __init__(self, settings: Settings) -> None:
        self.folder_buttons: dict[str, QPushButton] = {}
        super().__init__(settings, PAGE_SECTIONS)
        self.load_values()

    def before_options(self, title: str) -> None:
        if title == "Privacy":
            self.privacy = props(QLabel(PRIVACY), objectName="fact", wordWrap=True)
            self.privacy.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            self.form.addRow(self.privacy)

    def after_section(self, title: str) -> None:
        if title == "Server":
            self.api_key = props(QLineEdit(), placeholderText="none", toolTip=API_KEY_HINT)
            self.add_row("API key", self.api_key, "server.api_key", API_KEY_HINT)
            self.server = ServerPanel()
            self.form.addRow(self.server)
        elif title == "Folders":
            for key, name, line in FOLDERS:
                self.add_row(name, self._folder_row(key), key, line)
        elif title == "Privacy":
            self.cache_size = props(QLabel(), objectName="subtitle")
            self.cache_clear = props(QPushButton("Clear"), toolTip=str(prompt_cache_folder()))
            self.cache_clear.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
            self.cache_clear.clicked.connect(self.clear_cache)
            row = QWidget()
            box = QHBoxLayout(row)
            box.setContentsMargins(0, 0, 0, 0)
            box.addWidget(self.cache_size)
            box.addWidget(self.cache_clear)
            box.addStretch(1)
            self.add_row("Prompt cache on disk now", row, "cache.on_disk",
                         "What the prompt cache holds on disk now, for every model. Clear removes it (the next "
                         "prompts are read in full).")
            self.show_cache_size()

    def _folder_row(self, key: str) -> QWidget:
        """The folder's path (elided in the middle, whole in its tooltip) and Open."""
        folder = folder_of(key)
        row = QWidget()
        box = QHBoxLayout(row)
        box.setContentsMargins(0, 0, 0, 0)
        path = ElidedLabel(str(folder), "subtitle", Qt.TextElideMode.ElideMiddle)
        box.addWidget(path, 1)
        button = props(QPushButton("Open"), toolTip=f"Show {folder} in the file manager")
        button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        button.clicked.connect(lambda: open_folder(folder_of(key)))
        self.folder_buttons[key] = button
        box.addWidget(button)
        return row

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


class SettingsView(QWidget):
    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.setObjectName("page")
        layout = QVBoxLayout(self)
        theme.pad(layout, "space_2", "space_2", "space_1")
        layout.addWidget(props(QLabel("Settings"), objectName="title"))
        layout.addWidget(props(QLabel("Each setting says what it does; most take effect at once. The system prompt "
                                      "and sampling are the chat's, in its side panel."),
                               objectName="subtitle", wordWrap=True))
        self.scroll_area = props(QScrollArea(), widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        column = props(QWidget(), objectName="page")
        row = QHBoxLayout(column)
        row.setContentsMargins(0, 0, 0, 0)
        self.form = AllSettings(settings)
        self.form.setMaximumWidth(theme.metric("column_max"))  # no wider than a column that reads well
        row.addWidget(self.form, 1)
        self.scroll_area.setWidget(column)
        layout.addWidget(self.scroll_area, 1)
