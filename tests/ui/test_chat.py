"""The chat, end to end: the real window, the engine thread and SmolLM2 on the CPU."""

from __future__ import annotations

import json
import os
import signal

import pytest
from PySide6.QtCore import Qt

from app.chat.store import Store
from tests.helpers.gguf_models import write_deepseek_moe
from tests.helpers.ui_actions import load_model

SYSTEM = "You are a helpful assistant. Answer briefly."  # see tests/engine/test_inference_smoke.py


def load(qtbot, window, path, n_ctx=2048):
    assert load_model(qtbot, window, path, n_ctx).device == "cpu"


def ask(qtbot, window, text, timeout=120_000):
    window.composer.input.setPlainText(text)
    with qtbot.waitSignal(window.chat.reply_finished, timeout=timeout) as blocker:
        qtbot.mouseClick(window.composer.send_button, Qt.MouseButton.LeftButton)
    return blocker.args[0]


@pytest.mark.slow
def test_chat_streams_paris_and_survives_a_restart(qtbot, make_window, smollm2, artifacts_dir, clover_home):
    window = make_window()
    load(qtbot, window, smollm2)
    window.settings_panel.widgets["chat.system_prompt"].setPlainText(SYSTEM)
    window.settings_panel.widgets["sampling.temperature"].setValue(0.0)
    readouts: list[str] = []
    window.chat.readout_changed.connect(readouts.append)
    flushes_before = window.transcript.flushes

    reply = ask(qtbot, window, "What is the capital of France?")
    assert "Paris" in reply.text
    assert window.transcript.messages[-1].content == reply.text
    assert window.transcript.flushes > flushes_before  # painted while streaming, not only at the end
    assert readouts and "tok/s" in readouts[-1] and reply.stats.generation_tps > 0
    assert "tok/s" in window.transcript.messages[-1].stats_label.text()
    qtbot.wait(100)  # let the finished reply be laid out in the history before the screenshot
    window.grab().save(str(artifacts_dir / "chat_window.png"))

    md = clover_home / "chat.md"
    window.conversations.export(md, "md")
    assert "Paris" in md.read_text() and "## User" in md.read_text()
    window.conversations.export(clover_home / "chat.json", "json")
    data = json.loads((clover_home / "chat.json").read_text())
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
    window.close()

    again = make_window()  # a restart: the same data folder, a new window
    [row] = again.sidebar.conversations.rows()
    assert row.text() == "What is the capital of France?"
    row.setSelected(True)
    assert [m.role for m in again.transcript.messages] == ["user", "assistant"]
    assert "Paris" in again.transcript.messages[1].content
    assert again.settings_panel.widgets["chat.system_prompt"].toPlainText() == SYSTEM


@pytest.mark.slow
def test_stop_mid_reply(qtbot, make_window, smollm2):
    window = make_window()
    load(qtbot, window, smollm2)
    window.settings_panel.widgets["sampling.max_tokens"].setValue(400)
    window.settings_panel.widgets["sampling.temperature"].setValue(0.8)
    events = []

    def on_event(kind, text):
        events.append(text)
        if len(events) == 5:
            window.chat.stop()

    window.model.worker.streamed.connect(on_event)
    reply = ask(qtbot, window, "Write a very long story about a dragon and a knight.")
    assert reply.stats.stop_reason == "stopped"
    assert 5 <= reply.stats.generated_tokens < 40
    assert window.composer.stop_button.isEnabled() is False and window.composer.send_button.isEnabled()
    assert "stopped" in window.transcript.messages[-1].stats_label.text()


def test_thinking_toggle_changes_the_prompt(qtbot, make_window, tmp_path):
    model = write_deepseek_moe(tmp_path / "moe.gguf")  # its template knows enable_thinking
    window = make_window()
    load(qtbot, window, model, n_ctx=512)
    assert window.composer.thinking.isEnabled()
    window.settings_panel.widgets["sampling.max_tokens"].setValue(16)
    window.composer.thinking.setChecked(False)
    off = ask(qtbot, window, "Hello")
    assert off.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    window.conversations.new_chat()
    window.composer.thinking.setChecked(True)
    on = ask(qtbot, window, "Hello")
    assert on.prompt.endswith("<|im_start|>assistant\n") and "<think>" not in on.prompt
    assert on.stats.generated_tokens > 0


def test_edit_and_regenerate(qtbot, make_window, tmp_path):
    model = write_deepseek_moe(tmp_path / "moe.gguf")
    window = make_window()
    load(qtbot, window, model, n_ctx=512)
    window.settings_panel.widgets["sampling.max_tokens"].setValue(8)
    ask(qtbot, window, "first question")
    cid = window.chat.session.conversation_id
    with qtbot.waitSignal(window.chat.reply_finished, timeout=60_000):
        window.chat.regenerate(1)
    assert [m.role for m in window.store.messages(cid)] == ["user", "assistant"]
    window.chat.edit_message(0)
    assert window.composer.input.toPlainText() == "first question"
    assert [m.role for m in window.store.messages(cid)] == ["user", "assistant"]  # kept until Send
    ask(qtbot, window, "second question")
    assert [m.content for m in window.store.messages(cid)][0] == "second question"


