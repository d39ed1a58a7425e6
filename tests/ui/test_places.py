"""The places around the chat (issue 53): the icon rail goes to each place and lights it, the
conversations belong to Chat, the old page names reach their new homes, My models lists this
machine's files and deletes one only when the user says yes, the settings panel is the Settings
page and comes back to the chat's side panel, and the welcome's first steps are one click each."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton

from app.ui.widgets.welcome import machine_lines
from tests.helpers.gguf_models import write_llama, write_qwen35moe
from tests.ui.conftest import no_gpu


def click(qtbot, widget) -> None:
    qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)


def test_the_rail_goes_to_each_place_and_lights_it(qtbot, make_window, clover_home):
    w = make_window()
    for place, page in (("models", "hub"), ("server", "server"), ("scenarios", "scenarios"),
                        ("settings", "settings"), ("chat", "chat")):
        click(qtbot, w.rail.buttons[place])
        assert w.current_page() == page
        assert [n for n, b in w.rail.buttons.items() if b.isChecked()] == [place]
        assert w.sidebar.isVisible() == (place == "chat")  # the conversations are Chat's
    assert "Ctrl+L" in w.rail.buttons["chat"].toolTip()
    for old, place in (("hub", "models"), ("setup", "models"), ("engines", "models"), ("welcome", "chat")):
        w.navigate(old)
        assert w.current_page() == old and w.rail.buttons[place].isChecked()
    w.navigate("engines")
    w.navigate("chat")
    click(qtbot, w.rail.buttons["models"])
    assert w.current_page() == "engines"  # Models opens on the tab shown last
    w.navigate("tune")
    assert not any(b.isChecked() for b in w.rail.buttons.values())
    w.focus_search()  # Ctrl+K elsewhere: back to Chat, where the conversations are
    assert w.current_page() == "chat" and w.sidebar.isVisible()


def test_my_models_lists_the_files_and_deletes_one_when_asked(qtbot, make_window, clover_home):
    w = make_window()
    folder = w.model.library.folder
    folder.mkdir(parents=True, exist_ok=True)
    small = write_llama(folder / "tiny-chat.Q8_0.gguf")
    write_qwen35moe(folder / "tiny-moe.gguf")
    (clover_home / "elsewhere").mkdir(parents=True)
    by_hand = write_llama(clover_home / "elsewhere" / "opened-by-hand.gguf")
    w.model.library.used(by_hand)
    w.navigate("my_models")
    view = w.my_models_view
    assert w.current_page() == "my_models" and w.rail.buttons["models"].isChecked()
    assert set(view.rows) == {small.resolve(), (folder / "tiny-moe.gguf").resolve(), by_hand.resolve()}
    texts = {p.name: " ".join(label.text() for label in row.findChildren(QLabel)) for p, row in view.rows.items()}
    assert "llama" in texts["tiny-chat.Q8_0.gguf"] and "Q8_0" in texts["tiny-chat.Q8_0.gguf"]
    assert "qwen35moe" in texts["tiny-moe.gguf"] and "Here: on the CPU" in texts["tiny-moe.gguf"]
    assert "opened by hand" in texts["opened-by-hand.gguf"] and "used just now" in texts["opened-by-hand.gguf"]
    asked: list[str] = []
    answer = [False]
    view.ask = lambda _parent, text: asked.append(text) or answer[0]
    entry = next(m for m in w.model.library.models() if m.path == small.resolve())
    assert not view.delete(entry) and small.exists()  # "Cancel": the file stays
    assert "frees 1 MB" in asked[0] and str(small.resolve()) in asked[0]
    answer[0] = True
    assert view.delete(entry) and not small.exists()
    assert small.resolve() not in view.rows and len(view.rows) == 2
    with qtbot.waitSignal(view.load_requested) as loaded:
        click(qtbot, view.rows[by_hand.resolve()].findChildren(QPushButton)[0])  # Load
    assert loaded.args == [str(by_hand.resolve())]


def test_the_welcome_first_steps_are_one_click_each(qtbot, make_window, clover_home, monkeypatch):
    w = make_window()
    started: list[bool] = []
    searched: list[str] = []
    monkeypatch.setattr(w.setup_view, "start", lambda confirmed=False: started.append(confirmed))
    monkeypatch.setattr(w.hub_view, "search", lambda query=None: searched.append(query or ""))
    opened: list[str] = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *args: opened.append(args[1]) or ("", ""))
    click(qtbot, w.welcome.test_button)  # the small test model: its set-up starts
    assert w.current_page() == "setup" and w.setup_view.entry().id == "smollm2-135m" and started == [False]
    w.navigate("welcome")
    click(qtbot, w.welcome.clover_button)  # Clover: no file known yet, so the Hub is searched for it
    assert w.current_page() == "hub" and searched == ["Clover-35B-A3B GGUF"]
    w.navigate("welcome")
    click(qtbot, w.welcome.open_button)
    assert opened == ["Open a GGUF model"]


def test_the_machine_is_said_in_plain_words_once():
    lines = [text for _style, text in machine_lines(no_gpu(), None, "no such library")]
    assert lines[0].startswith("No NVIDIA GPU: models run on the CPU")
    assert sum(text.count("CPU") for text in lines) == 1
