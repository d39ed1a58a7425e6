"""Issue 28, item 7: the smaller things a new user trips on, each through the real window."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QLabel

from app.engine.contract import ModelInfo
from app.machine.llama_load import LoadSettings

INSIDE = "Smollm2 135M 8k Lc100K Mix1 Ep2"  # SmolLM2's general.name: a training-run label


def loaded(window, path: str = "/models/SmolLM2-135M-Instruct-Q8_0.gguf", name: str = INSIDE) -> ModelInfo:
    info = ModelInfo(path, name, "llama", 2048, True, True, LoadSettings(n_ctx=2048))
    window.model._on_loaded(info)
    return info


def test_the_model_bar_names_the_file_not_the_name_inside_it(make_window):
    w = make_window()
    loaded(w)
    assert w.model_bar.label.text().startswith("SmolLM2-135M-Instruct-Q8_0 · llama · 2,048-token context")
    assert INSIDE not in w.model_bar.label.text()
    assert f"Named inside the file: {INSIDE}" in w.model_bar.details_text.text()  # still there, in Details


def test_the_server_button_stays_put_and_the_url_is_never_cut(qtbot, make_window):
    w = make_window()
    w.resize(760, 600)
    qtbot.wait(50)
    button = w.status.server_button

    def x() -> int:
        qtbot.wait(30)
        return button.mapTo(w, QPoint(0, 0)).x()

    before = x()
    w.status.readout.setText("1234.5 tok/s · first token 12.34 s · 12345 tokens")
    assert x() == before  # the live speed's text grows: the button does not move
    w.status.readout.setText("9 tok/s")
    assert x() == before
    w.server.toggle()  # no model loaded: the server answers 503
    try:
        assert button.text() == "Stop server" and x() == before
        url = w.server.url
        assert w.status.server_label.text().startswith(f"{url} answers 503")
        shown = QLabel.text(w.status.server_label)  # what the label shows, elided to its width
        assert shown.startswith(url) and w.status.server_label.width() < w.status.server_label.fontMetrics(
        ).horizontalAdvance(w.status.server_label.text()), shown  # narrow: the end is elided, not the port
    finally:
        w.server.toggle()
    assert button.text() == "Start local server" and x() == before


def test_the_windows_server_is_held_to_the_serve_commands_rules(qtbot, make_window):
    """A port outside 1-65535 (the form allows 1024-65535; settings set from code or a future form are
    checked all the same) is refused with a sentence in the banner, and no server starts."""
    w = make_window()
    w.show()
    w.settings.values["server.port"] = 70000  # past Option.check, as no form can set it
    w.server.toggle()
    assert w.server.server is None and w.status.server_button.text() == "Start local server"
    assert w.error_banner.isVisible()
    assert w.error_banner.text().startswith("The local server port must be 1 to 65535, not 70000.")


def _ink(widget) -> int:
    """How far the widget's most visible pixel stands from the composer card's colour (the largest
    sum of |dR|+|dG|+|dB|)."""
    from PySide6.QtGui import QColor

    from app.ui.base import theme

    image = widget.parentWidget().grab(widget.geometry()).toImage()
    card = QColor(theme.color("composer_bg"))
    return max(abs(p.red() - card.red()) + abs(p.green() - card.green()) + abs(p.blue() - card.blue())
               for x in range(image.width()) for y in range(image.height()) for p in [image.pixelColor(x, y)])


def test_the_disabled_thinking_toggle_looks_disabled_and_says_why(qtbot, make_window):
    from PySide6.QtWidgets import QApplication

    from app.ui.base import theme

    w = make_window()
    info = ModelInfo("/models/plain.gguf", "plain", "llama", 2048, True, False, LoadSettings(n_ctx=2048))
    w.model._on_loaded(info)
    box = w.composer.thinking
    assert not box.isEnabled() and "no thinking switch" in box.toolTip()
    try:
        for name in ("light", "dark"):
            theme.apply(QApplication.instance(), name)
            qtbot.wait(20)
            box.setChecked(False)
            disabled = _ink(box)  # seen on the card, whose colour shows through a disabled toggle
            box.setEnabled(True)
            enabled = _ink(box)
            box.setEnabled(False)
            # seen when on, plainly fainter when off (its label and icon muted, not only greyed a little)
            assert enabled >= 250 and disabled <= enabled - 150, (name, enabled, disabled)
    finally:
        theme.apply(QApplication.instance(), "light")
    w.model._on_loaded(ModelInfo("/models/q.gguf", "q", "qwen3", 2048, True, True, LoadSettings(n_ctx=2048)))
    assert box.isEnabled() and "enable_thinking" in box.toolTip() and "no thinking switch" not in box.toolTip()


def test_the_thinking_budget_reaches_the_request_and_is_kept_for_the_model(qtbot, make_window):
    w = make_window()
    w.model._on_loaded(ModelInfo("/models/q.gguf", "q", "qwen3", 2048, True, True, LoadSettings(n_ctx=2048)))
    box, budget = w.composer.thinking, w.composer.thinking_budget
    assert box.isChecked() and budget.isEnabled() and budget.value() == 0 and budget.text() == "no limit"
    sent = []
    w.model.engine_thread.request_generate.connect(sent.append)
    w.model.engine_thread.request_generate.disconnect(w.model.engine_thread.worker.generate)  # nothing runs
    budget.setValue(512)
    w.chat._generate()
    assert sent[-1].enable_thinking is True and sent[-1].thinking_budget == 512
    assert w.settings.get("chat.thinking_budget", w.model.key) == 512  # kept for this model, like sampling
    w.chat._set_generating(False)
    box.setChecked(False)
    assert not budget.isEnabled()
    w.chat._generate()
    assert sent[-1].enable_thinking is False and sent[-1].thinking_budget is None
    w.chat._set_generating(False)
    box.setChecked(True)
    budget.setValue(0)
    w.chat._generate()
    assert sent[-1].enable_thinking is True and sent[-1].thinking_budget is None  # 0: no limit
    w.chat._set_generating(False)
    w.model._on_loaded(ModelInfo("/models/q.gguf", "q", "qwen3", 2048, True, True, LoadSettings(n_ctx=2048)))
    assert budget.value() == 0
    w.settings.set("chat.thinking_budget", 2048, w.model.key)
    w.model._on_loaded(ModelInfo("/models/q.gguf", "q", "qwen3", 2048, True, True, LoadSettings(n_ctx=2048)))
    assert budget.value() == 2048  # read back at the next load


def test_the_tool_chip_and_cards_draw_the_tool_icon_not_an_emoji(make_window):
    from PySide6.QtCore import Qt

    from app.ui.widgets.chat_view import ToolCallCard

    w = make_window()
    loaded(w)
    w.tools_panel._load_example("weather")
    assert any(c.startswith("🔧 ") and "tool(s) offered" in c for c in w.composer.chip_list)
    label = w.composer.chips
    assert label.textFormat() == Qt.TextFormat.RichText and "🔧" not in label.text()
    assert "tool.svg" in label.text() and "tool(s) offered" in label.text()
    card = ToolCallCard({"function": {"name": "get_weather", "arguments": {}}}, None, None, False)
    assert "🔧" not in card.title.text() and "tool.svg" in card.title.text() and "get_weather" in card.title.text()


def test_the_last_conversation_is_back_at_start(qtbot, make_window, tmp_path):
    from app.chat.store import Store

    store = Store(tmp_path / "conversations.db")
    older = store.create("Older chat")
    store.add(older, "user", "An old question")
    last = store.create("Last chat")
    store.add(last, "user", "What is FizzBuzz?")
    store.add(last, "assistant", "A counting game.")
    w = make_window(store=store)
    assert w.chat.session.conversation_id == last
    assert [m.content for m in w.transcript.messages] == ["What is FizzBuzz?", "A counting game."]
    selected = w.sidebar.conversations.selectedItems()
    assert [i.text() for i in selected] == ["Last chat"]
    assert w.current_page() == "welcome"  # the welcome page stays first; Chat shows the conversation


def test_scenario_results_are_read_only_and_a_picked_row_shows_the_answer(qtbot, make_window):
    from PySide6.QtCore import Qt

    from app.bench.scenarios import Result

    w = make_window()
    w.navigate("scenarios")
    view = w.scenarios_view
    view.table.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.wait(20)
    assert view.table.selectedItems() == [] and view.table.currentRow() == -1  # nothing looks picked
    row = [s.id for s in view.scenarios].index("capital-australia")
    view._on_result(Result("capital-australia", "Capital of Australia", True, "says Canberra", 1.2,
                           answer="The capital of Australia is Canberra."))
    for col in range(5):
        item = view.table.item(row, col)
        assert not item.flags() & Qt.ItemFlag.ItemIsEditable, col
    assert view.answer.toPlainText() == ""
    view.table.selectRow(row)
    assert "The capital of Australia is Canberra." in view.answer.toPlainText()
    assert view.answer.isVisible() and view.answer.isReadOnly()


def test_details_of_a_small_cpu_model_say_mib_and_line_up(tmp_path, make_window):
    """Details for a tiny MoE on the CPU: sizes in MiB (not "0.00 GiB"), no "experts in RAM 0 of 4
    blocks" beside "the whole model in system RAM", and the padded columns in a fixed-pitch font."""
    from app.gguf.gguf_file import read_header
    from app.gguf.model_facts import facts_from_header
    from app.machine.gpu import probe_with
    from app.machine.system_memory import SystemMemory
    from app.model.plan import GiB, PlanRequest, make_plan
    from tests.helpers.fakes import FakeNVML
    from tests.helpers.gguf_models import write_qwen35moe

    facts = facts_from_header(read_header(write_qwen35moe(tmp_path / "tiny.gguf")))
    plan = make_plan(facts, probe_with(FakeNVML([])), SystemMemory(16 * GiB, 12 * GiB), PlanRequest())
    assert plan.device == "cpu" and plan.n_expert_blocks == 4
    text = "\n".join(plan.lines())
    assert not re.search(r"\b0\.0+ GiB", text) and " MiB" in text, text
    assert "experts in RAM" not in text, text
    w = make_window()
    w.model_bar.set_model("tiny", text, plan)
    label = w.model_bar.details_text
    metrics = label.fontMetrics()
    assert metrics.horizontalAdvance("iiii") == metrics.horizontalAdvance("MMMM")  # fixed pitch
    columns = {metrics.horizontalAdvance(line[:19]) for line in plan.lines() if line.startswith("  ") and
               line[2:].split("  ")[0] in ("weights in RAM", "KV cache", "compute buffers", "RAM needed")}
    assert len(columns) == 1  # the values start at the same x on every line


