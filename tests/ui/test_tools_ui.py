"""Tools, structured output, the scenario page and the local server, through the real window."""

from __future__ import annotations

import json

import openai
import pytest
from PySide6.QtCore import Qt

from tests.helpers.fakes import weather_engine
from tests.helpers.gguf_models import write_deepseek_moe
from tests.helpers.ui_actions import load_model


def send(qtbot, w, text, count=1, timeout=60_000):
    w.composer.input.setPlainText(text)
    replies = []
    w.chat.reply_finished.connect(replies.append)
    qtbot.mouseClick(w.composer.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(replies) >= count and not w.chat.generating, timeout=timeout)
    w.chat.reply_finished.disconnect()
    return replies


def test_two_tool_calls_answered_by_the_demo_tools(qtbot, make_window, tmp_path, artifacts_dir):
    engine = weather_engine()
    w = make_window(engine=engine)
    load_model(qtbot, w, write_deepseek_moe(tmp_path / "m.gguf"), n_ctx=1024)
    assert w.model_bar.picture.plan is w.model.plan is not None  # the plan as a picture in the model's Details
    qtbot.mouseClick(w.composer.tools_button, Qt.MouseButton.LeftButton)
    w.tools_panel.examples.setCurrentText("weather")
    assert w.tools_panel.use_tools.isChecked() and w.tools_panel.tools_status.text() == "✓ get_weather"
    replies = send(qtbot, w, "Is it warmer in Lisbon or in Oslo?", count=2)
    assert [len(r.tool_calls) for r in replies] == [2, 0]
    roles = [m.role for m in w.transcript.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    cards = w.transcript.messages[1].tool_cards
    assert [json.loads(c.arguments.text())["city"] for c in cards] == ["Lisbon", "Oslo"]
    assert '"temperature": 24' in cards[0].result.text() and '"temperature": 9' in cards[1].result.text()
    second = engine.requests[1]
    assert second.tools[0]["function"]["name"] == "get_weather"
    assistant = next(m for m in second.messages if m["role"] == "assistant")
    assert assistant["tool_calls"][1]["function"]["arguments"] == {"city": "Oslo"}
    assert [m["role"] for m in second.messages[-2:]] == ["tool", "tool"]
    assert "Lisbon is warmer" in w.transcript.messages[-1].content
    qtbot.wait(100)
    w.grab().save(str(artifacts_dir / "tool_calls.png"))
    stored = w.store.messages(w.chat.session.conversation_id)
    assert stored[1].extra["tool_calls"][0]["function"]["name"] == "get_weather"
    assert stored[2].extra["name"] == "get_weather"


def test_tool_results_typed_by_the_user(qtbot, make_window, tmp_path):
    engine = weather_engine()
    w = make_window(engine=engine)
    load_model(qtbot, w, write_deepseek_moe(tmp_path / "m.gguf"), n_ctx=1024)
    w.tools_panel.examples.setCurrentText("weather")
    w.tools_panel.demo.setChecked(False)
    send(qtbot, w, "Is it warmer in Lisbon or in Oslo?")
    msg = w.transcript.messages[1]
    assert msg.send_results.isVisibleTo(w) and not msg.tool_cards[0].result.isReadOnly()
    msg.tool_cards[0].result.setText("31 C")
    msg.tool_cards[1].result.setText("2 C")
    done = []
    w.chat.reply_finished.connect(done.append)
    qtbot.mouseClick(msg.send_results, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(done), timeout=30_000)
    assert "31 C; 2 C" in w.transcript.messages[-1].content


def test_invalid_tools_are_refused_with_a_message(qtbot, make_window, tmp_path):
    w = make_window(engine=weather_engine())
    load_model(qtbot, w, write_deepseek_moe(tmp_path / "m.gguf"), n_ctx=1024)
    w.tools_panel.use_tools.setChecked(True)
    w.tools_panel.tools_edit.setPlainText('[{"type": "function"')
    assert w.tools_panel.tools_status.text().startswith("✗ Not valid JSON")
    assert w.tools_panel.tools_status.text().endswith(".")
    with qtbot.waitSignal(w.error_shown, timeout=5000) as err:
        w.composer.input.setPlainText("hi")
        w.chat.send()
    assert "tools panel" in err.args[0] and not w.chat.generating


@pytest.mark.slow
def test_structured_output_scenarios_and_server_with_smollm2(qtbot, make_window, smollm2):
    w = make_window()
    load_model(qtbot, w, smollm2, n_ctx=1024)
    w.settings_panel.widgets["sampling.temperature"].setValue(0.0)
    w.tools_panel.use_schema.setChecked(True)
    w.tools_panel.schema_edit.setPlainText(json.dumps(
        {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"]}))
    reply = send(qtbot, w, "What is the capital of France? Answer in JSON.")[0]
    assert reply.json_errors == [] and "capital" in reply.json_value
    assert "JSON ✓ matches the schema" in w.transcript.messages[-1].stats_label.text()
    w.tools_panel.use_schema.setChecked(False)

    w.navigate("scenarios")
    with qtbot.waitSignal(w.scenarios_view.finished, timeout=120_000) as done:
        w.scenarios_view.run(only=["capital-australia"])
    result = done.args[0][0]
    row = [s.id for s in w.scenarios_view.scenarios].index("capital-australia")
    assert w.scenarios_view.table.item(row, 1).text() == ("PASS" if result.passed else "fail")
    assert "saved to" in w.scenarios_view.saved.text()

    w.settings_form.api_key.setText("sk-ui")
    w.server.toggle()
    line = w.status.server_label.text()
    assert line.startswith("http://127.0.0.1:") and " serves SmolLM2-135M-Instruct.Q4_1" in line and "API key" in line
    client = openai.OpenAI(base_url=w.server.url, api_key="sk-ui", max_retries=0, timeout=120)
    r = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8)
    assert r.choices[0].message.content is not None
    w.server.toggle()
    assert w.server.server is None and w.status.server_button.text() == "Start local server"
