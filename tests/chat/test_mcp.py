"""MCP tools with the official SDK: mcp.json and the launcher's settings, servers over stdio and
streamable HTTP (written with the SDK's MCPServer in tests/helpers/mcp_servers.py), a server that
never answers `initialize`, one that prints on stdout first, one that crashes mid-call, one that
exits at once, one that lists tools whose schemas are not valid beside a good one, timeouts,
the chat's routing of calls, `python -m app mcp`, and the scenario bench's drone dispatch through
the built-in MCP demo server."""

from __future__ import annotations

import json
import time

import pytest

from app.bench.scenarios import load_scenarios, run_scenario
from app.chat.mcp_client import McpManager, McpTool, tool_problem
from app.chat.mcp_config import (
    DEFAULT_TOOL_TIMEOUT,
    McpConfigError,
    McpSettings,
    config_path,
    load_config,
    parse_config,
    parse_server,
    save_config_text,
)
from app.chat.mcp_tools import DECLINED, McpToolbox, answer_calls, route_calls
from app.chat.session import ChatSession
from app.chat.store import Store
from app.engine.contract import Reply, ReplyStats
from app.engine.tool_calls import ToolCall, parse_call, validate_call
from tests.helpers import mcp_servers
from tests.helpers.app_process import run_app
from tests.helpers.fakes import ScriptedEngine, Turn


@pytest.fixture()
def manager():
    m = McpManager()
    yield m
    m.close()


def server(name: str, kind: str = "tools"):
    return parse_server(name, mcp_servers.config(kind))


# ----------------------------------------------------------------------------- configuration


