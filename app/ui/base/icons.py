"""The window's one icon set: Lucide's line icons (ISC, resources/icons/lucide/), drawn in a theme's
colour at any size, and the tool icon for text where an emoji would need a colour-emoji font (a
desktop without one shows an empty box for 🔧; text that names a tool keeps its 🔧 for tests and logs).
"""

from __future__ import annotations

import functools
import html

from PySide6.QtCore import QByteArray, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QLabel

from app.base.paths import resource

TOOL = "🔧"


def names() -> list[str]:
    """Every icon the set holds (the SVG files' names without .svg)."""
    return sorted(p.stem for p in resource("icons", "lucide").glob("*.svg"))


@functools.cache
def _svg(name: str) -> str:
    path = resource("icons", "lucide", f"{name}.svg")
    if not path.is_file():
        raise KeyError(f"no icon {name!r} in resources/icons/lucide (have: {', '.join(names())})")
    return path.read_text(encoding="utf-8")


def pixmap(name: str, color: str, size: int = 18, ratio: float = 1.0) -> QPixmap:
    """Icon `name` drawn in `color` (any QColor name) on a transparent square of `size` px."""
    svg = _svg(name).replace("currentColor", QColor(color).name())
    px = QPixmap(round(size * ratio), round(size * ratio))
    px.fill(Qt.GlobalColor.transparent)
    px.setDevicePixelRatio(ratio)
    painter = QPainter(px)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    QSvgRenderer(QByteArray(svg.encode())).render(painter, QRectF(0, 0, size, size))
    painter.end()
    return px


def icon(name: str, color: str, disabled: str | None = None, size: int = 18) -> QIcon:
    """A QIcon of `name` in `color`, and in `disabled` (a muted colour) where its widget is off."""
    out = QIcon()
    for ratio in (1.0, 2.0):  # crisp at 1x and on high-DPI screens / QT_SCALE_FACTOR
        out.addPixmap(pixmap(name, color, size, ratio), QIcon.Mode.Normal)
        if disabled:
            out.addPixmap(pixmap(name, disabled, size, ratio), QIcon.Mode.Disabled)
    return out


def icon_size(size: int = 18) -> QSize:
    return QSize(size, size)


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
