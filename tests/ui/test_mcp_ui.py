"""MCP in the real window: a server that never answers does not freeze it (the event loop keeps
running a timer while the server starts, and its row says it timed out, with its stderr); the demo
server's tools in the Tools panel with switches; a server's tools whose schemas are not valid left
out with a line each, its good tool kept; a server that exits at once with its code and the end of
its stderr; a model's calls confirmed, run on the server and fed back to the model, the results on
the calls' cards."""

from __future__ import annotations

import json
import time

import pytest
from PySide6.QtCore import Qt, QTimer

from app.base.paths import app_dirs
from app.chat.mcp_demo_server import demo_server_config
from tests.conftest import ROOT
from tests.helpers import mcp_servers
from tests.helpers.fakes import weather_engine
from tests.helpers.gguf_models import write_deepseek_moe
from tests.helpers.ui_actions import load_model


def write_config(hang_timeout: float = 2.0) -> None:
    demo = demo_server_config("demo")
    config = {"mcpServers": {"hang": mcp_servers.config("hang"),
                             "demo": {"command": demo.command, "args": list(demo.args), "cwd": str(ROOT)}}}
    folder = app_dirs().config
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mcp.json").write_text(json.dumps(config))
    (folder / "mcp_settings.json").write_text(json.dumps({"servers": {"hang": {"start_timeout": hang_timeout}}}))


@pytest.mark.slow  # waits out an MCP server's timeout
def test_a_hanging_server_does_not_freeze_the_window(qtbot, make_window):
    write_config(hang_timeout=2.0)
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start()
    start = time.perf_counter()
    w = make_window()
    panel = w.tools_panel.mcp
    assert set(panel.boxes) == {"hang", "demo"} and panel.boxes["hang"].status.text() == "starting…"
    qtbot.waitUntil(lambda: "✗ Timed out" in panel.boxes["hang"].status.text(), timeout=30_000)
    took = time.perf_counter() - start
    qtbot.waitUntil(lambda: "Ready" in panel.boxes["demo"].status.text(), timeout=30_000)
    timer.stop()
    during = [t for t in ticks if t <= start + took]
    gaps = [b - a for a, b in zip(during, during[1:], strict=False)]
    # the window went on painting and handling timers while the server hung: ~50 ticks a second
    assert took >= 2.0 and len(during) >= 20 * took, (len(during), took)
    assert max(gaps) < 0.5, max(gaps)
    hang = panel.boxes["hang"]
    assert "no tools listed within 2 s" in hang.status.text()
    qtbot.mouseClick(w.composer.tools_button, Qt.MouseButton.LeftButton)  # the side panel, Tools tab
    assert w.side_tabs.currentIndex() == 1 and hang.isVisible()
    qtbot.mouseClick(hang.log_button, Qt.MouseButton.LeftButton)
    assert hang.log.isVisible() and "test server hang starting" in hang.log.toPlainText()
    assert "✓ Ready: 3 tools, listed in" in panel.boxes["demo"].status.text()
    assert list(panel.boxes["demo"].switches) == ["get_weather", "calculate", "dispatch_drone"]
    assert not panel.boxes["hang"].switches


