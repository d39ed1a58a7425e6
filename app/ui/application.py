"""Create the QApplication with the launcher's identity, theme and icon, and run the main window."""

from __future__ import annotations

import sys
from typing import cast

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from app import APP_ID, APP_NAME, __version__
from app.base.exit_codes import ExitCode
from app.base.paths import resource
from app.ui.display import why_no_window


def configure(app: QApplication, theme: str | None = None) -> str:
    """Identity, icon and theme (the saved setting unless given); returns 'light' or 'dark'."""
    from app.base.settings import Settings
    from app.ui.base import theme as themes

    app.setApplicationName(APP_NAME)
    app.setApplicationVersion(__version__)
    app.setOrganizationName(APP_ID)
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(QIcon(str(resource("icons", "clover.svg"))))
    return themes.apply(app, theme or Settings.load().get("ui.theme"))


def run_gui(argv: list[str], *, crash_dialog: bool = True) -> int:
    """The window until it closes; without a display, a sentence saying so and exit code 2 (Qt itself
    would abort the process)."""
    from app.base.logs import setup_logging

    reason = why_no_window()
    if reason and QApplication.instance() is None:
        print(reason, file=sys.stderr, flush=True)
        return ExitCode.BAD_INPUT
    from app.ui.base.messages import install_excepthook
    from app.ui.main_window import MainWindow

    setup_logging()
    app = cast(QApplication, QApplication.instance() or QApplication(argv))
    configure(app)
    install_excepthook(dialog=crash_dialog)
    window = MainWindow()
    window.show()
    from app.machine.crash_effects import reported
    from app.ui.base.messages import messages

    for line in reported():  # an earlier run died in native code (app/base/crash_trail.py)
        messages().warning(line)
    return app.exec()
