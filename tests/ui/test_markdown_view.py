"""Answers on screen: code blocks with a language, colours and Copy; Copy per message; a streaming
answer touches only the piece that changed; a long code line never widens the window."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.chat.markdown_html import Colors
from app.ui.widgets.chat_view import Transcript
from app.ui.widgets.code_block import CodeBlock
from app.ui.widgets.document_view import RichText
from app.ui.widgets.markdown_view import MarkdownView

ANSWER = "Try this:\n\n```python\nprint('hi')\n```\n\nDone."


def test_code_block_has_language_colours_and_a_copy_button(qtbot):
    t = Transcript()
    qtbot.addWidget(t)
    w = t.add_message("assistant", ANSWER)
    (block,) = w.body.code_blocks()
    assert block.language() == "python"
    assert "<span" in block.toHtml() or "color:" in block.toHtml()
    qtbot.mouseClick(block, Qt.MouseButton.LeftButton, pos=block.copy_rect.center())
    assert QGuiApplication.clipboard().text() == "print('hi')"
    assert block.copy_text().startswith("Copied")
    qtbot.waitUntil(lambda: block.copy_text() == "Copy", timeout=3000)  # then it says Copy again


def test_each_message_has_a_copy_button_with_its_markdown_source(qtbot):
    t = Transcript()
    qtbot.addWidget(t)
    user = t.add_message("user", "hello <b>there</b>")
    answer = t.add_message("assistant", ANSWER)
    qtbot.mouseClick(answer.copy, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == ANSWER
    qtbot.mouseClick(user.copy, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "hello <b>there</b>"
    assert user.body.textFormat() == Qt.TextFormat.PlainText


def test_streaming_updates_only_the_piece_that_changed(qtbot):
    view = MarkdownView()
    qtbot.addWidget(view)
    view.set_markdown("Intro paragraph.\n\n```py\nx = 1")
    intro, block = view.widgets
    assert isinstance(intro, RichText) and isinstance(block, CodeBlock)
    text_before = intro.text()
    view.set_markdown("Intro paragraph.\n\n```py\nx = 1\ny = 2\n```\n\nAfter.")
    assert view.widgets[0] is intro and view.widgets[1] is block and intro.text() == text_before
    assert block.piece.source == "x = 1\ny = 2" and block.piece.closed
    assert len(view.widgets) == 3
    view.set_markdown("Only words now.")
    assert len(view.widgets) == 1 and isinstance(view.widgets[0], RichText)


def test_a_long_code_line_scrolls_inside_its_block(qtbot):
    t = Transcript()
    qtbot.addWidget(t)
    t.resize(600, 500)
    t.show()
    narrow = t.widget().minimumSizeHint().width()
    w = t.add_message("assistant", "```\n" + "x" * 3000 + "\n```")
    qtbot.waitExposed(t)
    assert t.widget().minimumSizeHint().width() <= max(narrow, 400)
    block = w.body.code_blocks()[0]
    qtbot.waitUntil(lambda: block._bar is not None and block._bar.isVisible())  # made when the block shows
    bar = block.horizontalScrollBar()
    assert bar.maximum() > 0 and bar.geometry().top() >= block.code_rect.bottom()  # under the lines
    bar.setValue(bar.maximum())
    assert block.origin().x() == block.code_rect.left() - bar.maximum()  # the lines moved, the card did not


def test_theme_and_highlight_setting_restyle_existing_answers(qtbot):
    t = Transcript()
    qtbot.addWidget(t)
    w = t.add_message("assistant", ANSWER)
    block = w.body.code_blocks()[0]
    light = block.piece.html
    t.set_colors(Colors(code_bg="#111415", inline_code_bg="#2a3130", border="#313a37", pygments="monokai"))
    assert block.piece.html != light
    t.highlight = False
    assert "<span" not in block.piece.html


def test_prompt_stats_say_cached_instead_of_zero_speed():
    from app.ui.widgets.chat_view import prompt_stats

    assert prompt_stats({"prompt_tokens": 27, "prompt_evaluated": 0, "prompt_tps": 0}) == "prompt: all 27 tokens cached"
    assert prompt_stats({"prompt_tokens": 40, "prompt_evaluated": 13, "prompt_tps": 812.4}) == \
        "prompt: 27 of 40 tokens cached, 13 read at 812 tok/s"
    # one token read (a regenerate): llama.cpp times a 1-token batch as generation, so there is no speed to show
    assert prompt_stats({"prompt_tokens": 129, "prompt_evaluated": 1, "prompt_tps": 0}) == \
        "prompt: 128 of 129 tokens cached, 1 read"
    full = prompt_stats({"prompt_tokens": 40, "prompt_evaluated": 40, "prompt_tps": 99})
    assert full == "prompt 40 tokens at 99 tok/s"
    # a conversation switched back to, or found again after a restart
    assert prompt_stats({"prompt_tokens": 759, "prompt_evaluated": 4, "prompt_restored": 755, "prompt_tps": 0}) == \
        "prompt: 755 of 759 tokens cached (755 from the prompt cache), 4 read"


def test_draft_stats_say_what_was_guessed_and_kept():
    from app.ui.widgets.chat_view import draft_stats

    assert draft_stats({"drafted": 40, "accepted": 30, "generated_tokens": 90}) == \
        "guesses: 30 of 40 accepted, 1.5 tokens a decode"


def test_full_pages_are_frozen_yet_follow_their_own_changes_and_edits(qtbot):
    from app.ui.widgets.chat_view import PAGE_SIZE

    t = Transcript()
    qtbot.addWidget(t)
    t.resize(700, 500)
    t.show()
    for i in range(PAGE_SIZE + 2):
        if i % 2:
            t.add_message("assistant", ANSWER, reasoning="Thinking it over. " * 80)
        else:
            t.add_message("user", f"question {i}")
    qtbot.waitExposed(t)
    first = t.pages[0]
    assert first.frozen is not None and t.pages[-1].frozen is None
    answer = t.messages[1]
    height = first.height()
    answer.reasoning_toggle.setChecked(True)  # a folded block in a frozen page opens: the page grows
    qtbot.waitUntil(lambda: first.height() > height + 100, timeout=3000)
    assert answer.geometry().bottom() <= first.height()  # nothing cut off
    t.remove_from(2)  # edit the first answer's question: the pages after it go, the first takes messages again
    assert len(t.pages) == 1 and t.pages[0].frozen is None and len(t.messages) == 2
    t.add_message("user", "again")
    assert len(t.pages) == 1 and t.messages[-1].parentWidget() is t.pages[0]


def test_consecutive_prose_shares_a_label_and_the_growing_piece_has_its_own(qtbot):
    """A new label costs a style-sheet polish: paragraphs share one (up to GROUP), the last piece (the
    one a stream grows) stays alone, and a token re-lays out only that one."""
    from app.ui.widgets.markdown_view import GROUP

    view = MarkdownView()
    qtbot.addWidget(view)
    paragraphs = [f"Paragraph {i}." for i in range(GROUP + 3)]
    view.set_markdown("\n\n".join(paragraphs))
    labels = view.widgets
    assert [type(w) for w in labels] == [RichText] * 3  # GROUP paragraphs, the two after, the last alone
    assert "Paragraph 0." in labels[0].text() and f"Paragraph {GROUP - 1}." in labels[0].text()
    assert f"Paragraph {GROUP}." not in labels[0].text()
    assert labels[2].text().count("Paragraph") == 1 and f"Paragraph {GROUP + 2}." in labels[2].text()
    first, second = labels[0].text(), labels[1].text()
    view.set_markdown("\n\n".join(paragraphs) + " And more words")  # a token: only the last label changes
    assert view.widgets == labels and labels[0].text() == first and labels[1].text() == second
    assert "And more words" in labels[2].text()
    view.set_markdown("\n\n".join(paragraphs) + "\n\n```py\nx = 1\n```")
    assert isinstance(view.widgets[-1], CodeBlock) and len(view.widgets) == 3
    assert f"Paragraph {GROUP + 2}." in view.widgets[1].text()  # the former last piece joined its neighbours


def test_a_block_that_replaced_a_label_is_not_measured_again_as_the_answer_grows(qtbot, monkeypatch):
    """A piece that turns from prose into code (its fence arrives) gets a new widget in the text's
    place; the answer must not ask it for its sizes again at each later paint."""
    import collections

    asked: collections.Counter = collections.Counter()
    size_hint = CodeBlock.sizeHint
    monkeypatch.setattr(CodeBlock, "sizeHint", lambda self: asked.update([id(self)]) or size_hint(self))
    view = MarkdownView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    text = "Intro.\n\nx = 1"
    view.set_markdown(text)
    label = view.widgets[1]
    text = "Intro.\n\n```py\nx = 1\n```\n\n"
    view.set_markdown(text)
    block = view.widgets[1]
    assert isinstance(block, CodeBlock) and block is not label  # the label's place, a new widget
    qtbot.waitUntil(lambda: block.isVisible())
    for i in range(20):
        text += f"word{i} "
        view.set_markdown(text)
        view.heightForWidth(view.width())
    assert asked[id(block)] <= 4