@pytest.mark.slow  # starts an MCP server
def test_mcp_tools_offered_confirmed_called_and_fed_back(qtbot, make_window, tmp_path):
    write_config()
    engine = weather_engine()
    w = make_window(engine=engine)
    panel = w.tools_panel.mcp
    qtbot.waitUntil(lambda: "Ready" in panel.boxes["demo"].status.text(), timeout=30_000)
    load_model(qtbot, w, write_deepseek_moe(tmp_path / "m.gguf"), n_ctx=1024)
    assert "🔧 3 tool(s) offered" in w.composer.chip_list
    panel.boxes["demo"].switches["calculate"].setChecked(False)
    assert "🔧 2 tool(s) offered" in w.composer.chip_list
    assert "calculate" in json.loads((app_dirs().config / "mcp_settings.json").read_text())["servers"]["demo"][
        "disabled_tools"]

    replies = []
    w.chat.reply_finished.connect(replies.append)
    w.composer.input.setPlainText("Is it warmer in Lisbon or in Oslo?")
    qtbot.mouseClick(w.composer.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.mcp_round.pending is not None, timeout=30_000)
    assert [t["function"]["name"] for t in engine.requests[0].tools] == ["get_weather", "dispatch_drone"]
    bar = w.mcp_round.pending  # asked under the calls' cards, the window still usable
    assert "demo / get_weather" in bar.text.text() and "Lisbon" in bar.text.text()
    assert "waiting" in w.transcript.messages[1].tool_cards[0].state.text()
    bar.dont_ask.setChecked(True)  # don't ask again for this server
    qtbot.mouseClick(bar.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(replies) >= 2 and not w.chat.generating, timeout=30_000)
    assert [m.role for m in w.transcript.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    cards = w.transcript.messages[1].tool_cards
    assert '"temperature": 24' in cards[0].result.text().replace(" ", "").replace(":", ": ")
    assert cards[0].state.text().startswith("✓ done") and w.mcp_round.pending is None
    assert "Lisbon is warmer" in w.transcript.messages[-1].content and "light rain" in w.transcript.messages[-1].content
    assert not panel.boxes["demo"].confirm.isChecked()
    assert json.loads((app_dirs().config / "mcp_settings.json").read_text())["servers"]["demo"][
        "confirm_calls"] is False


def test_panel_keeps_the_good_tool_of_a_server_with_bad_schemas_and_says_why_one_exited(qtbot, clover_home):
    from app.ui.widgets.mcp_panel import McpPanel

    folder = app_dirs().config
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mcp.json").write_text(json.dumps({"mcpServers": {"bad": mcp_servers.config("badschema"),
                                                                "gone": mcp_servers.config("exit")}}))
    panel = McpPanel()
    qtbot.addWidget(panel)
    try:
        bad, gone = panel.boxes["bad"], panel.boxes["gone"]
        qtbot.waitUntil(lambda: "Ready" in bad.status.text() and "✗" in gone.status.text(), timeout=30_000)
        assert "Ready: 1 tool, listed in" in bad.status.text()
        assert "2 tools left out: schema not valid" in bad.status.text()
        assert list(bad.switches) == ["echo"]
        assert bad.notes.text() == ('Left out broken: its inputSchema is a string ("object"), not an object.\n'
                                    "Left out half_broken: its inputSchema's property 'x' is a number (5), not an "
                                    "object.")
        assert [d["function"]["name"] for d in panel.definitions(set())] == ["echo"]  # what the model is offered
        assert gone.status.text() == "✗ It exited at once (code 4), before listing its tools."
        assert gone.notes.text().endswith("Its stderr ends:\ntest server exit starting\n"
                                          "cannot open the database: permission denied")
        assert not gone.notes.isHidden() and not gone.switches
    finally:
        panel.close_servers()


def test_long_server_and_tool_names_fit_the_side_panel(qtbot, clover_home):
    """A server's name, its error (a long path) and its tools' names wrap or elide within the side
    panel's width instead of widening it; the full names stay in the texts and tooltips."""
    from PySide6.QtWidgets import QScrollArea

    from app.chat.mcp_client import McpTool, ServerState
    from app.chat.mcp_config import ServerConfig
    from app.ui.widgets.mcp_panel import McpPanel, ServerBox

    panel = McpPanel()
    name = "a-server-with-a-very-long-name_for-issues-and-pull-requests"
    tool = "search_repositories_by_language_topic_and_number_of_stars"
    box = ServerBox(panel, ServerConfig(name, command="/opt/" + "x" * 80 + "/server"))
    panel.servers_box.addWidget(box)
    box.show_state(ServerState(name, "stdio", "failed", "program not found: /opt/" + "x" * 80 + "/server"))
    box.show_state(ServerState(name, "stdio", "ready", tools=[McpTool(name, tool, "Search.", {})], started_s=1.0))
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setWidget(panel)
    qtbot.addWidget(scroll)
    scroll.resize(260, 600)
    scroll.show()
    qtbot.waitExposed(scroll)
    assert panel.minimumSizeHint().width() <= 240, panel.minimumSizeHint()
    assert panel.width() <= scroll.viewport().width()
    switch = box.switches[tool]
    assert switch.text() == tool and tool in switch.toolTip()
    assert switch.mapTo(panel, switch.rect().topRight()).x() < panel.width()
    assert box.title.text() == f"{name} (stdio)" and box.title.height() > box.title.fontMetrics().height()
