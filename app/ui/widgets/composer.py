"""The composer: one card holding the message box, which grows with the text up to MAX_LINES, the
files attached as context (chips with a remove button; their text goes into the message), and a row
of compact switches (attach, Thinking with its budget, Tools, Settings) with a round Send that turns
into Stop while a reply is written. Enter sends and Shift+Enter starts a new line (a setting swaps
them; Ctrl+Enter always sends). Text files can be dropped on the box or picked with the paperclip.
Chips above the card say what is on that the user might not see: tools offered, or ignored."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, Qt, Signal
from PySide6.QtGui import QKeyEvent, QResizeEvent, QTextCursor
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)

from app.ui.base import icons, theme
from app.ui.base.messages import messages
from app.ui.base.props import props
from app.ui.widgets.controls import IconButton, toggle

MAX_LINES = 10  # the box grows with the text up to this many lines (a third of a small window), then scrolls
MAX_ATTACHMENT = 512 * 1024  # bytes of one attached file: context, not a corpus


class MessageEdit(QPlainTextEdit):
    submit = Signal()
    files_dropped = Signal(list)  # [Path]: local files dropped or pasted, attached instead of inserted

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("composer")
        self.enter_sends = True
        self.hint = "Message…"
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.document().setDocumentMargin(2)
        self.document().contentsChanged.connect(self.fit)
        self.fit()

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

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 (Qt's name)
        return _local_files(source) != [] or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802
        files = _local_files(source)
        if files:
            self.files_dropped.emit(files)
        else:
            super().insertFromMimeData(source)

    def lines(self) -> int:
        """Lines the text takes at this width (wrapped lines count)."""
        return max(1, int(self.document().size().height()))  # QPlainTextDocumentLayout counts lines

    def fit(self) -> None:
        """As tall as its text, from one line up to MAX_LINES."""
        lines = self.lines()
        spacing = self.fontMetrics().lineSpacing()
        # at most a third of a small window (1024x640 at 1.5x): the transcript above stays readable
        most = min(MAX_LINES, max(2, self.window().height() // 3 // spacing)) if self.isVisible() else MAX_LINES
        # no scroll bar until the text outgrows the box (it showed at two lines, the box not yet grown)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded if lines > most
                                        else Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        lines = min(most, lines)
        margins = self.contentsMargins().top() + self.contentsMargins().bottom()
        height = (lines * spacing + 2 * int(self.document().documentMargin()) + margins
                  + self.fontMetrics().descent())
        if height != self.height():
            self.setFixedHeight(height)

    def set_hint(self, hint: str) -> None:
        self.hint = hint
        self._fit_hint()

    def _fit_hint(self) -> None:
        """The whole hint where it fits on the box's one line, "Message…" where it would wrap."""
        room = self.viewport().width() - 2 * int(self.document().documentMargin()) - 4
        self.setPlaceholderText(self.hint if self.fontMetrics().horizontalAdvance(self.hint) <= room else "Message…")

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (a new width wraps differently)
        super().resizeEvent(event)
        self.fit()
        self._fit_hint()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (a new font scale: a new line height)
        super().changeEvent(event)
        self.fit()


def _local_files(source: QMimeData) -> list[Path]:
    return [Path(u.toLocalFile()) for u in source.urls() if u.isLocalFile()] if source.hasUrls() else []


def read_text_file(path: Path) -> str:
    """The text of a file to attach, or ValueError saying why it cannot be."""
    if not path.is_file():
        raise ValueError(f"{path.name} is not a file")
    if path.stat().st_size > MAX_ATTACHMENT:
        raise ValueError(f"{path.name} is over {MAX_ATTACHMENT // 1024} KB: attach a smaller text file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not a text file (UTF-8)") from None
    if "\0" in text:
        raise ValueError(f"{path.name} is not a text file")
    return text