def test_mcp_json_in_claude_desktops_format_and_its_errors_in_words(tmp_path):
    servers = parse_config(json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-fs", "/tmp"], "env": {"A": "1"}, "disabled": False},
        "web": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer x"}}}}))
    assert servers["files"].transport == "stdio" and servers["files"].args == ("-y", "server-fs", "/tmp")
    assert servers["web"].transport == "http" and servers["web"].headers == {"Authorization": "Bearer x"}
    bad = {
        '{"mcpServers": {"a": {"command": "x",}}}': "not valid JSON: Expecting property name enclosed in double "
                                                    "quotes at line 1, column 38",
        '{"servers": {}}': 'must be an object with "mcpServers"',
        '{"mcpServers": {"a": {"args": []}}}': "server 'a' needs exactly one of \"command\"",
        '{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}': "needs exactly one of",
        '{"mcpServers": {"a": {"command": "x", "args": "-v"}}}': "server 'a': \"args\" must be a list of strings",
        '{"mcpServers": {"a": {"command": "x", "env": {"N": 1}}}}': "\"env\" must be an object of strings",
        '{"mcpServers": {"a": {"url": "ftp://h/x"}}}': "\"url\" must be an http:// or https:// address",
    }
    for text, message in bad.items():
        with pytest.raises(McpConfigError) as err:
            parse_config(text)
        assert message in str(err.value), (text, str(err.value))
    assert load_config(tmp_path / "none.json") == {}  # no file: no servers
    with pytest.raises(McpConfigError):
        save_config_text('{"mcpServers": []}', tmp_path / "mcp.json")
    assert not (tmp_path / "mcp.json").exists()  # a wrong text is never written
    save_config_text('{"mcpServers": {"a": {"command": "x"}}}')
    assert list(load_config()) == ["a"] and config_path().parent.name == "config"


def test_launcher_settings_per_server_round_trip_and_checks(tmp_path):
    settings = McpSettings(path=tmp_path / "mcp_settings.json")
    prefs = settings.get("files")
    assert prefs.confirm_calls and prefs.timeout_for("read") == DEFAULT_TOOL_TIMEOUT
    prefs.confirm_calls = False
    prefs.disabled_tools.add("delete")
    prefs.tool_timeouts["read"] = 5
    settings.save()
    again = McpSettings.load(tmp_path / "mcp_settings.json").get("files")
    assert (again.confirm_calls, again.disabled_tools, again.timeout_for("read")) == (False, {"delete"}, 5.0)
    (tmp_path / "bad.json").write_text('{"servers": {"files": {"tool_timeouts": {"read": -1}}}}')
    with pytest.raises(McpConfigError, match="tool_timeouts.read must be a number of seconds above 0"):
        McpSettings.load(tmp_path / "bad.json")


# ----------------------------------------------------------------------------- servers


@pytest.mark.slow  # starts an MCP server
def test_stdio_server_lists_tools_calls_them_and_keeps_stderr(manager):
    state = manager.start(server("t"), 30)
    assert state.ready, state.summary()
    assert [t.name for t in state.tools] == ["echo", "add", "slow", "crash", "fail"]
    assert state.server_info.startswith("clover-test-tools") and state.started_s is not None
    assert "test server tools starting" in state.stderr()
    add = next(t for t in state.tools if t.name == "add")
    assert add.openai()["function"]["parameters"]["required"] == ["a", "b"]
    ok = manager.call("t", "add", {"a": 2, "b": 40}, 10)
    assert (ok.text, ok.is_error) == ("42", False)
    failed = manager.call("t", "fail", {"reason": "no"}, 10)  # the tool's own error: isError, text for the model
    assert failed.is_error and "error" in json.loads(failed.text)
    slow = manager.call("t", "slow", {"seconds": 5}, 0.5)
    assert slow.timed_out and json.loads(slow.text) == {"error": "t/slow timed out after 0.5 s"}
    assert slow.seconds < 3
    assert manager.call("t", "echo", {"text": "still here"}, 10).text == "echo: still here"  # the session lives on


def test_server_that_crashes_mid_call_is_a_tool_error_and_the_server_failed(manager):
    manager.start(server("c"), 30)
    outcome = manager.call("c", "crash", {}, 10)
    assert outcome.is_error and not outcome.timed_out and "c/crash failed" in json.loads(outcome.text)["error"]
    state = manager.state("c")
    assert state.status == "failed" and "ended during a call" in state.error
    assert "crashing now" in state.stderr()
    after = manager.call("c", "echo", {"text": "x"}, 10)
    assert after.is_error and "is not running" in json.loads(after.text)["error"]


@pytest.mark.slow  # waits out the initialize timeout
def test_server_that_never_answers_initialize_times_out_and_is_stopped(manager):
    start = time.perf_counter()
    state = manager.start(server("h", "hang"), 1.5)
    took = time.perf_counter() - start
    assert state.status == "timed out" and "no tools listed within 1.5 s" in state.error
    assert 1.5 <= took < 5  # the deadline, then the server terminated at once (not after the SDK's 2 s grace)
    assert "test server hang starting" in state.stderr()
    assert manager.call("h", "echo", {}, 5).is_error


def test_stdout_noise_before_the_protocol_is_reported_not_fatal(manager):
    state = manager.start(server("n", "noisy"), 30)
    assert state.ready and len(state.tools) == 5
    assert state.noise == ["Loading plugins... done", '{"status": "ready"}']
    assert "2 noise line(s) on stdout" in state.summary()
    assert manager.call("n", "echo", {"text": "hi"}, 10).text == "echo: hi"


@pytest.mark.slow  # starts an MCP server
def test_streamable_http_server_on_127_0_0_1(manager, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy must not take localhost's requests
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    with mcp_servers.http_server() as url:
        state = manager.start(parse_server("web", {"url": url}), 30)
        assert state.ready and state.transport == "http", state.summary()
        assert manager.call("web", "add", {"a": 1, "b": 2}, 10).text == "3"
    bad = manager.start(parse_server("gone", {"url": f"http://127.0.0.1:{mcp_servers.free_port()}/mcp"}), 10)
    assert bad.status == "failed" and bad.error


def test_a_program_that_does_not_exist_fails_in_words(manager):
    state = manager.start(parse_server("x", {"command": "/no/such/program"}), 5)
    assert state.status == "failed" and "/no/such/program" in state.error


def test_a_tool_whose_schema_is_not_valid_is_skipped_and_the_good_one_listed_and_called(manager):
    """The SDK validates tools/list as one model: one bad schema used to fail the whole server."""
    state = manager.start(server("b", "badschema"), 30)
    assert state.ready, state.summary()
    assert [t.name for t in state.tools] == ["echo"]
    assert state.skipped == {"broken": 'its inputSchema is a string ("object"), not an object',
                             "half_broken": "its inputSchema's property 'x' is a number (5), not an object"}
    assert "1 tool(s) in" in state.summary() and "2 skipped (schema not valid)" in state.summary()
    assert state.server_info == "clover-test-badschema 1.0"
    outcome = manager.call("b", "echo", {"text": "still works"}, 10)
    assert (outcome.text, outcome.is_error) == ("echo: still works", False)
    # a call of a tool the listing left out (the model is never offered it; the server still answers):
    # the SDK lists the tools again to find its output schema, and that listing is filtered the same way
    assert manager.call("b", "broken", {}, 10).text == "called broken"
    assert manager.call("b", "echo", {"text": "again"}, 10).text == "echo: again"


def test_each_tool_is_judged_on_its_own_in_words():
    good = {"name": "t", "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}, "b": True}}}
    assert tool_problem(good, "2025-11-25") is None
    assert tool_problem({**good, "outputSchema": None}, "2025-11-25") is None
    assert tool_problem({"name": "t"}, "2025-11-25") == "it has no inputSchema"
    assert tool_problem({"name": "t", "inputSchema": ["a"]}, "2025-11-25") == \
        'its inputSchema is a list (["a"]), not an object'
    assert tool_problem({"name": "t", "inputSchema": {"type": "string"}}, "2025-11-25") == \
        'its inputSchema\'s "type" is a string ("string"), not "object"'
    assert tool_problem({"name": "t", "inputSchema": {"type": "object", "properties": []}}, "2025-11-25") == \
        "its inputSchema's properties are a list ([]), not an object"
    assert tool_problem({**good, "outputSchema": 3}, "2025-11-25") == "its outputSchema is a number (3), not an object"
    assert tool_problem("echo", "2025-11-25") == 'it is a string ("echo"), not an object'
    assert tool_problem({"name": 7, "inputSchema": {"type": "object"}}, "2025-11-25") == \
        "name: Input should be a valid string"
    assert tool_problem(good, "1999-01-01") is None  # a version the SDK does not know: the SDK's call


def test_a_server_that_exits_at_once_says_its_exit_code_and_keeps_its_stderr(manager):
    start = time.perf_counter()
    state = manager.start(server("x", "exit"), 30)
    assert state.status == "failed" and state.error == "exited at once (code 4)", state.summary()
    assert state.stderr_tail()[-1] == "cannot open the database: permission denied"
    assert time.perf_counter() - start < 10


# ----------------------------------------------------------------------------- the chat's routing


def test_calls_are_routed_to_mcp_confirmed_or_declined_and_answered(manager, tmp_path):
    manager.start(server("t"), 30)
    settings = McpSettings(path=tmp_path / "s.json")
    settings.get("t").disabled_tools.add("crash")
    box = McpToolbox(manager, settings)
    names = [d["function"]["name"] for d in box.definitions(reserved={"echo"})]
    assert names == ["t__echo", "add", "slow", "fail"]  # "echo" is taken by the editor's tool; crash is off
    calls = [{"type": "function", "function": {"name": n, "arguments": a}}
             for n, a in (("add", {"a": 1, "b": 1}), ("get_weather", {"city": "Oslo"}), ("t__echo", {"text": "x"}))]
    assert route_calls(calls, box, demo=True, reserved={"echo"}) == ["mcp", "demo", "mcp"]
    assert route_calls(calls, box, demo=False, reserved={"echo"}) == ["mcp", "user", "mcp"]
    outcomes = answer_calls(calls, ["mcp", "demo", "mcp"], box, approved=[True, True, False], reserved={"echo"})
    assert outcomes[0].text == "2" and '"temperature": 9' in outcomes[1].text and outcomes[2].text == DECLINED

    session = ChatSession(Store(tmp_path / "c.db"))
    session.add_user("add 1 and 1", "")
    add = ToolCall("add", {"a": 1, "b": 1}, "", "x", [])
    recorded = session.record_reply(Reply("", "", "", "", ReplyStats(), [add]), {}, demo_tools=False, mcp=box)
    assert recorded.mcp_pending and recorded.routes == ["mcp"] and recorded.demo_results is None
    unknown = session.record_reply(Reply("", "", "", "", ReplyStats(), [ToolCall("nope", {}, "", "x", [])]),
                                   {}, demo_tools=False, mcp=box)
    assert not unknown.mcp_pending and unknown.routes == ["user"]  # the user types this one's result


# ----------------------------------------------------------------------------- headless


def run_mcp(*args, timeout=90):
    return run_app("mcp", *args, timeout=timeout)


@pytest.mark.slow  # starts the app and an MCP server for each of eight commands: about 20 s
def test_cli_mcp_list_and_call_with_exit_codes(tmp_path):
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"t": mcp_servers.config("tools"), "n": mcp_servers.config("noisy")}}))
    r = run_mcp("list", "--config", str(cfg))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "t (stdio:" in r.stdout and "  add: Add two integers." in r.stdout
    assert "2 line(s) on stdout were not JSON-RPC" in r.stdout
    r = run_mcp("call", "t", "add", '{"a": 20, "b": 22}', "--config", str(cfg))
    assert (r.returncode, r.stdout.strip()) == (0, "42"), r.stderr
    r = run_mcp("call", "t", "slow", '{"seconds": 30}', "--config", str(cfg), "--timeout", "6")
    assert r.returncode == 3 and "timed out: t/slow did not answer within 6 s" in r.stderr
    r = run_mcp("call", "t", "fail", '{"reason": "x"}', "--config", str(cfg))
    assert r.returncode == 1 and "error" in r.stderr
    assert run_mcp("call", "t", "add", "[1]", "--config", str(cfg)).returncode == 2
    assert run_mcp("call", "zz", "add", "--config", str(cfg)).returncode == 2
    cfg.write_text(json.dumps({"mcpServers": {"h": mcp_servers.config("hang")}}))
    r = run_mcp("list", "--config", str(cfg), "--timeout", "1")
    assert r.returncode == 3 and "timed out" in r.stdout and "test server hang starting" in r.stdout
    cfg.write_text("{")
    r = run_mcp("list", "--config", str(cfg))
    assert r.returncode == 2 and "is not valid JSON" in r.stderr


