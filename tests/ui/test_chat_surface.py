"""The conversation surface and the composer card, on the real window with an engine double:
versions after regenerate and edit (in the store and on screen), the next turn made of the version
shown, hover actions with tooltips, the thinking clock, Send turning into Stop, the composer's
growth limit, attached files, the font scale kept, and the shortcuts sheet."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF
from PySide6.QtGui import QEnterEvent
from PySide6.QtWidgets import QApplication

from app.machine.llama_load import LoadSettings
from tests.helpers.fakes import ScriptedEngine, Turn


def window_with(make_window, script, **engine_kwargs):
    engine = ScriptedEngine(script, **engine_kwargs)
    window = make_window(engine=engine)
    window.model._on_loaded(engine.load("/models/m.gguf", LoadSettings()))
    return window, engine


def ask(qtbot, window, text):
    window.composer.input.setPlainText(text)
    with qtbot.waitSignal(window.chat.reply_finished, timeout=10_000):
        window.chat.send()


def answers(n: int) -> list[Turn]:
    return [Turn(answer=f"answer {i}") for i in range(1, n + 1)]


def test_regenerate_keeps_versions_switchable_and_the_next_turn_goes_on_from_the_one_shown(qtbot, make_window):
    window, engine = window_with(make_window, answers(4))
    ask(qtbot, window, "q1")
    ask(qtbot, window, "q2")
    cid = window.chat.session.conversation_id
    with qtbot.waitSignal(window.chat.reply_finished, timeout=10_000):
        window.chat.regenerate(1)  # the first answer again: it and q2's turn are kept as a version
    assert [m.content for m in window.store.messages(cid)] == ["q1", "answer 3"]
    answer = window.transcript.messages[1]
    assert answer.version == (1, 2) and answer.version_label.text() == "2/2"
    assert answer.version_prev.isVisibleTo(window) and answer.version_prev.isEnabled()
    answer.version_prev.click()  # ‹ : back to the first version, and the turn after it
    assert [w.content for w in window.transcript.messages] == ["q1", "answer 1", "q2", "answer 2"]
    assert window.transcript.messages[1].version_label.text() == "1/2"
    ask(qtbot, window, "q3")
    sent = [(m["role"], m["content"]) for m in engine.requests[-1].messages if m["role"] != "system"]
    assert sent == [("user", "q1"), ("assistant", "answer 1"), ("user", "q2"), ("assistant", "answer 2"),
                    ("user", "q3")]
    window.transcript.messages[1].version_next.click()
    assert [w.content for w in window.transcript.messages] == ["q1", "answer 3"]


def test_an_edit_keeps_the_old_message_as_a_version(qtbot, make_window):
    window, _engine = window_with(make_window, answers(3))
    ask(qtbot, window, "first question")
    cid = window.chat.session.conversation_id
    window.transcript.messages[0].edit.click()
    assert window.composer.input.toPlainText() == "first question"
    ask(qtbot, window, "second question")
    assert [m.content for m in window.store.messages(cid)] == ["second question", "answer 2"]
    user = window.transcript.messages[0]
    assert user.version == (1, 2)
    user.version_prev.click()
    assert [w.content for w in window.transcript.messages] == ["first question", "answer 1"]
    window.conversations.open(cid)  # reopened: the versions are read from the store
    assert window.transcript.messages[0].version == (0, 2)


def test_hover_shows_icon_actions_with_tooltips_and_delete_removes_from_there(qtbot, make_window):
    window, _engine = window_with(make_window, answers(2))
    ask(qtbot, window, "q1")
    window.navigate("chat")
    user, answer = window.transcript.messages
    assert not answer.regenerate.isVisibleTo(window)  # hidden until the mouse is over the message
    QApplication.sendEvent(answer, QEnterEvent(QPointF(5, 5), QPointF(5, 5), QPointF(5, 5)))
    for button, words in ((answer.copy, "Copy"), (answer.regenerate, "Regenerate"), (answer.delete, "Delete")):
        assert button.isVisibleTo(window) and words in button.toolTip() and button.text() == ""
        assert not button.icon().isNull()
    QApplication.sendEvent(answer, QEvent(QEvent.Type.Leave))
    assert not answer.copy.isVisibleTo(window)
    assert "Edit" in user.edit.toolTip() and user.edit in user.hover_actions
    answer.copy.click()
    assert QApplication.clipboard().text() == "answer 1"
    answer.delete.click()
    assert [w.content for w in window.transcript.messages] == ["q1"]
    assert [m.content for m in window.store.messages(window.chat.session.conversation_id)] == ["q1"]


def test_the_hover_row_is_made_on_first_hover_in_the_place_kept_for_it(qtbot, make_window):
    """The row's buttons are made when first wanted; the place kept for them is exactly their
    height, so the first hover moves nothing (at the window's text sizes)."""
    window, _engine = window_with(make_window, answers(1))
    ask(qtbot, window, "q1")
    window.navigate("chat")
    for scale_key in (None, "ctrl+=", "ctrl+="):
        if scale_key:
            window.larger_text()
        for message in window.transcript.messages:
            qtbot.waitUntil(lambda m=message: m.action_row.isVisible())
        QApplication.processEvents()
        user, answer = window.transcript.messages
        if scale_key is None:
            assert not answer.action_row.built and not user.action_row.built
        heights = [m.action_row.height() for m in (user, answer)]
        tops = [m.action_row.y() for m in (user, answer)]
        QApplication.sendEvent(answer, QEnterEvent(QPointF(5, 5), QPointF(5, 5), QPointF(5, 5)))
        user.action_row.build()
        qtbot.waitUntil(lambda a=answer: a.regenerate.isVisible())
        QApplication.processEvents()
        assert [m.action_row.height() for m in (user, answer)] == heights
        assert [m.action_row.y() for m in (user, answer)] == tops
        assert answer.action_row.built and user.action_row.built
        window.conversations.open(window.chat.session.conversation_id)  # fresh widgets, rows not made


def test_the_thinking_block_times_itself_live_and_says_how_long_after(qtbot, make_window):
    stream = [("reasoning", "mulling ")] * 30 + [("answer", "done ")] * 5
    window, engine = window_with(make_window, Turn(answer="done " * 5, reasoning="mulling " * 30, stream=stream),
                                 rate=60)
    window.composer.input.setPlainText("think")
    seen: list[str] = []
    with qtbot.waitSignal(window.chat.reply_finished, timeout=10_000):
        window.chat.send()
        qtbot.waitUntil(lambda: window.transcript.streaming is not None
                        and window.transcript.streaming.reasoning_toggle.text().startswith("Thinking… ")
                        and float(window.transcript.streaming.reasoning_toggle.text().split()[1]) >= 0.2,
                        timeout=5000)
        seen.append(window.transcript.streaming.reasoning_toggle.text())
    answer = window.transcript.messages[-1]
    text = answer.reasoning_toggle.text()
    assert seen[0].endswith(" s") and text.startswith("Thought for ") and text.endswith(" s")
    assert 0.3 <= float(text.split()[2]) <= 3.0 and not answer.reasoning_toggle.isChecked()  # folded
    stored = window.store.messages(window.chat.session.conversation_id)[-1]
    assert abs(stored.stats["thinking_seconds"] - float(text.split()[2])) <= 0.05
    window.conversations.open(window.chat.session.conversation_id)
    assert window.transcript.messages[-1].reasoning_toggle.text() == text  # the same words when reopened


def test_send_becomes_stop_while_a_reply_is_written(qtbot, make_window):
    window, engine = window_with(make_window, Turn(answer="slow"), gated=True)
    composer = window.composer
    assert composer.send_button.isVisibleTo(window) and not composer.stop_button.isVisibleTo(window)
    composer.input.setPlainText("hold on")
    window.chat.send()
    assert not composer.send_button.isVisibleTo(window) and composer.stop_button.isVisibleTo(window)
    assert composer.stop_button.isEnabled() and "Stop" in composer.stop_button.toolTip()
    with qtbot.waitSignal(window.chat.reply_finished, timeout=10_000):
        engine.release()
    assert composer.send_button.isVisibleTo(window) and not composer.stop_button.isVisibleTo(window)


def test_the_composer_grows_with_the_text_up_to_ten_lines(qtbot, make_window):
    from app.ui.widgets.composer import MAX_LINES

    window = make_window()
    box = window.composer.input
    one = box.height()
    box.setPlainText("a\nb\nc")
    three = box.height()
    box.setPlainText("\n".join("x" * 40))
    most = box.height()
    box.setPlainText("\n".join("y" * 80))
    assert one < three < most and box.height() == most
    assert most - one == (MAX_LINES - 1) * box.fontMetrics().lineSpacing()


def test_attached_files_go_into_the_message_and_show_as_removable_chips(qtbot, make_window, tmp_path):
    window, engine = window_with(make_window, answers(1))
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\nthe port is 8080\n", encoding="utf-8")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\xff\x00")
    extra = tmp_path / "extra.txt"
    extra.write_text("dropped later", encoding="utf-8")
    composer = window.composer
    composer.attach_files([notes, binary, extra])
    assert [name for name, _text in composer.attachments] == ["notes.md", "extra.txt"]  # not the binary
    assert "blob.bin" in window.error_banner.text()
    chips = composer._chips
    assert [c.name for c in chips] == ["notes.md", "extra.txt"] and "Remove" in chips[1].remove.toolTip()
    chips[1].remove.click()
    assert [name for name, _text in composer.attachments] == ["notes.md"]
    ask(qtbot, window, "Which port?")
    sent = engine.requests[-1].messages[-1]["content"]
    assert sent.startswith("Which port?") and "notes.md" in sent and "the port is 8080" in sent
    assert "dropped later" not in sent and composer.attachments == [] and composer._chips == []


