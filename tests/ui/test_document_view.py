"""Answers drawn from a document of their own: words and code are selected with the mouse and copied,
links open in the browser, and the text wraps to the column as a label's did."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QWidget

from app.ui.widgets.chat_view import Transcript

ANSWER = "See [the docs](https://example.org/docs) for more.\n\n```python\nfirst = 1\nsecond = 2\n```"


def _answer(qtbot):
    t = Transcript()
    qtbot.addWidget(t)
    t.resize(700, 500)
    t.show()
    w = t.add_message("assistant", ANSWER)
    qtbot.waitExposed(t)
    prose, block = w.body.widgets
    qtbot.waitUntil(lambda: prose.height() > 0 and block.height() > 0)
    return prose, block


def _drag(qtbot, widget, start: QPoint, end: QPoint) -> None:
    qtbot.mousePress(widget, Qt.MouseButton.LeftButton, pos=start)
    qtbot.mouseMove(widget, end)
    qtbot.mouseRelease(widget, Qt.MouseButton.LeftButton, pos=end)


def test_words_of_an_answer_are_selected_and_copied(qtbot):
    prose, _block = _answer(qtbot)
    assert "the docs" in prose.doc.toPlainText()
    line = prose.doc.documentLayout().blockBoundingRect(prose.doc.begin())
    y = int(line.center().y())
    _drag(qtbot, prose, QPoint(1, y), QPoint(prose.width() - 2, y))
    assert prose.selected_text().startswith("See")
    QGuiApplication.clipboard().clear()
    qtbot.keyClick(prose, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == prose.selected_text()
    prose.select_all()
    assert prose.selected_text() == prose.doc.toPlainText()


def test_a_click_on_a_link_opens_it_and_a_drag_over_it_does_not(qtbot, monkeypatch):
    prose, _block = _answer(qtbot)
    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toString()))
    layout = prose.doc.documentLayout()
    link = next(QPoint(x, y) for y in range(0, prose.height(), 2) for x in range(0, prose.width(), 4)
                if layout.anchorAt(QPoint(x, y)))
    qtbot.mouseClick(prose, Qt.MouseButton.LeftButton, pos=link)
    assert opened == ["https://example.org/docs"]
    _drag(qtbot, prose, link, QPoint(1, link.y()))
    assert opened == ["https://example.org/docs"] and prose.selected_text()
    menu = prose.context_menu(link)
    assert [a.text() for a in menu.actions()] == ["Copy", "Copy link address", "Select all"]


def test_code_is_selected_by_line_and_copied_and_its_menu_copies_the_block(qtbot):
    _prose, block = _answer(qtbot)
    code = block.code_rect
    line = block.doc.documentLayout().blockBoundingRect(block.doc.begin())
    y = code.top() + int(line.center().y())
    _drag(qtbot, block, QPoint(code.left() + 1, y), QPoint(code.right(), y))
    assert block.selected_text() == "first = 1"
    qtbot.keyClick(block, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == "first = 1"
    menu = block.context_menu(QPoint(code.left() + 1, y))
    assert "Copy code" in [a.text() for a in menu.actions()]
    next(a for a in menu.actions() if a.text() == "Copy code").trigger()
    assert QGuiApplication.clipboard().text() == "first = 1\nsecond = 2"


def test_prose_wraps_to_its_width_as_a_label_would(qtbot):
    prose, _block = _answer(qtbot)
    prose.setText("<p>" + "word " * 200 + "</p>")
    narrow, wide = prose.heightForWidth(200), prose.heightForWidth(600)
    assert narrow > 2 * wide > 0
    assert prose.heightForWidth(200) == narrow  # remembered until the text changes
    prose.setText("<p>short</p>")
    assert prose.heightForWidth(200) < narrow


def test_a_kept_picture_is_drawn_again_when_the_text_or_the_selection_changes(qtbot):
    from app.chat.markdown_html import Colors, render
    from app.ui.widgets.code_block import CodeBlock
    from app.ui.widgets.document_view import RichText

    host = QWidget()
    qtbot.addWidget(host)
    host.resize(500, 300)
    prose = RichText("messageText", host, 400)
    prose.setText("<p>See the docs for more.</p>")
    prose.setGeometry(0, 0, 400, prose.heightForWidth(400))
    block = CodeBlock(render("```py\nfirst = 1\n```", Colors(), True)[0], host)
    block.setGeometry(0, 100, 400, block.heightForWidth(400))
    host.show()
    qtbot.waitExposed(host)
    before = prose.grab().toImage()
    kept = prose._picture
    assert kept is not None and prose.grab().toImage() == before and prose._picture is kept  # drawn from it
    prose.setText("<p>See the docs for less.</p>")  # the same size, other words
    changed = prose.grab().toImage()
    assert changed != before
    prose.select_all()
    assert prose.grab().toImage() != changed  # the selection shows
    prose.selection.clearSelection()
    assert prose.grab().toImage() == changed
    code = block.grab().toImage()
    block.show_piece(render("```py\nthird = 1\n```", Colors(), True)[0])
    assert block.grab().toImage() != code


def test_screen_readers_get_the_words_and_the_code(qtbot):
    prose, block = _answer(qtbot)
    assert prose.accessibleName() == "See the docs for more."
    assert block.accessibleName() == "python code" and block.accessibleDescription() == "first = 1\nsecond = 2"


def test_a_text_too_large_for_the_cache_is_drawn_without_a_picture(qtbot):
    from PySide6.QtGui import QPixmapCache

    from app.ui.widgets.document_view import RichText

    host = QWidget()
    qtbot.addWidget(host)
    prose = RichText("messageText", host, 400)
    prose.setText("<p>" + "many words " * 4000 + "</p>")
    prose.setGeometry(0, 0, 400, prose.heightForWidth(400))
    host.show()
    qtbot.waitExposed(host)
    assert prose.height() * 400 * 4 > QPixmapCache.cacheLimit() * 1024 // 4
    image = prose.grab().toImage()
    assert prose._picture is None and not image.isNull()
