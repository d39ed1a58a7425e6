"""The window's one visual system: colours by role for light and dark with one accent, a type scale,
radii and spacing on a 4/8 px grid (resources/styles/themes.json), the style sheets that use them
(resources/styles/app.qss, then every other *.qss there, sorted, with @role and @metric filled in),
a matching palette for Qt's own widgets, and icons drawn in a role's colour.

Widgets ask here (`color`, `icon`, `px`, `metric`) instead of writing a colour or a size, and redraw
what they painted themselves on `notifier().changed`. The font scale multiplies every font size.
"system" follows the desktop (Qt 6's styleHints().colorScheme()).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QFont, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication, QLayout

from app.base.paths import resource
from app.chat.markdown_html import Colors
from app.ui.base import icons

current = "light"  # the theme applied last
_scale = 1.0  # the font scale applied last
SCALE_MIN, SCALE_MAX, SCALE_STEP = 0.8, 1.6, 0.1
T = TypeVar("T")


class Notifier(QObject):
    """Says when the theme or the font scale changed: widgets that paint themselves redraw."""

    changed = Signal()


@functools.cache
def notifier() -> Notifier:
    return Notifier()


def per_theme(measure: Callable[[], T]) -> Callable[[], T]:
    """`measure()` once for the theme and font scale in use (a size read off a widget made for the
    purpose, say), measured again after either changes."""
    remembered = functools.cache(measure)
    watching = False

    @functools.wraps(measure)
    def value() -> T:
        nonlocal watching
        if not watching:
            watching = True
            notifier().changed.connect(remembered.cache_clear)
        return remembered()

    return value


@functools.cache
def _data() -> dict[str, Any]:
    return json.loads(resource("styles", "themes.json").read_text(encoding="utf-8"))


def themes() -> dict[str, dict[str, str]]:
    """The colour sets by theme name ('light', 'dark')."""
    return {k: v for k, v in _data().items() if k != "metrics"}


def metrics() -> dict[str, int]:
    """Sizes in px at scale 1: font_*, radius_*, space_* (the 4/8 grid), icon_*, column_max."""
    return dict(_data()["metrics"])


def resolve(name: str) -> str:
    """'light' or 'dark' for a setting of light, dark or system."""
    if name in ("light", "dark"):
        return name
    if QGuiApplication.instance() is not None and QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark:
        return "dark"
    return "light"


def colors(name: str = "system") -> dict[str, str]:
    return themes()[resolve(name)]


def color(role: str) -> str:
    """The current theme's colour for `role` (a themes.json key such as 'text', 'muted', 'accent')."""
    return themes()[current][role]


def font_scale() -> float:
    return _scale


def metric(name: str) -> int:
    """A size from the scale, in px: fonts (font_*) grow with the font scale, the rest does not."""
    value = metrics()[name]
    return round(value * _scale) if name.startswith("font_") else value


def px(name: str) -> int:
    """A font size of the type scale ('xs', 'sm', 'base', 'md', 'lg', 'xl') in px, scaled."""
    return metric(f"font_{name}")


def pad(layout: QLayout, horizontal: str = "space_3", vertical: str = "space_2", spacing: str | None = None) -> None:
    """A layout's margins (and spacing) from the 4/8 px grid, by metric name."""
    h, v = metrics()[horizontal], metrics()[vertical]
    layout.setContentsMargins(h, v, h, v)
    if spacing is not None:
        layout.setSpacing(metrics()[spacing])


def icon(name: str, role: str = "text", size: int = 18) -> QIcon:
    """Lucide icon `name` in the current theme's `role` colour, muted where its widget is disabled."""
    return _icon(name, color(role), color("icon_disabled"), size)


@functools.lru_cache(maxsize=512)
def _icon(name: str, color_: str, disabled: str, size: int) -> QIcon:
    # drawn once per colour: every message's action row asks for the same few (a QIcon is shared, not copied)
    return icons.icon(name, color_, disabled=disabled, size=size)


def style_sheet(name: str = "system", scale: float | None = None) -> str:
    """app.qss then the other style sheets, sorted, with @role colours and @metric sizes filled in."""
    s = _scale if scale is None else scale
    values = dict(colors(name), icons=resource("icons").as_posix())  # @icons: the icons' folder, for url()
    for key, value in metrics().items():
        values[key] = f"{round(value * s) if key.startswith('font_') else value}px"
    folder = resource("styles")
    sheets = [folder / "app.qss"] + sorted(p for p in folder.glob("*.qss") if p.name != "app.qss")
    text = "\n".join(p.read_text(encoding="utf-8") for p in sheets)
    return re.sub(r"@([a-z_0-9]+)", lambda m: values.get(m.group(1), m.group(0)), text)


def palette(name: str = "system") -> QPalette:
    c = colors(name)
    p = QPalette()
    roles = {QPalette.ColorRole.Window: c["window"], QPalette.ColorRole.WindowText: c["text"],
             QPalette.ColorRole.Base: c["input"], QPalette.ColorRole.AlternateBase: c["hover"],
             QPalette.ColorRole.Text: c["text"], QPalette.ColorRole.Button: c["card"],
             QPalette.ColorRole.ButtonText: c["text"], QPalette.ColorRole.Highlight: c["accent"],
             QPalette.ColorRole.HighlightedText: c["on_accent"], QPalette.ColorRole.ToolTipBase: c["card"],
             QPalette.ColorRole.ToolTipText: c["text"], QPalette.ColorRole.PlaceholderText: c["muted"],
             QPalette.ColorRole.Link: c["accent_text"], QPalette.ColorRole.LinkVisited: c["accent_text"]}
    for role, value in roles.items():
        p.setColor(role, QColor(value))
    # disabled controls look disabled: muted text (a check box's label is WindowText); app.qss draws
    # the check boxes' squares
    for role in (QPalette.ColorRole.ButtonText, QPalette.ColorRole.Text, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(c["muted"]))
    return p


def apply(app: QApplication, name: str = "system", scale: float | None = None) -> str:
    """Style the application (and set the font scale when given); returns the theme used."""
    global current, _scale
    used = current = resolve(name)
    if scale is not None:
        _scale = min(SCALE_MAX, max(SCALE_MIN, round(scale, 2)))
    app.setStyle("Fusion")
    app.setPalette(palette(used))
    font = QFont(app.font())
    font.setPixelSize(metric("font_base"))  # text without a rule of its own follows the scale too
    app.setFont(font)
    app.setStyleSheet(style_sheet(used))
    notifier().changed.emit()
    return used


def set_font_scale(scale: float) -> float:
    """Scale every font of the window (clamped to SCALE_MIN..SCALE_MAX); returns the scale used."""
    app = QApplication.instance()
    if isinstance(app, QApplication):
        apply(app, current, scale)
    else:
        global _scale
        _scale = min(SCALE_MAX, max(SCALE_MIN, round(scale, 2)))
    return _scale


def code_colors() -> Colors:
    """The current theme's colours for code in answers."""
    return Colors.from_theme(themes()[current])
