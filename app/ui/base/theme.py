"""Light and dark themes: the style sheet's colours (resources/styles/themes.json) and a matching
palette for Qt's own widgets. "system" follows the desktop (Qt 6's styleHints().colorScheme())."""

from __future__ import annotations

import json
import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app.base.paths import resource
from app.chat.markdown_html import Colors

current = "light"  # the theme applied last


def themes() -> dict[str, dict[str, str]]:
    return json.loads(resource("styles", "themes.json").read_text(encoding="utf-8"))


def resolve(name: str) -> str:
    """'light' or 'dark' for a setting of light, dark or system."""
    if name in ("light", "dark"):
        return name
    if QGuiApplication.instance() is not None and QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark:
        return "dark"
    return "light"


def colors(name: str = "system") -> dict[str, str]:
    return themes()[resolve(name)]


def style_sheet(name: str = "system") -> str:
    c = dict(colors(name), icons=resource("icons").as_posix())  # @icons: the icons' folder, for url()
    sheet = resource("styles", "app.qss").read_text(encoding="utf-8")
    return re.sub(r"@([a-z_]+)", lambda m: c.get(m.group(1), m.group(0)), sheet)


def palette(name: str = "system") -> QPalette:
    c = colors(name)
    p = QPalette()
    roles = {QPalette.ColorRole.Window: c["window"], QPalette.ColorRole.WindowText: c["text"],
             QPalette.ColorRole.Base: c["input"], QPalette.ColorRole.AlternateBase: c["hover"],
             QPalette.ColorRole.Text: c["text"], QPalette.ColorRole.Button: c["card"],
             QPalette.ColorRole.ButtonText: c["text"], QPalette.ColorRole.Highlight: c["accent"],
             QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.ToolTipBase: c["card"],
             QPalette.ColorRole.ToolTipText: c["text"], QPalette.ColorRole.PlaceholderText: c["muted"]}
    for role, value in roles.items():
        p.setColor(role, QColor(value))
    # disabled controls look disabled: muted text (a check box's label is WindowText); app.qss draws
    # the check boxes' squares
    for role in (QPalette.ColorRole.ButtonText, QPalette.ColorRole.Text, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(c["muted"]))
    return p


def apply(app: QApplication, name: str = "system") -> str:
    """Style the application; returns the theme used ('light' or 'dark')."""
    global current
    used = current = resolve(name)
    app.setStyle("Fusion")
    app.setPalette(palette(used))
    app.setStyleSheet(style_sheet(used))
    return used


def code_colors() -> Colors:
    """The current theme's colours for code in answers."""
    return Colors.from_theme(themes()[current])
