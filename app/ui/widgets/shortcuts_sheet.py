"""The window's keyboard shortcuts, declared once (keys, what they do, the action's name) and the sheet
that lists them (Ctrl+/). The main window binds each one from this list, so the sheet cannot miss one."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QGridLayout, QLabel, QVBoxLayout, QWidget

from app.ui.base.props import props

# (keys, what it does, the MainWindow method it calls)
SHORTCUTS: tuple[tuple[str, str, str], ...] = (
    ("Ctrl+N", "New chat", "new_chat"),
    ("Ctrl+K", "Search the conversations", "focus_search"),
    ("Ctrl+L", "Go to the message box", "focus_composer"),
    ("Esc", "Stop the reply being written", "stop_reply"),
    ("Ctrl+Shift+C", "Copy the last answer", "copy_last_answer"),
    ("Ctrl+R", "Regenerate the last answer (the old one stays as a version)", "regenerate_last"),
    ("Ctrl+=", "Larger text", "larger_text"),
    ("Ctrl+-", "Smaller text", "smaller_text"),
    ("Ctrl+0", "Text at its usual size", "reset_text"),
    ("Ctrl+/", "This list of shortcuts", "show_shortcuts"),
)
IN_THE_BOX = (("Enter", "Send (a setting swaps Enter and Shift+Enter)"), ("Shift+Enter", "New line"),
              ("Ctrl+Enter", "Send, whatever the setting"))


def native(keys: str) -> str:
    """The keys as this platform writes them (⌘ on macOS)."""
    return QKeySequence(keys).toString(QKeySequence.SequenceFormat.NativeText) or keys


class ShortcutsSheet(QDialog):
    """Every shortcut, in two columns: the keys, what they do."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.setMinimumWidth(560)  # each line on one line at the usual text size
        layout = QVBoxLayout(self)
        grid = QGridLayout()
        grid.setHorizontalSpacing(16)
        grid.setVerticalSpacing(8)
        self.rows: list[tuple[str, str]] = []
        for row, (keys, what) in enumerate([(k, w) for k, w, _m in SHORTCUTS] + list(IN_THE_BOX)):
            key_label = props(QLabel(native(keys)), objectName="shortcutKeys")
            grid.addWidget(key_label, row, 0, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
            grid.addWidget(props(QLabel(what), objectName="shortcutWhat", wordWrap=True), row, 1)
            self.rows.append((keys, what))
        grid.setColumnStretch(1, 1)  # the keys as wide as the longest, the words take the rest
        layout.addLayout(grid)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
