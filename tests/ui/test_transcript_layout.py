"""The transcript's layout while a reply streams: a column too short for its messages lays them out
at the height they need, so the messages already written never move or change size as the reply
grows (each such change laid their text out again)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QLabel, QWidget

from app.machine.llama_load import LoadSettings
from app.ui.widgets.column_layout import ColumnLayout
from tests.helpers.fakes import ScriptedEngine, Turn

PROSE = "A paragraph of words that wraps over several lines in a narrow column of text, " * 3


def test_a_column_given_too_little_height_lays_out_at_the_height_its_items_need(qtbot):
    host = QWidget()
    qtbot.addWidget(host)
    column = ColumnLayout(host)
    labels = []
    for _ in range(4):
        label = QLabel(PROSE)
        label.setWordWrap(True)
        column.addWidget(label)
        labels.append(label)
    column.addStretch(1)  # the room left over goes below the labels
    host.resize(300, 2000)
    host.show()
    qtbot.waitExposed(host)
    column.activate()
    heights = [label.heightForWidth(label.width()) for label in labels]
    assert [label.height() for label in labels] == heights
    column.setGeometry(host.rect().adjusted(0, 0, 0, -1950))  # 50 px: far less than the labels need
    assert [label.height() for label in labels] == heights  # not squeezed to fit
    assert labels[-1].geometry().bottom() > 50  # laid out below the fold instead


class _Sizes(QObject):
    """Counts the moves and resizes of the widgets it watches."""

    def __init__(self) -> None:
        super().__init__()
        self.changes = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() in (QEvent.Type.Move, QEvent.Type.Resize):
            self.changes += 1
        return False


def test_a_streaming_reply_leaves_the_messages_above_it_alone(qtbot, make_window):
    """Paragraphs, lists, tables and code blocks arrive while the reply streams: each new block is
    shown at once, and Qt lays out every layout above it then, at the sizes the widgets have."""
    piece = ("Some prose that wraps over more than one line in the column of the window, and goes on "
             "for a while.\n\n- a list item\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nx = 1\n```\n\n")
    first = Turn(answer=piece * 3)
    stream = [("answer", word + " ") for word in (piece * 6).split(" ")]
    second = Turn(answer="".join(text for _kind, text in stream), stream=stream)
    engine = ScriptedEngine([first, second], rate=400)
    window = make_window(engine=engine)
    window.model._on_loaded(engine.load("/models/m.gguf", LoadSettings()))
    window.navigate("chat")
    window.composer.input.setPlainText("first")
    with qtbot.waitSignal(window.chat.reply_finished, timeout=20_000):
        window.chat.send()
    qtbot.wait(50)
    user, answer = window.transcript.messages
    watched = [user, answer, *answer.body.widgets]
    sizes = _Sizes()
    for widget in watched:
        widget.installEventFilter(sizes)
    window.composer.input.setPlainText("second")
    with qtbot.waitSignal(window.chat.reply_finished, timeout=30_000):
        window.chat.send()
    streamed = window.transcript.messages[-1]
    assert len(streamed.body.widgets) > 10 and streamed.body.code_blocks()  # blocks were added as it streamed
    assert sizes.changes == 0
