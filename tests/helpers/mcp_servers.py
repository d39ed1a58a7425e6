"""MCP servers for the tests, written with the SDK's MCPServer, run as programs:

    python -m tests.helpers.mcp_servers tools            a stdio server (echo, add, slow, crash, fail)
    python -m tests.helpers.mcp_servers noisy            the same, after printing two lines on stdout
    python -m tests.helpers.mcp_servers hang             reads stdin and never answers `initialize`
    python -m tests.helpers.mcp_servers badschema        plain JSON-RPC: two tools whose inputSchema the SDK
                                                         rejects (a string; a property that is a number) and
                                                         a good `echo`
    python -m tests.helpers.mcp_servers exit             writes two lines on stderr and exits with code 4
    python -m tests.helpers.mcp_servers http --port N    the tools over streamable HTTP on 127.0.0.1:N

Each writes a line on stderr when it starts, so tests can see stderr kept. `config()` and
`http_server()` give tests the mcp.json entries and a running HTTP server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_server():  # the SDK is imported only in the server's own process
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("clover-test-tools", version="1.0")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Sleep for some seconds, then answer.")
    def slow(seconds: float) -> str:
        time.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Crash the server in the middle of the call.")
    def crash() -> str:
        sys.stderr.write("crashing now\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool(description="A tool that fails.")
    def fail(reason: str) -> str:
        raise ValueError(f"cannot do that: {reason}")

    return server


def config(kind: str = "tools") -> dict:
    """An mcp.json server entry that runs `kind` with this Python."""
    return {"command": sys.executable, "args": ["-m", "tests.helpers.mcp_servers", kind],
            "env": {"PYTHONPATH": str(ROOT)}, "cwd": str(ROOT)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server() -> Iterator[str]:
    """A streamable-HTTP server on 127.0.0.1 in its own process; yields its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.mcp_servers", "http", "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the HTTP MCP server ended: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.05)
        else:
            raise RuntimeError("the HTTP MCP server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


BAD_SCHEMA_TOOLS = [
    {"name": "broken", "description": "Its schema is a string.", "inputSchema": "object"},
    {"name": "half_broken", "description": "One property is a number.",
     "inputSchema": {"type": "object", "properties": {"x": 5, "y": {"type": "string"}}}},
    {"name": "echo", "description": "Echo the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
]


def serve_raw_json_rpc() -> None:
    """A stdio server without the SDK (the SDK's MCPServer would not list a schema that is not an
    object): `initialize`, `tools/list` with BAD_SCHEMA_TOOLS, `tools/call` of any of them."""
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:  # a notification
            continue
        method, params = request.get("method"), request.get("params") or {}
        if method == "initialize":
            result: dict = {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                            "serverInfo": {"name": "clover-test-badschema", "version": "1.0"}}
        elif method == "tools/list":
            result = {"tools": BAD_SCHEMA_TOOLS}
        elif method == "tools/call" and params.get("name") == "echo":
            text = (params.get("arguments") or {}).get("text", "")
            result = {"content": [{"type": "text", "text": f"echo: {text}"}], "isError": False}
        elif method == "tools/call" and params.get("name") in {t["name"] for t in BAD_SCHEMA_TOOLS}:
            result = {"content": [{"type": "text", "text": f"called {params['name']}"}], "isError": False}
        else:
            error = {"code": -32601, "message": f"no method {method} {params.get('name', '')}".strip()}
            print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "error": error}), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("tools", "noisy", "hang", "http", "badschema", "exit"))
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sys.stderr.write(f"test server {args.kind} starting\n")
    sys.stderr.flush()
    if args.kind == "hang":
        for _line in sys.stdin:  # reads every request, answers none
            pass
        time.sleep(3600)
        return
    if args.kind == "exit":
        sys.stderr.write("cannot open the database: permission denied\n")
        sys.exit(4)
    if args.kind == "badschema":
        serve_raw_json_rpc()
        return
    if args.kind == "noisy":
        print("Loading plugins... done", flush=True)
        print('{"status": "ready"}', flush=True)  # JSON, but not JSON-RPC
    server = build_server()
    if args.kind == "http":
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
