"""Issue 41, item 7: the new panels as a newcomer sees them. Every setting has a one-line explanation
on screen; the Settings panel's Local server section says what the server answers and the address
each client uses (Claude Code at the root, Codex and OpenAI clients under /v1), from the port it got;
an MCP server's state and a Tune that stopped read as sentences."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication

from app.base.settings import BY_KEY


def test_every_setting_says_in_a_line_what_it_does(make_window):
    from app.ui.widgets.settings_panel import SHOWN, hint

    w = make_window()
    panel, side = w.settings_form, w.settings_panel  # the Settings page's form; the chat's side panel
    hints = side.hints | panel.hints
    for key in (*SHOWN, "log", "server.api_key", "folder.models", "folder.data", "folder.config", "cache.on_disk"):
        line = hints[key].text()
        assert line and line[0].isupper() and line.endswith("."), (key, line)
        assert line.count(". ") <= 2 if key == "cache.on_disk" else line.count(". ") <= 1, (key, line)
    assert hint(BY_KEY["engine.speculative"]) == ("Guess tokens and check the guesses in one batch: the same text, "
                                                  "faster. Takes effect at the next model load.")
    assert panel.hints["server.parallel"].text().endswith("Takes effect at the next model load.")
    assert side.hints["chat.system_prompt"].text() == "What the model is told before every conversation."
    combo = panel.widgets["engine.speculative"]
    assert [combo.itemText(i) for i in range(combo.count())] == ["Auto", "MTP", "N-grams", "Off"]
    assert list(panel.sections) == ["Appearance", "Chat defaults", "Engine", "Server", "Folders", "Privacy"]
    assert set(side.widgets) == {"chat.system_prompt", "sampling.temperature", "sampling.top_p", "sampling.max_tokens"}
    assert not set(side.widgets) & set(panel.widgets)  # each setting in one place
    assert panel.widgets["cache.ram_mb"].specialValueText() == "as planned"  # what 0 means


def test_the_prompt_cache_section_shows_its_size_on_disk_and_clears_it(qtbot, clover_home):
    from app.base.settings import Settings
    from app.engine.prompt_cache_files import prompt_cache_folder
    from app.ui.views.settings_view import AllSettings

    entry = prompt_cache_folder() / "0123abcd" / "12-ab.pcache"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(bytes(3_000_000))
    panel = AllSettings(Settings.load())
    qtbot.addWidget(panel)
    assert panel.cache_size.text() == "3 MB in 1 entry" and panel.cache_clear.isEnabled()
    panel.cache_clear.click()
    assert not entry.exists()
    assert panel.cache_size.text() == "empty" and not panel.cache_clear.isEnabled()


def test_the_server_section_gives_each_client_its_address(qtbot, make_window):
    w = make_window()
    w.settings.values["server.port"] = 18_000 + (id(w) % 1000)  # a port no other test asks for
    w._show_server()
    server = w.settings_form.server
    base = f"http://127.0.0.1:{w.settings.get('server.port')}"
    assert server.state.text() == f"Stopped. Once started, it listens at {base}."
    assert "Anthropic's Messages API and OpenAI's Responses" in server.intro.text()
    rows = {who.text(): (how.text(), address.text()) for who, how, address, _copy in server.rows}
    assert rows["Claude Code"] == ("ANTHROPIC_BASE_URL; it calls /v1/messages", base)
    codex = rows["Codex, OpenAI Agents SDK"]
    assert codex[1] == f"{base}/v1" and "/v1/responses" in codex[0]
    assert rows["Health and metrics"][1] == f"{base}/health\n{base}/metrics"

    w.settings_form.api_key.setText("sk-test")
    server.button.click()  # Start, from the panel: the status bar's button follows
    try:
        assert w.server.server is not None and w.status.server_button.text() == "Stop server"
        got = f"http://127.0.0.1:{w.server.server.port}"  # the port it got (the next one, when taken)
        assert server.button.text() == "Stop server"
        assert server.state.text().startswith(f"Running: {got}/v1 answers 503: no model loaded")
        assert server.rows[0][2].text() == got
        server.rows[0][3].click()  # Copy: a command line that starts Claude Code on this server
        copied = QGuiApplication.clipboard().text()
        assert copied.startswith(f"ANTHROPIC_BASE_URL={got} ANTHROPIC_AUTH_TOKEN=sk-test ") and copied.endswith(
            " claude")
        server.rows[1][3].click()
        assert f'base_url = "{got}/v1"' in QGuiApplication.clipboard().text()
        assert 'wire_api = "responses"' in QGuiApplication.clipboard().text()
        assert server.copied.text().startswith("Copied: the lines for ~/.codex/config.toml")
    finally:
        server.button.click()
    assert w.server.server is None and server.button.text() == "Start local server"
    assert w.status.server_button.text() == "Start local server" and server.state.text().startswith("Stopped.")


def test_an_mcp_servers_state_is_a_sentence():
    from app.chat.mcp_client import McpTool, ServerState
    from app.ui.widgets.mcp_panel import state_line

    tool = McpTool("s", "echo", "Echo.", {})
    assert state_line(ServerState("s", "stdio", "ready", tools=[tool], started_s=0.5)) == (
        "✓ Ready: 1 tool, listed in 0.50 s.")
    assert state_line(ServerState("s", "stdio", "ready", tools=[tool, tool], skipped={"x": "bad"}, noise=["a", "b"],
                                  started_s=1)) == ("✓ Ready: 2 tools, listed in 1.00 s. 1 tool left out: schema not "
                                                    "valid (below). 2 lines on its stdout were not JSON-RPC (see Log).")
    assert state_line(ServerState("s", "stdio", "failed", "program not found: /opt/x")) == (
        "✗ The program was not found: /opt/x.")
    assert state_line(ServerState("s", "stdio", "failed", "ended before it answered (signal 9)")) == (
        "✗ It ended before it answered (signal 9), before listing its tools.")
    assert state_line(ServerState("s", "stdio", "failed", "connection refused")) == (
        "✗ It could not start: connection refused.")
    assert state_line(ServerState("s", "http", "timed out", "no tools listed within 20 s (the server did not "
                                                           "answer)")) == (
        "✗ Timed out: no tools listed within 20 s (the server did not answer).")


def test_a_tune_that_stopped_says_so_in_a_sentence(make_window, monkeypatch):
    from app.machine.tune import TuneCancelled

    w = make_window()
    view = w.tune_view
    monkeypatch.setattr(w.model, "load", lambda *a, **k: None)
    view._reload = "/models/some.gguf"  # the chat's model before the sweep
    view._failed(TuneCancelled("cancelled"))
    assert view.status.text() == ("Tune stopped: you pressed Stop. Nothing was kept; the model is loaded again "
                                  "with the settings it had.")
    view._failed(RuntimeError("llama.cpp could not load the model."))
    assert view.status.text().startswith("Tune stopped: llama.cpp could not load the model. Nothing was kept;")
    assert view.hint.text().startswith("Goal: ") and "Time budget: " in view.hint.text()
