"""The icon rail at the window's far left: the places (Chat, Models, Server, Scenarios, and Downloads
and Settings at its foot), each an icon with its short name under it. The current place is lit with
the accent; while a download or set-up runs, a thin bar under Downloads shows how far it is.

A page that belongs to a place lights that place (the model browser, the set-up and the remote
engines are Models; the welcome page is Chat); a page reached from elsewhere (Tune) lights none.
It says where the user wants to go in `navigate`; the window goes there.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QProgressBar, QToolButton, QVBoxLayout

from app.ui.base import theme
from app.ui.base.props import props

# (place, its name under the icon, Lucide icon, the shortcut in its tooltip or "")
PLACES = (("chat", "Chat", "message-square", "Ctrl+L"), ("models", "Models", "boxes", ""),
          ("server", "Server", "server", ""), ("scenarios", "Scenarios", "flask-conical", ""))
FOOT = (("downloads", "Downloads", "download", ""), ("settings", "Settings", "settings", ""))
TIPS = {"chat": "Chat with the loaded model", "models": "Discover models, set them up, and the ones on this machine",
        "server": "The local server and the requests it answered", "scenarios": "Scripted test conversations",
        "settings": "Appearance, chat defaults, engine, server, folders",
        "downloads": "Every download and set-up: progress, pause, resume, cancel"}
# pages that are not places themselves, by the place they belong to
PLACE_OF = {"welcome": "chat", "hub": "models", "setup": "models", "my_models": "models", "engines": "models"}


def place_of(page: str) -> str | None:
    """The rail's entry for a page; None for a page no entry stands for (tune)."""
    if page in PLACE_OF:
        return PLACE_OF[page]
    return page if any(page == p[0] for p in PLACES + FOOT) else None


class NavRail(QFrame):
    navigate = Signal(str)  # a place's name

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("navRail")
        layout = QVBoxLayout(self)
        theme.pad(layout, "space_1", "space_2", "space_1")
        self.buttons: dict[str, QToolButton] = {}
        self._icons: dict[str, str] = {}
        for group in (PLACES, FOOT):
            if group is FOOT:
                layout.addStretch(1)
            for name, text, icon, keys in group:
                button = props(QToolButton(), objectName="railButton", text=text, checkable=True, autoRaise=True)
                button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextUnderIcon)
                button.setToolTip(f"{TIPS[name]} ({keys})" if keys else TIPS[name])
                button.setAccessibleName(text)
                button.clicked.connect(lambda _c=False, n=name: self.navigate.emit(n))
                layout.addWidget(button, 0, Qt.AlignmentFlag.AlignHCenter)
                self.buttons[name], self._icons[name] = button, icon
                if name == "downloads":
                    self.download_bar = props(QProgressBar(), objectName="railProgress", textVisible=False,
                                              visible=False)
                    self.download_bar.setFixedSize(theme.metric("send_size"), theme.metric("space_1"))
                    layout.addWidget(self.download_bar, 0, Qt.AlignmentFlag.AlignHCenter)
        self.current: str | None = None
        self._restyle()
        theme.notifier().changed.connect(self._restyle)

    def set_page(self, page: str) -> None:
        """Light the place the page belongs to (none for a page without one)."""
        self.current = place_of(page)
        for name, button in self.buttons.items():
            button.setChecked(name == self.current)
        self._restyle()

    def show_downloads(self, running: int, fraction: float, tip: str) -> None:
        """The Downloads button while jobs run: the bar (busy where the size is not known yet, `fraction`
        < 0) and what each does in its tooltip."""
        self.download_bar.setVisible(running > 0)
        if fraction < 0:
            self.download_bar.setRange(0, 0)
        else:
            self.download_bar.setRange(0, 1000)
            self.download_bar.setValue(int(fraction * 1000))
        button = self.buttons["downloads"]
        button.setToolTip(tip if running else TIPS["downloads"])
        button.setAccessibleDescription(f"{running} running" if running else "")

    def _restyle(self) -> None:
        size = theme.metric("icon_lg")
        for name, button in self.buttons.items():
            button.setIcon(theme.icon(self._icons[name], "accent_text" if name == self.current else "icon", size))