class AttachmentChip(QFrame):
    """A file's name with a remove button."""

    removed = Signal(object)  # self

    def __init__(self, name: str) -> None:
        super().__init__()
        self.setObjectName("attachment")
        self.name = name
        row = QHBoxLayout(self)
        row.setContentsMargins(theme.metric("space_2"), 0, 0, 0)
        row.setSpacing(theme.metric("space_1"))
        glyph = QLabel()
        glyph.setPixmap(icons.pixmap("file-text", theme.color("icon"), 14, self.devicePixelRatioF()))
        row.addWidget(glyph)
        row.addWidget(props(QLabel(name), objectName="attachmentName"))
        self.remove = IconButton("x", f"Remove {name}", size=14)
        self.remove.clicked.connect(lambda: self.removed.emit(self))
        row.addWidget(self.remove)


class Composer(QWidget):
    files_attached = Signal()  # the attachments changed

    def __init__(self) -> None:
        super().__init__()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(theme.metric("space_1"))
        self.chips = props(QLabel(), objectName="chip")
        self.chips.setWordWrap(True)
        self.chips.setVisible(False)
        self.chip_list: list[str] = []
        outer.addWidget(self.chips)
        # while a message is edited: what Send will do, and the way back (nothing is dropped before Send)
        self.edit_bar = QWidget()
        bar = QHBoxLayout(self.edit_bar)
        bar.setContentsMargins(0, 0, 0, 0)
        self.edit_note = props(QLabel("Editing a message: Send keeps the old one as a version (‹ 1/2 ›) "
                                      "and goes on from the new one."), objectName="fact")
        self.edit_note.setWordWrap(True)
        bar.addWidget(self.edit_note, 1)
        self.cancel_edit_button = QPushButton("Undo edit")
        self.cancel_edit_button.setToolTip("Keep the conversation as it was and put back what you were typing")
        bar.addWidget(self.cancel_edit_button)
        self.edit_bar.setVisible(False)
        outer.addWidget(self.edit_bar)

        self.card = props(QFrame(), objectName="composerCard")
        card = QVBoxLayout(self.card)
        s = theme.metric("space_2")
        card.setContentsMargins(theme.metric("space_3"), s, s, s)
        card.setSpacing(s)
        self.attachment_row = QHBoxLayout()
        self.attachment_row.setSpacing(theme.metric("space_1"))
        self.attachment_row.addStretch(1)
        card.addLayout(self.attachment_row)
        self.attachments: list[tuple[str, str]] = []  # (name, text), in the order attached
        self._chips: list[AttachmentChip] = []
        self.input = MessageEdit()
        self.input.files_dropped.connect(self.attach_files)
        card.addWidget(self.input)
        card.addLayout(self._switches())
        outer.addWidget(self.card)
        self.set_enter_sends(True)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        """In the transcript's column: as wide as it, centred, on a wide window."""
        side = max(0, (event.size().width() - theme.metric("column_max") - 2 * theme.metric("space_6")) // 2)
        layout = self.layout()
        if layout is not None and layout.contentsMargins().left() != side:
            layout.setContentsMargins(side, 0, side, 0)
        super().resizeEvent(event)

    def _switches(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setSpacing(theme.metric("space_1"))
        self.attach_button = IconButton("paperclip", "Attach text files as context (or drop them on the box)")
        self.attach_button.clicked.connect(self._pick_files)
        row.addWidget(self.attach_button)
        self.thinking = toggle("brain", "Thinking", "Load a model first: thinking is the model's switch")
        self.thinking.setChecked(True)
        self.thinking.setEnabled(False)
        # off, on, or on with a budget: the same control the local server's clients have (app/serve/thinking.py)
        self.thinking_budget = props(QSpinBox(), objectName="budget")
        self.thinking_budget.setRange(0, 1 << 20)
        self.thinking_budget.setSingleStep(256)
        self.thinking_budget.setSpecialValueText("no limit")
        self.thinking_budget.setSuffix(" tok")
        self.thinking_budget.setAccessibleName("Thinking budget")
        self.thinking_budget.setToolTip("Thinking budget: most tokens the model reasons before it answers; past "
                                        "them the end of thinking is written for it. 0: no limit.")
        self.thinking_budget.setEnabled(False)
        self.thinking_budget.valueChanged.connect(self._show_budget)
        # the budget in a small menu beside the switch: the card's row stays narrow enough for 1024x640 at 1.5x
        self.budget_button = IconButton("chevron-down", "Thinking budget", size=14)
        menu = QMenu(self.budget_button)
        action = QWidgetAction(menu)
        holder = QWidget()
        line = QHBoxLayout(holder)
        theme.pad(line, "space_2", "space_1")
        line.addWidget(QLabel("Thinking budget"))
        line.addWidget(self.thinking_budget)
        action.setDefaultWidget(holder)
        menu.addAction(action)
        self.budget_button.setMenu(menu)
        self.budget_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.thinking.toggled.connect(self._budget_follows)
        self.budget_button.setEnabled(False)
        pair = QHBoxLayout()
        pair.setSpacing(0)
        pair.addWidget(self.thinking)
        pair.addWidget(self.budget_button)
        row.addLayout(pair)
        self.tools_button = toggle("wrench", "Tools", "Tools the model may call: the demo tools, MCP servers, "
                                                      "your own (opens the Tools panel)")
        row.addWidget(self.tools_button)
        self.settings_button = IconButton("sliders-horizontal", "Chat settings: system prompt, sampling, presets",
                                          checkable=True)
        row.addWidget(self.settings_button)
        row.addStretch(1)
        size = theme.metric("send_size")
        self.send_button = IconButton("arrow-up", "Send (Enter)", role="on_accent", size=20, object_name="send")
        self.stop_button = IconButton("square", "Stop (Esc)", role="window", size=14, object_name="stop")
        for button in (self.send_button, self.stop_button):
            button.setFixedSize(size, size)
            button.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
            row.addWidget(button, 0, Qt.AlignmentFlag.AlignBottom)
        self.stop_button.setEnabled(False)
        self.set_generating(False)
        return row

    def _budget_follows(self, on: bool) -> None:
        self.budget_button.setEnabled(on and self.thinking.isEnabled())  # first: the spin box is in its menu
        self.thinking_budget.setEnabled(on and self.thinking.isEnabled())

    def _show_budget(self, tokens: int) -> None:
        self.budget_button.setToolTip(f"Thinking budget: {tokens} tokens" if tokens else "Thinking budget: no limit")

    def set_generating(self, on: bool) -> None:
        """Send becomes Stop while a reply is written, and back."""
        self.send_button.setVisible(not on)
        self.stop_button.setVisible(on)

    def set_enter_sends(self, on: bool) -> None:
        self.input.enter_sends = on
        keys = "Enter sends, Shift+Enter new line" if on else "Shift+Enter sends, Enter new line"
        self.input.set_hint(f"Message…   ({keys}; drop text files here)")
        self.send_button.setToolTip("Send (Enter)" if on else "Send (Shift+Enter)")

    def set_tool_count(self, count: int) -> None:
        self.tools_button.setText(f"Tools · {count}" if count else "Tools")

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

    # -- attached files ------------------------------------------------------

    def _pick_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach text files", "",
                                                "Text files (*.txt *.md *.py *.json *.csv *.log *.yaml *.toml);;"
                                                "All files (*)")
        self.attach_files([Path(p) for p in paths])

    def attach_files(self, paths: list[Path]) -> None:
        """Attach each readable text file; say why for the others."""
        for path in paths:
            try:
                text = read_text_file(Path(path))
            except (OSError, ValueError) as exc:
                messages().warning(f"Not attached: {exc}")
                continue
            self.attachments.append((Path(path).name, text))
            chip = AttachmentChip(Path(path).name)
            chip.removed.connect(self._remove)
            self.attachment_row.insertWidget(len(self._chips), chip)
            self._chips.append(chip)
        self.files_attached.emit()

    def _remove(self, chip: AttachmentChip) -> None:
        i = self._chips.index(chip)
        del self._chips[i], self.attachments[i]
        chip.setParent(None)
        chip.deleteLater()
        self.files_attached.emit()

    def clear_attachments(self) -> None:
        for chip in list(self._chips):
            self._remove(chip)

    def message_text(self) -> str:
        """What Send sends: the typed text, then each attached file's text under its name."""
        text = self.input.toPlainText().strip()
        parts = [text] if text else []
        for name, body in self.attachments:
            fence = "````" if "```" in body else "```"
            parts.append(f"{name}:\n{fence}\n{body.rstrip()}\n{fence}")
        return "\n\n".join(parts)
