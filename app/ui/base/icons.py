"""Icons drawn from resources/icons/ where an emoji would need a colour-emoji font: a desktop
without one shows an empty box for 🔧. Text that names a tool keeps its 🔧 (tests and logs read
it); a label shows the icon in its place."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app.base.paths import resource

TOOL = "🔧"


def rich(text: str, size: int = 12) -> str:
    """`text` as rich text, each 🔧 the tool icon of `size` pixels, lines kept."""
    src = resource("icons", "tool.svg").as_posix()
    img = f'<img src="{html.escape(src)}" width="{size}" height="{size}" style="vertical-align: middle">'
    return html.escape(text).replace(TOOL, img).replace("\n", "<br>")


def set_text(label: QLabel, text: str, size: int = 12) -> None:
    """Show `text` on `label`, 🔧 as the tool icon; plain text when it names no tool."""
    if TOOL in text:
        label.setTextFormat(Qt.TextFormat.RichText)
        label.setText(rich(text, size))
    else:
        label.setTextFormat(Qt.TextFormat.PlainText)
        label.setText(text)
