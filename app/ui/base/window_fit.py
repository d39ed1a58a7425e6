"""Keep a top-level window on a screen that shows it, its frame (title bar included) inside that
screen's available area: at QT_SCALE_FACTOR=1.5 a 1366x768 screen is 911x512 logical pixels, and a
client area clamped to 512 left the title bar pushing the frame 21 px past the bottom (911x533)."""

from __future__ import annotations

from PySide6.QtCore import QMargins
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

# before the window manager has framed the window its frame is unknown (the frame equals the
# client area): reserve a title bar and thin borders, as most window managers draw them
UNKNOWN_FRAME = QMargins(4, 32, 4, 4)


def frame_margins(window: QWidget) -> QMargins:
    """The window's frame around its client area: the real one once it is framed, else a guess."""
    frame, inner = window.frameGeometry(), window.geometry()
    if frame == inner:
        return UNKNOWN_FRAME
    return QMargins(inner.left() - frame.left(), inner.top() - frame.top(),
                    frame.right() - inner.right(), frame.bottom() - inner.bottom())


def fit_to_screen(window: QWidget) -> None:
    """No larger than the available area of the screen under the window's centre (frame included),
    and moved onto it when it is (partly) off that screen."""
    screen = QGuiApplication.screenAt(window.frameGeometry().center()) or QGuiApplication.primaryScreen()
    if screen is None:
        return
    area = screen.availableGeometry()
    m = frame_margins(window)
    width = min(window.width(), area.width() - m.left() - m.right())
    height = min(window.height(), area.height() - m.top() - m.bottom())
    if (width, height) != (window.width(), window.height()):
        window.resize(width, height)
    w, h = window.width() + m.left() + m.right(), window.height() + m.top() + m.bottom()
    frame = window.frameGeometry()
    x = min(max(frame.x(), area.x()), area.right() - w + 1)
    y = min(max(frame.y(), area.y()), area.bottom() - h + 1)
    if (x, y) != (frame.x(), frame.y()):
        window.move(max(x, area.x()), max(y, area.y()))
