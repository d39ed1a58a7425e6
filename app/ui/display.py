"""Whether a window can open here, asked before Qt tries: without a display, or without Qt's X11
libraries, Qt aborts the process with a message about plugins (rc 134). This says why in one
sentence, with what to do, so `start` can exit with code 2 instead. An empty QT_QPA_PLATFORM means
unset, as a shell's `export QT_QPA_PLATFORM=` intends."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
from pathlib import Path

# the Debian / Ubuntu package of each library Qt's xcb platform plugin needs and a desktop may lack
_PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-randr.so.0": "libxcb-randr0", "libxcb-xkb.so.1": "libxcb-xkb1", "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1", "libX11.so.6": "libx11-6", "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1", "libOpenGL.so.0": "libopengl0", "libfontconfig.so.1": "libfontconfig1",
    "libdbus-1.so.3": "libdbus-1-3", "libxcb-xinerama.so.0": "libxcb-xinerama0",
}
_HEADLESS = ("run `python -m app serve` for the server alone, or `python -m app --self-test`, which runs "
             "offscreen")


def clear_empty_platform() -> None:
    """An empty QT_QPA_PLATFORM is removed: Qt would otherwise take it as set and try nothing else."""
    if "QT_QPA_PLATFORM" in os.environ and not os.environ["QT_QPA_PLATFORM"].strip():
        del os.environ["QT_QPA_PLATFORM"]


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def why_no_window() -> str | None:
    """Why the window cannot open here, as a sentence with what to do; None where it can (or where
    only Qt itself can tell: Windows, macOS, a platform the user chose)."""
    clear_empty_platform()
    if not sys.platform.startswith("linux"):
        return None
    chosen = os.environ.get("QT_QPA_PLATFORM", "")
    if chosen and not chosen.startswith("xcb"):
        return None  # offscreen, wayland, vnc...: the user's choice, Qt's own checks
    if not chosen and not os.environ.get("DISPLAY"):
        if os.environ.get("WAYLAND_DISPLAY"):
            return None
        return f"No display to open the window on (DISPLAY is not set): start it on a desktop, or {_HEADLESS}."
    missing = _missing_x11_library()
    if missing:
        package = _PACKAGES.get(missing)
        how = (f"install it (Debian / Ubuntu: `sudo apt-get install {package}`)" if package
               else "install the package that provides it")
        return f"Qt cannot open a window: the X11 library {missing} is missing; {how}, or {_HEADLESS}."
    display = os.environ.get("DISPLAY", "")
    if not _x_server_answers(display):
        return f"No X server answers on DISPLAY={display}: start it on a desktop, or {_HEADLESS}."
    return None


def _xcb_plugin() -> Path | None:
    try:
        import PySide6
    except ImportError:
        return None
    found = sorted(Path(PySide6.__file__).parent.glob("Qt/plugins/platforms/libqxcb*.so"))
    return found[0] if found else None


def _missing_x11_library() -> str | None:
    """The first library Qt's xcb plugin needs that the dynamic loader cannot find, by its file name."""
    plugin = _xcb_plugin()
    if plugin is None:
        return None
    try:
        ctypes.CDLL(str(plugin))
    except OSError as exc:
        m = re.search(r"([\w.+-]+\.so[.\d]*): cannot open shared object file", str(exc))
        return m.group(1) if m else str(exc)
    return None


def _x_server_answers(display: str) -> bool:
    """Whether libxcb connects to `display` (what Qt's plugin does first)."""
    try:
        xcb = ctypes.CDLL("libxcb.so.1")
    except OSError:
        return True  # Qt will say what it lacks; nothing better to tell here
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    conn = xcb.xcb_connect(display.encode(), None)
    try:
        return xcb.xcb_connection_has_error(conn) == 0
    finally:
        with contextlib.suppress(Exception):
            xcb.xcb_disconnect(conn)
