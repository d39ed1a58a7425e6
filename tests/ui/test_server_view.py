"""The Server page (issue 53, item 5): on/off, address and key, the client blocks, and the request
inspector: a request the server answered appears in the table with its client and API, selecting it
shows its messages, tools and reply, Copy as curl fills the clipboard, Clear empties the list."""

from __future__ import annotations

import json

from PySide6.QtGui import QGuiApplication

from app.engine.contract import ReplyStats
from app.serve.request_log import CallSeen, Entry
from app.ui.views.request_inspector import COLUMNS
from tests.helpers.fakes import ScriptedEngine, Turn
from tests.helpers.server_post import post

KEY = "sk-view-test"
TOOLS = [{"name": "get_weather", "description": "Weather in a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def cell(view, row: int, name: str) -> str:
    model = view.inspector.model
    return model.data(model.index(row, COLUMNS.index(name)))


def test_a_request_the_server_answered_is_listed_and_shown(qtbot, make_window):
    w = make_window(engine=ScriptedEngine(Turn("Sunny in Oslo.", stats=ReplyStats(
        prompt_tokens=40, prompt_evaluated=30, generated_tokens=7, stop_reason="end", ttft_seconds=0.2)),
        loaded=True, name="script-model"))
    w.settings.values["server.port"] = 19_000 + (id(w) % 1000)
    w.settings_form.api_key.setText(KEY)
    w.settings_form.server.requests_button.click()  # "Requests…" in the Settings page's Server section
    assert w.current_page() == "server"
    view = w.server_view
    assert view.inspector.empty.isVisible() and view.inspector.model.rowCount() == 0
    view.toggle.click()  # Start
    try:
        assert w.server.server is not None and view.toggle.text() == "Stop server"
        assert view.state.text().startswith(f"Running: {w.server.address()}/v1")
        assert view.key.text() == "•" * len(KEY)
        body = {"model": "claude-x", "max_tokens": 50, "tools": TOOLS, "system": "Be brief.",
                "messages": [{"role": "user", "content": "Weather in Oslo?"}]}
        with qtbot.waitSignal(w.server.requests_changed, timeout=10_000):
            status, _, _ = post(w.server.server, "/v1/messages", body,
                                {"x-api-key": KEY, "User-Agent": "claude-cli/2.1.328 (external, cli)"})
        assert status == 200
        qtbot.waitUntil(lambda: view.inspector.model.rowCount() == 1, timeout=5000)  # on the GUI thread
        assert (cell(view, 0, "Client"), cell(view, 0, "API"), cell(view, 0, "Model")) == (
            "Claude Code", "Messages", "claude-x")
        assert cell(view, 0, "Prompt / cached") == "40 / 10" and cell(view, 0, "Stop") == "end"
        assert not view.inspector.empty.isVisible()

        view.inspector.select(0)
        detail = view.inspector.detail
        assert "── system ──\nBe brief." in detail.messages.toPlainText()
        assert "── user ──\nWeather in Oslo?" in detail.messages.toPlainText()
        assert '"name": "get_weather"' in detail.tools.toPlainText() and detail.tabs.tabText(1) == "Tools (1)"
        assert "Sunny in Oslo." in detail.reply.toPlainText()
        assert "prompt 40 tokens (10 from the cache)" in detail.facts()

        detail.copy_curl.click()
        curl = QGuiApplication.clipboard().text()
        assert curl.startswith(f"curl -sS {w.server.address()}/v1/messages")
        assert f"x-api-key: {KEY}" in curl and "Weather in Oslo?" in curl
        assert detail.copied.text().startswith("Copied")

        view.inspector.clear_button.click()
        assert view.inspector.model.rowCount() == 0 and len(w.server.requests) == 0
        assert view.inspector.empty.isVisible() and detail.entry is None
    finally:
        view.toggle.click()
    assert w.server.server is None and view.toggle.text() == "Start local server"
    assert w.status.server_button.text() == "Start local server"  # the status bar's button follows


def entry(number: int, **kw) -> Entry:
    return Entry(number, 0.0, "OpenAI/Python 2.1.0", "/v1/chat/completions", "", json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": f"question {number}"}]}).encode(), 200, 0.1, **kw)


def test_rows_come_in_at_the_top_and_the_selection_stays(qtbot, make_window):
    w = make_window()
    log, inspector = w.server.requests, w.server_view.inspector
    for _ in range(3):
        log.add(entry(log.next_number()))
    inspector.refresh()
    inspector.select(1)
    assert "question 2" in inspector.detail.messages.toPlainText()
    bad = CallSeen("get_weather", {"town": 3}, ("'city' is a required property",))
    log.add(entry(log.next_number(), calls=(bad,), prompt_tokens=5, cached_tokens=0, ttft=0.1, tps=9.0,
                  stop="tool calls"))
    inspector.refresh()
    assert inspector.model.rowCount() == 4 and cell(w.server_view, 0, "Tools") == "1 of 1 ✗"
    assert cell(w.server_view, 0, "Client") == "OpenAI Python SDK"
    assert inspector.table.selectionModel().selectedRows()[0].row() == 2  # the same request, one row down
    assert "question 2" in inspector.detail.messages.toPlainText()
    inspector.select(0)
    assert "breaks the tool's schema: 'city' is a required property" in inspector.detail.reply.toPlainText()


def test_the_client_blocks_include_both_sdks(qtbot, make_window):
    w = make_window()
    view = w.server_view
    base = w.server.address()
    rows = {who.text(): i for i, (who, _how, _address, _copy) in enumerate(view.setups.rows)}
    view.setups.rows[rows["OpenAI Python SDK"]][3].click()
    assert f'OpenAI(base_url="{base}/v1"' in QGuiApplication.clipboard().text()
    view.setups.rows[rows["Anthropic Python SDK"]][3].click()
    assert f'Anthropic(base_url="{base}"' in QGuiApplication.clipboard().text()
    assert "Claude Code" in rows and "Codex, OpenAI Agents SDK" in rows