def _set_up_before(model_id: str, path) -> None:
    """The set-up state a finished set-up leaves: every step done, the file at `path`."""
    from app.fetch.setup_pipeline import STEPS, SetupState, save_state

    save_state(SetupState(model_id, done={s: f"{s}: done" for s in STEPS}, final_path=str(path)))


def test_find_a_model_marks_a_file_on_disk_and_loads_it_saying_so(qtbot, make_window, tmp_path, monkeypatch):
    """A file set up before is marked in the file list; its button says Load, and a click says on the
    page that it is already there (no silent jump) and loads it instead of downloading it again."""
    from app.fetch import hub
    from app.fetch.catalog import entry_for_hub
    from tests.helpers.fake_hub import fake_hub
    from tests.helpers.hub_repos import hub_state

    with fake_hub(hub_state(tmp_path / "hub")) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        hub.CACHE._mem.clear()
        w = make_window()
        view = w.hub_view
        w.navigate("hub")
        with qtbot.waitSignal(view.planned, timeout=60_000):
            view.open_repo("clover-lab/tiny-llama-GGUF")
        first = view.plans[0]
        there = tmp_path / "models" / first.file.first.path
        there.parent.mkdir(parents=True)
        there.write_bytes(b"GGUF")
        _set_up_before(entry_for_hub("clover-lab/tiny-llama-GGUF", first.file).id, there)
        with qtbot.waitSignal(view.planned, timeout=60_000):
            view.replan()
        names = [view.files.item(r, 0).text() for r in range(view.files.rowCount())]
        assert "on disk" in names[0] and not any("on disk" in n for n in names[1:]), names
        view.files.selectRow(1)
        assert view.setup_button.text() == "Download and set up"
        view.files.selectRow(0)
        assert "on disk" in view.setup_button.text() and str(there) in view.detail.text()
        loads, setups = [], []
        monkeypatch.setattr(w.model, "load", loads.append)
        view.setup_requested.connect(setups.append)
        view.setup_button.click()
        assert loads == [str(there)] and not setups  # no second download
        assert "already on disk" in view.status.text()
        w.close()