def test_the_font_scale_changes_the_text_and_is_remembered(qtbot, make_window, tmp_path):
    from app.base.settings import Settings
    from app.ui.base import theme

    window = make_window()
    try:
        before = window.transcript.font().pixelSize()
        window.larger_text()
        window.larger_text()
        assert theme.font_scale() == 1.2 and window.settings.get("ui.font_scale") == 1.2
        assert QApplication.instance().font().pixelSize() > before
        assert f"font-size: {round(14 * 1.2)}px" in QApplication.instance().styleSheet()
        assert Settings.load().get("ui.font_scale") == 1.2  # saved
        window.reset_text()
        assert theme.font_scale() == 1.0 and Settings.load().get("ui.font_scale") == 1.0
        window.smaller_text()
        theme.set_font_scale(1.0)  # as a new start of the app finds it
        again = make_window()
        assert again.settings.get("ui.font_scale") == 0.9 and theme.font_scale() == 0.9
    finally:
        theme.set_font_scale(1.0)


def test_the_shortcuts_sheet_lists_every_shortcut_of_the_window(qtbot, make_window):
    from PySide6.QtGui import QKeySequence, QShortcut

    from app.ui.widgets.shortcuts_sheet import ShortcutsSheet

    window = make_window()
    bound = {s.key().toString() for s in window.findChildren(QShortcut)}
    for keys in ("Ctrl+N", "Ctrl+K", "Ctrl+L", "Esc", "Ctrl+Shift+C", "Ctrl+R", "Ctrl+/", "Ctrl+=", "Ctrl+-", "Ctrl+0"):
        assert QKeySequence(keys).toString() in bound, keys
    window.show_shortcuts()
    sheet = window.shortcuts_sheet
    assert isinstance(sheet, ShortcutsSheet) and sheet.isVisible()
    listed = {QKeySequence(keys).toString() for keys, _what in sheet.rows}
    assert bound <= listed
    sheet.close()


def test_copy_last_answer_and_regenerate_from_the_keyboard(qtbot, make_window):
    window, _engine = window_with(make_window, answers(2))
    ask(qtbot, window, "q1")
    window.shortcuts["Ctrl+Shift+C"].activated.emit()
    assert QApplication.clipboard().text() == "answer 1"
    with qtbot.waitSignal(window.chat.reply_finished, timeout=10_000):
        window.shortcuts["Ctrl+R"].activated.emit()
    assert window.transcript.messages[-1].content == "answer 2" and window.transcript.messages[-1].version == (1, 2)


def test_the_thinking_toggle_is_off_with_a_reason_until_a_model_is_loaded(make_window):
    window = make_window()
    toggle = window.composer.thinking
    assert not toggle.isEnabled() and "Load a model" in toggle.toolTip()
    assert not window.composer.thinking_budget.isEnabled()
