"""Issue 52, item 5: the conversation list through the real window: date groups, rename in place,
pin, delete with an Undo (and without, and closing the window meanwhile), search across titles and
messages, export from a conversation's menu."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QFileDialog, QLineEdit

from app.chat.store import Store

DAY = 86400


def make_store(path) -> tuple[Store, dict[str, int]]:
    """Four conversations: one today, one yesterday, one last week, one long ago."""
    store = Store(path)
    ids = {}
    for title, age, words in (("Old notes", 40 * DAY, "Shopping list"), ("Last week", 3 * DAY, "A poem about rain"),
                              ("Weather in Lisbon", DAY, "Sunny and 24 degrees."), ("Parser", 0, "Rename the parser")):
        cid = store.create(title)
        store.add(cid, "user", f"Tell me about {title.lower()}")
        store.add(cid, "assistant", words)
        with store.db:
            store.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time() - age, cid))
        ids[title] = cid
    return store, ids


def action(menu, text: str):
    return next(a for a in menu.actions() if a.text() == text)


def titles(window) -> list[str]:
    return [it.text() for it in window.sidebar.conversations.rows()]


def test_grouped_by_date_newest_first(make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    listing = w.sidebar.conversations
    assert listing.headers() == ["Today", "Yesterday", "Previous 7 days", "Older"]
    assert titles(w) == ["Parser", "Weather in Lisbon", "Last week", "Old notes"]
    assert listing.group_of(ids["Weather in Lisbon"]) == "Yesterday"
    header = listing.item(0)
    assert not header.flags() & Qt.ItemFlag.ItemIsSelectable  # a header cannot be chosen


def test_rename_in_place_persists(qtbot, make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    action(w.sidebar.row_menu(ids["Last week"]), "Rename").trigger()  # the menu's Rename edits the row
    editor = w.sidebar.conversations.findChild(QLineEdit)
    assert editor is not None and editor.text() == "Last week"
    editor.setText("A poem, renamed")
    qtbot.keyClick(editor, Qt.Key.Key_Return)  # the delegate commits on the next turn of the loop
    qtbot.waitUntil(lambda: store.conversation(ids["Last week"]).title == "A poem, renamed", timeout=2000)
    assert "A poem, renamed" in titles(w)
    w.close()
    again = make_window(store=Store(tmp_path / "c.db"))  # a restart
    assert "A poem, renamed" in titles(again) and "Last week" not in titles(again)


def test_an_empty_title_is_not_a_rename(qtbot, make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    item = w.sidebar.conversations.item_of(ids["Parser"])
    item.setText("   ")  # what an editor emptied by the user commits
    assert item.text() == "Parser" and store.conversation(ids["Parser"]).title == "Parser"


def test_pin_moves_a_conversation_to_the_pinned_group_and_back(make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    listing = w.sidebar.conversations
    action(w.sidebar.row_menu(ids["Old notes"]), "Pin").trigger()
    assert store.conversation(ids["Old notes"]).pinned
    assert listing.headers()[0] == "Pinned" and listing.group_of(ids["Old notes"]) == "Pinned"
    assert titles(w)[0] == "Old notes"
    action(w.sidebar.row_menu(ids["Old notes"]), "Unpin").trigger()
    assert "Pinned" not in listing.headers() and listing.group_of(ids["Old notes"]) == "Older"


def test_delete_then_undo_restores_it_with_its_messages(qtbot, make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    w.conversations.undo_ms = 200
    cid = ids["Parser"]
    assert w.chat.session.conversation_id == cid  # the last one is open at start
    action(w.sidebar.row_menu(cid), "Delete").trigger()
    assert "Parser" not in titles(w) and w.transcript.messages == []
    assert w.sidebar.undo_bar.isVisible() and "Parser" in w.sidebar.undo_label.text()
    qtbot.mouseClick(w.sidebar.undo_button, Qt.MouseButton.LeftButton)
    assert not w.sidebar.undo_bar.isVisible()
    assert titles(w)[0] == "Parser"
    assert [m.content for m in store.messages(cid)] == ["Tell me about parser", "Rename the parser"]
    assert [m.content for m in w.transcript.messages] == ["Tell me about parser", "Rename the parser"]
    qtbot.wait(400)
    assert cid in [c.id for c in store.conversations()]  # the Undo stopped the timer: it stays


def test_delete_without_undo_removes_it_when_the_time_is_up(qtbot, make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    w.conversations.undo_ms = 200
    cid = ids["Weather in Lisbon"]
    action(w.sidebar.row_menu(cid), "Delete").trigger()
    assert cid in [c.id for c in store.conversations()]  # Undo is still offered: nothing deleted yet
    qtbot.waitUntil(lambda: cid not in [c.id for c in store.conversations()], timeout=3000)
    assert store.messages(cid) == [] and not w.sidebar.undo_bar.isVisible()
    assert titles(w) == ["Parser", "Last week", "Old notes"]


def test_a_second_delete_finishes_the_first(make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    action(w.sidebar.row_menu(ids["Old notes"]), "Delete").trigger()
    action(w.sidebar.row_menu(ids["Last week"]), "Delete").trigger()
    assert ids["Old notes"] not in [c.id for c in store.conversations()]
    w.sidebar.undo_button.click()  # undoes the last one only
    assert titles(w) == ["Parser", "Weather in Lisbon", "Last week"]


def test_closing_the_window_while_undo_is_offered_deletes_it_whole(make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    action(w.sidebar.row_menu(ids["Last week"]), "Delete").trigger()
    w.close()
    again = Store(tmp_path / "c.db")
    assert [c.title for c in again.conversations()] == ["Parser", "Weather in Lisbon", "Old notes"]
    orphans = again.db.execute("SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (ids["Last week"],))
    assert orphans.fetchone()[0] == 0  # its messages went with it: nothing half deleted
    again.close()


def test_search_finds_a_conversation_by_a_word_in_a_message(qtbot, make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    w.sidebar.search.setText("old words")
    w.shortcuts["Ctrl+K"].activated.emit()  # the window's Ctrl+K: the search box, its text selected
    qtbot.waitUntil(lambda: QApplication.focusWidget() is w.sidebar.search, timeout=2000)
    assert w.sidebar.search.selectedText() == "old words"
    qtbot.keyClicks(w.sidebar.search, "degrees")  # only in the answer, not in the title
    assert titles(w) == ["Weather in Lisbon"]
    w.sidebar.search.setText("tell rain")  # every word, each anywhere in the conversation
    assert titles(w) == ["Last week"]
    w.sidebar.search.setText("nowhere")
    assert titles(w) == [] and w.sidebar.empty.isVisible()
    w.sidebar.search.clear()
    assert len(titles(w)) == 4 and not w.sidebar.empty.isVisible()


def test_export_from_a_conversations_menu_writes_that_conversation(make_window, tmp_path, monkeypatch):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    out = tmp_path / "out.md"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    action(w.sidebar.row_menu(ids["Old notes"]), "Export as Markdown…").trigger()  # not the open one
    assert out.read_text().startswith("# Old notes") and "Shopping list" in out.read_text()
    out = tmp_path / "out.json"
    action(w.sidebar.row_menu(ids["Weather in Lisbon"]), "Export as JSON…").trigger()
    assert '"title": "Weather in Lisbon"' in out.read_text()


def test_the_rows_dots_and_a_right_click_open_its_menu(qtbot, make_window, tmp_path):
    from app.ui.widgets.conversation_list import _more_rect

    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    shown: list[list[str]] = []
    w.sidebar._show_menu = lambda cid, _pos: shown.append([a.text() for a in w.sidebar.row_menu(cid).actions()])
    listing = w.sidebar.conversations
    rect = listing.visualItemRect(listing.item_of(ids["Last week"]))
    qtbot.mouseClick(listing.viewport(), Qt.MouseButton.LeftButton, pos=_more_rect(rect).center())  # the "⋯"
    assert shown == [["Rename", "Pin", "", "Export as Markdown…", "Export as JSON…", "", "Delete"]]
    qtbot.mouseClick(listing.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())  # the title: no menu
    assert len(shown) == 1 and listing.selectedItems()[0].text() == "Last week"
    listing.customContextMenuRequested.emit(rect.center())  # what a right-click (or the menu key) sends
    assert len(shown) == 2
    listing.customContextMenuRequested.emit(listing.visualItemRect(listing.item(0)).center())  # a header: none
    assert len(shown) == 2


def test_the_delete_key_deletes_the_current_row_with_undo(qtbot, make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    listing = w.sidebar.conversations
    listing.setCurrentItem(listing.item_of(ids["Old notes"]))
    qtbot.keyClick(listing, Qt.Key.Key_Delete)
    assert "Old notes" not in titles(w) and w.sidebar.undo_bar.isVisible()
    w.sidebar.undo_button.click()
    assert "Old notes" in titles(w)


def test_a_refresh_during_a_rename_waits_for_the_editor(qtbot, make_window, tmp_path):
    store, ids = make_store(tmp_path / "c.db")
    w = make_window(store=store)
    w.sidebar.conversations.start_rename(ids["Old notes"])
    editor = w.sidebar.conversations.findChild(QLineEdit)
    other = store.create("A reply just finished elsewhere")
    w.conversations.refresh()  # what a finished reply does: the editor stays open
    assert editor.isVisible() and "A reply just finished elsewhere" not in titles(w)
    editor.setText("Shopping")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: store.conversation(ids["Old notes"]).title == "Shopping", timeout=2000)
    qtbot.waitUntil(lambda: "A reply just finished elsewhere" in titles(w), timeout=2000)  # then it is shown
    assert "Shopping" in titles(w) and w.sidebar.conversations.group_of(other) == "Today"
