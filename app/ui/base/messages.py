"""One bridge for every message to the user (qutebrowser's `message` module is the model).

`messages().error(text)`, `.warning(text)`, `.info(text)` from anywhere on the GUI thread; the main
window shows them in its banner (and a status-bar line for info). A message may carry technical
details after its sentence (`with_details`: a signal, a frame, a log path); the banner shows the
sentence and keeps the details behind "Details". Each is also logged whole, so a message a user saw
is in the log file too, with its details. The crash dialog (`install_excepthook`) is the last resort for
an exception nothing caught; `--no-crash-dialog` (and CI) turns it into a log line.
"""

from __future__ import annotations

import logging
import sys
import traceback
from types import TracebackType

from PySide6.QtCore import QObject, Signal

log = logging.getLogger("clover.messages")
DETAILS = "\n\nDetails: "  # between a message's sentence and its details (they pass through signals as one text)


def with_details(sentence: str, details: str) -> str:
    """One text for a message with details: the sentence, then DETAILS, then the details."""
    return f"{sentence}{DETAILS}{details}" if details else sentence


def split_details(text: str) -> tuple[str, str]:
    """(the sentence, the details: "" when none) of a message's text."""
    sentence, _, details = text.partition(DETAILS)
    return sentence, details


class Messages(QObject):
    shown = Signal(str, str, str)  # level ("error", "warning", "info"), sentence, details ("" when none)

    def error(self, text: str) -> None:
        log.error(text)
        self.shown.emit("error", *split_details(text))

    def warning(self, text: str) -> None:
        log.warning(text)
        self.shown.emit("warning", *split_details(text))

    def info(self, text: str) -> None:
        log.info(text)
        self.shown.emit("info", *split_details(text))


_BRIDGE: list[Messages] = []


def messages() -> Messages:
    if not _BRIDGE:
        _BRIDGE.append(Messages())
    return _BRIDGE[0]


def install_excepthook(*, dialog: bool = True) -> None:
    """Uncaught exceptions (in Qt slots too) get logged with their traceback and, unless turned off,
    a crash dialog that shows it with the log file's path; the app keeps running."""
    from app.base.logs import log_file

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, tb)
            return
        text = "".join(traceback.format_exception(kind, value, tb))
        log.critical("uncaught exception\n%s", text)
        if not dialog:
            return
        from PySide6.QtWidgets import QApplication, QMessageBox

        if QApplication.instance() is None:
            return
        box = QMessageBox(QMessageBox.Icon.Critical, "Clover Launcher: unexpected error",
                          f"Something went wrong that the app did not expect:\n\n{value}\n\n"
                          f"The details are in the log: {log_file()}")
        box.setDetailedText(text)
        box.exec()

    sys.excepthook = hook
