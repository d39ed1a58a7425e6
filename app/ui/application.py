"""Create the QApplication with the launcher's identity, style and icon, and run the main window."""

from __future__ import annotations

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from app import APP_ID, APP_NAME, __version__
from app.paths import resource


def configure(app: QApplication) -> None:
    app.setApplicationName(APP_NAME)
    app.setApplicationVersion(__version__)
    app.setOrganizationName(APP_ID)
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(QIcon(str(resource("icons", "clover.svg"))))
    app.setStyleSheet(resource("styles", "app.qss").read_text(encoding="utf-8"))


def run_gui(argv: list[str]) -> int:
    from app.ui.main_window import MainWindow

    app = QApplication.instance() or QApplication(argv)
    configure(app)
    window = MainWindow()
    window.show()
    return app.exec()