def test_a_model_that_fails_to_load_is_reported(qtbot, make_window, tmp_path):
    window = make_window()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    with qtbot.waitSignal(window.error_shown, timeout=5000) as blocker:
        window.model.load(bad)
    assert "Cannot open bad.gguf" in blocker.args[0] and window.error_banner.isVisible()


def test_corrupt_database_is_moved_aside_and_reported(qtbot, make_window, clover_home):
    db = clover_home / "data" / "conversations.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not sqlite" * 100)
    window = make_window()
    assert window.error_banner.isVisible() and "moved to" in window.error_banner.text()
    aside = list(db.parent.glob("conversations.db.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == b"this is not sqlite" * 100
    assert window.store.conversations() == []
    assert isinstance(window.store, Store)


@pytest.mark.slow
def test_closing_the_window_mid_reply_stops_and_frees_the_model(qtbot, make_window, smollm2):
    window = make_window()
    load(qtbot, window, smollm2)
    window.settings_panel.widgets["sampling.max_tokens"].setValue(2000)
    window.settings_panel.widgets["sampling.temperature"].setValue(0.8)
    events = []
    window.model.worker.streamed.connect(lambda k, t: events.append(t))
    window.composer.input.setPlainText("Write a very long story about a lighthouse.")
    window.chat.send()
    qtbot.waitUntil(lambda: len(events) > 5, timeout=60_000)
    engine = window.model.engine
    assert engine.loaded and window.chat.generating
    pid = engine.pid
    window.close()  # stop the reply, free the model, join the engine thread
    assert not window.model.engine_thread.qthread.isRunning()
    assert engine.pid is None and not engine.loaded  # the engine's process has ended
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.slow
def test_the_engine_process_dies_mid_reply_the_window_stays_and_the_next_message_answers(qtbot, make_window,
                                                                                       smollm2):
    """Issue 39: `kill -SEGV` of the engine process in the middle of a reply. The window keeps the reply
    as far as it streamed and says what stopped; the model loads again into a fresh engine process
    and the next message is answered."""
    window = make_window()
    load(qtbot, window, smollm2)
    window.settings_panel.widgets["chat.system_prompt"].setPlainText(SYSTEM)
    window.settings_panel.widgets["sampling.temperature"].setValue(0.0)
    window.settings_panel.widgets["sampling.max_tokens"].setValue(400)
    engine, errors, events = window.model.engine, [], []
    first_pid = engine.pid
    window.error_shown.connect(errors.append)

    def on_event(kind, text):
        events.append(text)
        if len(events) == 8:
            os.kill(first_pid, signal.SIGSEGV)

    window.model.worker.streamed.connect(on_event)
    window.composer.input.setPlainText("Write a very long story about a lighthouse keeper.")
    with qtbot.waitSignal(window.model.loaded, timeout=120_000):  # loaded again, in a new process
        window.chat.send()
    window.model.worker.streamed.disconnect(on_event)
    assert errors and errors[0] == ("The engine stopped (SIGSEGV) and is starting again with the same model; your "
                                    "reply was kept up to where it stopped."), errors  # one sentence, no internals
    banner = window.error_banner
    assert banner.sentence == errors[0] and "main thread" not in banner.text() and "Details" in banner.text()
    banner.toggle_details()  # the signal, where, and the log, behind "Details"
    assert "stopped with SIGSEGV" in banner.details and "Log: " in banner.details and "Log: " in banner.text()
    assert engine.pid not in (None, first_pid) and engine.restarts == 1
    streamed = "".join(events)
    kept = window.transcript.messages[-1]
    assert kept.role == "assistant" and kept.content and streamed.startswith(kept.content[:20])
    assert "cut short" in kept.stats_label.text()
    cid = window.chat.session.conversation_id
    assert [m.role for m in window.store.messages(cid)] == ["user", "assistant"]  # kept in the conversation
    assert not window.chat.generating and window.composer.send_button.isEnabled()

    window.settings_panel.widgets["sampling.max_tokens"].setValue(64)
    window.conversations.new_chat()
    reply = ask(qtbot, window, "What is the capital of France?")
    assert "Paris" in reply.text and reply.stats.stop_reason == "end"


def test_lending_the_engine_frees_the_model_and_the_chat_takes_it_back(qtbot, make_window, smollm2):
    """Tune borrows the model's memory: the chat's engine is unloaded on the engine thread, the window
    says so and cannot send; loading again restores the chat."""
    window = make_window()
    load(qtbot, window, smollm2)
    old = window.model.lend("Tuning SmolLM2…")
    assert window.model.info is None and not window.composer.send_button.isEnabled()
    assert window.model_bar.label.text() == "Tuning SmolLM2…"
    qtbot.waitUntil(lambda: window.model.engine is not old, timeout=30_000)  # swapped once the old one is freed
    assert not old.loaded
    load(qtbot, window, smollm2)
    assert window.model.info is not None and window.composer.send_button.isEnabled()
