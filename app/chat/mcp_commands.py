"""`python -m app mcp list|call`: the MCP servers of an mcp.json, headless. No Qt.

Exit codes (docs/command-line.md): 0 ok; 1 a server failed to start, the tool answered with an error or was
skipped (its schema is not valid); 2 bad input (the config, an unknown server or tool, arguments
that are not a JSON object); 3 timed out (a server's start, or the call: `call --timeout S` bounds
the two together).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TextIO

from app.base.exit_codes import ExitCode
from app.chat.mcp_client import CallOutcome, McpManager, ServerState, start_all
from app.chat.mcp_config import McpConfigError, McpSettings, ServerConfig, load_config

EXIT_CODES = "Exit codes: 0 ok, 1 a server failed or the tool answered with an error, 2 bad input, 3 timed out."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="mcp", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="start every server and print its tools")
    call = sub.add_parser("call", help="call one tool and print its result")
    call.add_argument("server")
    call.add_argument("tool")
    call.add_argument("arguments", nargs="?", metavar="JSON", help="the arguments as a JSON object")
    for p in (listing, call):
        p.add_argument("--config", metavar="FILE", help="an mcp.json (default: the one in the config folder)")
        p.add_argument("--timeout", type=float, metavar="S",
                       help="seconds for each server's start (list) or for the whole call, the server's start "
                            "included (call); default: the Tools panel's (20 s to start, then 60 s a call)")
    sub.add_parser("demo-server", help="run the demo tools as a stdio MCP server (to put in mcp.json)")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if getattr(args, "timeout", None) is not None and not 0 < args.timeout < 1e6:
        print(f"error: --timeout must be a number of seconds above 0, not {args.timeout:g}", file=err)
        return ExitCode.BAD_INPUT
    if args.mcp == "demo-server":
        from app.chat.mcp_demo_server import run_demo_server

        run_demo_server()
        return ExitCode.OK
    if args.mcp == "list":
        return list_command(args.config, out, err, args.timeout)
    return call_command(args.config, args.server, args.tool, args.arguments, args.timeout, out, err)


def _load(config: str | None, err: TextIO) -> tuple[dict[str, ServerConfig], McpSettings] | None:
    try:
        servers = load_config(Path(config) if config else None)
        settings = McpSettings.load()
    except McpConfigError as exc:
        print(f"error: {exc}", file=err)
        return None
    if not servers:
        print(f"error: no MCP servers configured in {config or 'mcp.json'}", file=err)
        return None
    return servers, settings


def _report(state: ServerState, out: TextIO) -> None:
    if state.noise:
        print(f"  note: {len(state.noise)} line(s) on stdout were not JSON-RPC, e.g. {state.noise[0][:80]!r}",
              file=out)
    for name, why in state.skipped.items():
        print(f"  skipped {name}: {why}", file=out)
    if not state.ready and state.stderr_tail():
        print("  its stderr:", file=out)
        for line in state.stderr_tail():
            print(f"    {line}", file=out)


def list_command(config: str | None, out: TextIO, err: TextIO, start_timeout: float | None = None) -> int:
    loaded = _load(config, err)
    if loaded is None:
        return ExitCode.BAD_INPUT
    servers, settings = loaded
    manager = McpManager()
    try:
        start_all(manager, servers, lambda n: start_timeout or settings.get(n).start_timeout)
        worst = ExitCode.OK
        for name in servers:
            state = manager.states[name]
            print(f"{name} ({servers[name].transport}: {servers[name].describe()}): {state.summary()}", file=out)
            for tool in state.tools:
                off = " (switched off)" if tool.name in settings.get(name).disabled_tools else ""
                print(f"  {tool.name}{off}: {tool.description.splitlines()[0] if tool.description else ''}", file=out)
            _report(state, out)
            if state.status == "timed out":
                worst = max(worst, ExitCode.TIMED_OUT)
            elif not state.ready:
                worst = max(worst, ExitCode.FAILED)
        return worst
    finally:
        manager.close()


def call_command(config: str | None, server: str, tool: str, arguments: str | None, timeout: float | None,
                 out: TextIO, err: TextIO) -> int:
    loaded = _load(config, err)
    if loaded is None:
        return ExitCode.BAD_INPUT
    servers, settings = loaded
    if server not in servers:
        print(f"error: no server named {server!r}; configured: {', '.join(servers)}", file=err)
        return ExitCode.BAD_INPUT
    try:
        args = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError as exc:
        print(f"error: the arguments are not JSON: {exc}", file=err)
        return ExitCode.BAD_INPUT
    if not isinstance(args, dict):
        print("error: the arguments must be a JSON object", file=err)
        return ExitCode.BAD_INPUT
    manager = McpManager()
    try:
        prefs = settings.get(server)
        started = time.monotonic()
        state = manager.start(servers[server], timeout or prefs.start_timeout)  # --timeout: the whole call's
        if not state.ready:
            if state.status == "timed out" and timeout:
                print(f"timed out: {server} did not list its tools within {timeout:g} s (--timeout)", file=err)
            else:
                print(f"error: {server}: {state.summary()}", file=err)
            _report(state, err)
            return ExitCode.TIMED_OUT if state.status == "timed out" else ExitCode.FAILED
        if tool in state.skipped:
            print(f"error: {server} lists {tool!r} with a schema that is not valid, so it is skipped: "
                  f"{state.skipped[tool]}", file=err)
            return ExitCode.FAILED
        if tool not in {t.name for t in state.tools}:
            print(f"error: {server} has no tool {tool!r}; it has: {', '.join(t.name for t in state.tools)}", file=err)
            return ExitCode.BAD_INPUT
        budget = timeout or prefs.timeout_for(tool)
        left = budget - (time.monotonic() - started) if timeout else budget
        outcome = (manager.call(server, tool, args, left) if left > 0
                   else CallOutcome.error("no time left after the start", 0.0, timed_out=True))
        if outcome.timed_out:
            print(f"timed out: {server}/{tool} did not answer within {budget:g} s"
                  + (" (--timeout, the server's start included)" if timeout else ""), file=err)
            return ExitCode.TIMED_OUT
        print(outcome.text, file=out if not outcome.is_error else err)
        return ExitCode.FAILED if outcome.is_error else ExitCode.OK
    finally:
        manager.close()