@pytest.mark.slow  # starts the app five times and waits out a start timeout: about 12 s
def test_cli_mcp_skipped_tools_a_server_that_exits_and_a_timeout_that_bounds_the_start(tmp_path):
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"b": mcp_servers.config("badschema"), "x": mcp_servers.config("exit"),
                                              "h": mcp_servers.config("hang")}}))
    r = run_mcp("call", "b", "echo", '{"text": "hi"}', "--config", str(cfg))
    assert (r.returncode, r.stdout.strip()) == (0, "echo: hi"), r.stderr
    r = run_mcp("call", "b", "broken", "--config", str(cfg))
    assert r.returncode == 1 and r.stderr.strip() == ("error: b lists 'broken' with a schema that is not valid, so it "
                                                      'is skipped: its inputSchema is a string ("object"), not an '
                                                      "object"), r.stderr
    r = run_mcp("call", "x", "echo", "--config", str(cfg))
    assert r.returncode == 1 and "error: x: failed: exited at once (code 4)" in r.stderr
    assert "    cannot open the database: permission denied" in r.stderr.splitlines()
    start = time.perf_counter()
    r = run_mcp("call", "h", "echo", "--config", str(cfg), "--timeout", "3")
    took = time.perf_counter() - start
    assert r.returncode == 3 and "timed out: h did not list its tools within 3 s" in r.stderr, r.stderr
    assert took < 3 + 5, took  # the app's start and the server's stop; the panel's 20 s start timeout is not used
    r = run_mcp("list", "--config", str(cfg), "--timeout", "3")
    assert r.returncode == 3, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "  echo: Echo the text back." in lines
    assert '  skipped broken: its inputSchema is a string ("object"), not an object' in lines
    assert "  skipped half_broken: its inputSchema's property 'x' is a number (5), not an object" in lines
    assert any(line.startswith("x (stdio:") and line.endswith("failed: exited at once (code 4)") for line in lines)
    assert run_mcp("list", "--config", str(cfg), "--timeout", "0").returncode == 2


