"""Without a display the window's start says why in one sentence and exits with code 2 (never Qt's
abort); an empty QT_QPA_PLATFORM is unset; the self-test runs offscreen where no window can open."""

from __future__ import annotations

import os
import sys

import pytest

from app.ui import display
from tests.helpers.app_process import run_app

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the X11 checks are Linux's")


def _bare(**extra: str) -> dict[str, str]:
    """The test's environment less every display variable, with `extra` laid over it."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    return {**env, **extra}


@linux_only
@pytest.mark.parametrize("platform", [None, ""], ids=["unset", "empty"])
def test_start_without_a_display_says_so_and_exits_2(platform):
    env = _bare() if platform is None else _bare(QT_QPA_PLATFORM=platform)
    done = run_app(env=env, inherit=False, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("No display to open the window on (DISPLAY is not set)")
    assert "python -m app serve" in line and "--self-test" in line
    assert "Aborted" not in done.stderr and "qt.qpa" not in done.stderr


@linux_only
def test_a_display_no_x_server_answers_on_is_named(monkeypatch):
    monkeypatch.setenv("DISPLAY", ":987")  # no X server listens there
    monkeypatch.delenv("QT_QPA_PLATFORM")
    monkeypatch.setattr(display, "_missing_x11_library", lambda: None)  # as where Qt's X11 libraries are all in
    reason = display.why_no_window()
    assert reason is not None and reason.startswith("No X server answers on DISPLAY=:987")


@linux_only
def test_a_library_the_xcb_plugin_cannot_load_is_named(monkeypatch, tmp_path):
    """A stand-in for Qt's xcb plugin that needs a library from a folder the loader cannot read."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in plugin")
    lib = "libclover-absent-x11.so.0"  # on no system: the loader cannot find it anywhere
    (tmp_path / "dep.c").write_text("int absent_x11(void) { return 0; }\n")
    (tmp_path / "plugin.c").write_text("int absent_x11(void);\nint plugin(void) { return absent_x11(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{lib}", "-o", str(tmp_path / lib), str(tmp_path / "dep.c")],
                   check=True)
    plugin = tmp_path / "libqxcb.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(plugin), str(tmp_path / "plugin.c"), str(tmp_path / lib)],
                   check=True)
    (tmp_path / lib).unlink()
    monkeypatch.setattr(display, "_xcb_plugin", lambda: plugin)
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("QT_QPA_PLATFORM", "")
    reason = display.why_no_window()
    assert "QT_QPA_PLATFORM" not in os.environ  # empty means unset
    assert reason == (f"Qt cannot open a window: the X11 library {lib} is missing; install the package that "
                      "provides it, or run `python -m app serve` for the server alone, or `python -m app "
                      "--self-test`, which runs offscreen.")


def test_a_known_x11_library_is_named_with_its_package(monkeypatch):
    monkeypatch.setattr(display, "_missing_x11_library", lambda: "libxcb-cursor.so.0")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.delenv("QT_QPA_PLATFORM")
    reason = display.why_no_window()
    assert reason is not None and "libxcb-cursor.so.0 is missing" in reason
    assert "(Debian / Ubuntu: `sudo apt-get install libxcb-cursor0`)" in reason


def test_a_chosen_platform_is_left_to_qt(monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    monkeypatch.delenv("DISPLAY", raising=False)
    assert display.why_no_window() is None


@linux_only
def test_the_self_test_runs_offscreen_where_no_window_can_open():
    done = run_app("--self-test", env=_bare(QT_QPA_PLATFORM=""), inherit=False, timeout=300)
    assert "ok    window: main window shown" in done.stdout and "platform offscreen" in done.stdout, \
        done.stdout + done.stderr
    assert "No display" not in done.stderr and "Aborted" not in done.stderr