def test_set_up_offers_load_for_a_ready_model(qtbot, make_window, tmp_path, monkeypatch):
    """A catalog model set up before: the button says Load, not Set up, and loads the file."""
    w = make_window()
    view = w.setup_view
    w.navigate("setup")
    entry = view.entries[0]
    view.select(entry.id)
    assert view.start_button.text() in ("Set up", "Find it on the Hub")
    there = tmp_path / "ready.gguf"
    there.write_bytes(b"GGUF")
    _set_up_before(entry.id, there)
    view.refresh(select=entry.id)
    assert view.start_button.text() == "Load" and str(there) in view.start_button.toolTip()
    loads = []
    monkeypatch.setattr(w.model, "load", loads.append)
    view.start_button.click()
    assert loads == [str(there)] and view.op is None  # loaded, not set up again
    there.unlink()  # gone from the disk: set it up again
    view.refresh(select=entry.id)
    assert view.start_button.text() in ("Set up", "Find it on the Hub")
    w.close()


def test_edit_keeps_the_conversation_until_send_can_be_undone_and_types_on_at_the_end(qtbot, make_window,
                                                                                   monkeypatch):
    w = make_window()
    loaded(w)
    chat, store, box = w.chat, w.store, w.composer.input
    chat.session.add_user("first question", "")
    cid = chat.session.conversation_id
    store.add(cid, "assistant", "first answer")
    chat.session.add_user("second question", "")
    store.add(cid, "assistant", "second answer")
    for role, text in (("user", "first question"), ("assistant", "first answer"),
                       ("user", "second question"), ("assistant", "second answer")):
        chat.transcript.add_message(role, text)
    box.setPlainText("a draft")
    chat.edit_message(2)
    assert box.toPlainText() == "second question"
    assert box.textCursor().position() == len("second question")  # the cursor at the end, not the start
    assert len(store.messages(cid)) == 4 and len(chat.transcript.messages) == 4  # nothing dropped yet
    assert w.composer.edit_bar.isVisibleTo(w)
    w.composer.cancel_edit_button.click()  # undo: all as it was, the draft back
    assert box.toPlainText() == "a draft" and not w.composer.edit_bar.isVisibleTo(w)
    assert [m.content for m in store.messages(cid)][-1] == "second answer" and len(chat.transcript.messages) == 4
    chat.edit_message(2)
    box.undo()  # Ctrl+Z in the box brings back the draft too
    assert box.toPlainText() == "a draft"
    chat.edit_message(2)
    box.textCursor().insertText(", again")  # types on at the end
    generated = []
    monkeypatch.setattr(chat, "_generate", lambda: generated.append(True))
    chat.send()  # now the edited message and what followed it are replaced
    assert [m.content for m in store.messages(cid)] == ["first question", "first answer", "second question, again"]
    assert [m.content for m in chat.transcript.messages] == [m.content for m in store.messages(cid)]
    assert generated and not w.composer.edit_bar.isVisibleTo(w) and chat.editing is None


RESTART = r"""
import json
from PySide6.QtWidgets import QApplication
from PySide6.QtGui import QGuiApplication
app = QApplication([])
from app.ui.application import configure
configure(app)
from tests.ui.conftest import no_gpu
from app.ui.main_window import MainWindow
w = MainWindow(gpus=no_gpu())
w.show()
for _ in range(5):
    app.processEvents()
area, frame = QGuiApplication.primaryScreen().availableGeometry(), w.frameGeometry()
print(json.dumps({"size": [w.width(), w.height()], "inside": area.contains(frame), "frame": str(frame),
                  "area": str(area)}))
w.close()
"""


@pytest.mark.slow  # starts the app several times
def test_at_1_5x_the_window_and_its_frame_fit_the_screen_start_after_start(clover_home):
    """At QT_SCALE_FACTOR=1.5 the first window and the restored one keep their frame (title bar
    included) inside the screen's available area, and a restart restores the same size."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {"QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": "1.5", "CLOVER_HOME": str(clover_home),
           "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", RESTART], capture_output=True, text=True, cwd=ROOT, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert all(r["inside"] for r in runs), runs
    assert runs[0]["size"] == runs[1]["size"] == runs[2]["size"], runs