# ----------------------------------------------------------------------------- the scenario bench


def dispatching_engine(orders: list[dict]) -> ScriptedEngine:
    """A scripted model: calls dispatch_drone once per order it was told (all of them, or with one
    wrong), then answers from the tool results it was given."""

    def turn(request) -> Turn:
        stats = ReplyStats(generated_tokens=10)
        if request.messages[-1]["role"] == "tool":
            ids = [json.loads(m["content"])["order_id"] for m in request.messages if m["role"] == "tool"]
            return Turn("Dispatched: " + ", ".join(ids), stats=stats, stream=[])
        calls = [validate_call(parse_call(json.dumps({"name": "dispatch_drone", "arguments": o}), i), request.tools)
                 for i, o in enumerate(orders)]
        return Turn(calls=calls, stats=stats, stream=[])

    return ScriptedEngine(turn)


@pytest.mark.slow  # starts the MCP demo server twice
def test_drone_dispatch_scenario_through_the_mcp_demo_server():
    scenario = next(s for s in load_scenarios() if s.id == "drone-dispatch-mcp")
    orders = [dict(o, payload=o["payload"] + " crate") for o in scenario.expected]
    engine = dispatching_engine(orders)
    result = run_scenario(engine, scenario)
    assert result.passed, result.detail
    assert result.detail == "through MCP (5 call(s), 5 answered): 5 of 5 orders right"
    offered = engine.requests[0].tools
    assert [t["function"]["name"] for t in offered] == ["dispatch_drone"]
    assert offered[0]["function"]["parameters"]["properties"]["priority"]["enum"] == ["low", "normal", "urgent"]
    assert all(c.valid for c in dispatching_engine(orders).generate(engine.requests[0]).tool_calls)
    assert len(engine.requests) == 2 and result.answer.startswith("Dispatched: ORD-")  # results went back
    assert [json.loads(a)["status"] for a in result.tool_results] == ["dispatched"] * 5

    wrong = [dict(o) for o in orders]
    wrong[2]["priority"] = "urgent"
    result = run_scenario(dispatching_engine(wrong), scenario)
    assert not result.passed and "4 of 5 orders right" in result.detail


def test_mcp_tool_is_the_app_tool_shape():
    tool = McpTool("s", "my.tool/v2", "d", {"type": "object", "properties": {"x": {"type": "string"}}})
    assert tool.openai()["function"]["name"] == "my_tool_v2"
    assert McpTool("s", "t", "", {}).openai()["function"]["parameters"] == {"type": "object", "properties": {}}
