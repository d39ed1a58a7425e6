"""The message box and its controls: Enter sends and Shift+Enter starts a new line (a setting swaps
them; Ctrl+Enter always sends), Send/Stop, the Thinking switch, and the Settings/Tools panel toggles.
Chips say what is on that the user might not see: tools offered, or ignored by the template."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.ui.base import icons
from app.ui.base.props import props


class MessageEdit(QPlainTextEdit):
    submit = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("composer")
        self.enter_sends = True

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = event.modifiers()
            ctrl = bool(mods & Qt.KeyboardModifier.ControlModifier)
            shift = bool(mods & Qt.KeyboardModifier.ShiftModifier)
            if ctrl or (self.enter_sends and not shift) or (not self.enter_sends and shift):
                self.submit.emit()
                return
            if self.enter_sends and shift:
                self.insertPlainText("\n")
                return
        super().keyPressEvent(event)


class Composer(QWidget):
    def __init__(self) -> None:
        super().__init__()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(4)
        self.chips = props(QLabel(), objectName="chip")
        self.chips.setWordWrap(True)
        self.chips.setVisible(False)
        self.chip_list: list[str] = []
        outer.addWidget(self.chips)
        # while a message is edited: what Send will do, and the way back (nothing is dropped before Send)
        self.edit_bar = QWidget()
        bar = QHBoxLayout(self.edit_bar)
        bar.setContentsMargins(0, 0, 0, 0)
        self.edit_note = props(QLabel("Editing a message: Send replaces it and the messages after it."),
                               objectName="fact")
        self.edit_note.setWordWrap(True)
        bar.addWidget(self.edit_note, 1)
        self.cancel_edit_button = QPushButton("Undo edit")
        self.cancel_edit_button.setToolTip("Keep the conversation as it was and put back what you were typing")
        bar.addWidget(self.cancel_edit_button)
        self.edit_bar.setVisible(False)
        outer.addWidget(self.edit_bar)
        row = QHBoxLayout()
        self.input = MessageEdit()
        self.input.setMaximumHeight(84)
        self.input.setMinimumHeight(44)
        row.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        self.send_button = props(QPushButton("Send"), objectName="primary")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Esc")
        self.stop_button.setEnabled(False)
        self.thinking = QCheckBox("Thinking")
        self.thinking.setChecked(True)
        self.thinking.setToolTip("Let the model reason before it answers (Qwen-style enable_thinking)")
        # off, on, or on with a budget: the same control the local server's clients have (app/serve/thinking.py)
        self.thinking_budget = QSpinBox()
        self.thinking_budget.setRange(0, 1 << 20)
        self.thinking_budget.setSingleStep(256)
        self.thinking_budget.setSpecialValueText("no limit")
        self.thinking_budget.setSuffix(" tok")
        self.thinking_budget.setAccessibleName("Thinking budget")
        self.thinking_budget.setToolTip("Thinking budget: most tokens the model reasons before it answers; past "
                                        "them the end of thinking is written for it. 0: no limit.")
        self.thinking.toggled.connect(lambda on: self.thinking_budget.setEnabled(on and self.thinking.isEnabled()))
        self.settings_button = QPushButton("Settings")
        self.settings_button.setCheckable(True)
        self.tools_button = QPushButton("Tools")
        self.tools_button.setCheckable(True)
        top = QHBoxLayout()
        top.addWidget(self.send_button)
        top.addWidget(self.stop_button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.settings_button)
        bottom.addWidget(self.tools_button)
        buttons.addLayout(top)
        thinking_row = QHBoxLayout()
        thinking_row.addWidget(self.thinking)
        thinking_row.addWidget(self.thinking_budget)
        buttons.addLayout(thinking_row)
        buttons.addLayout(bottom)
        row.addLayout(buttons)
        outer.addLayout(row)
        self.set_enter_sends(True)

    def set_enter_sends(self, on: bool) -> None:
        self.input.enter_sends = on
        keys = "Enter to send, Shift+Enter for a new line" if on else "Shift+Enter to send, Enter for a new line"
        self.input.setPlaceholderText(f"Message ({keys})")

    def replace_text(self, text: str) -> None:
        """Put `text` in the box as one undoable step (Ctrl+Z brings back what was there), the cursor
        at its end, ready to type on."""
        cursor = self.input.textCursor()
        cursor.select(QTextCursor.SelectionType.Document)
        cursor.insertText(text)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self.input.setTextCursor(cursor)
        self.input.ensureCursorVisible()

    def set_chips(self, chips: list[str]) -> None:
        self.chip_list = list(chips)  # as said; the label shows 🔧 as an icon
        icons.set_text(self.chips, "   ".join(chips))
        self.chips.setVisible(bool(chips))
