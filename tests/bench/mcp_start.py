"""The time from launch until a stdio MCP server's tools are listed (issue 26's MCP figure).

    python -m tests.bench.mcp_start [--runs 7]

For the built-in demo server (`python -m app mcp demo-server`, the SDK's MCPServer) and the test
tools server (tests/helpers/mcp_servers.py): each run starts the server from nothing (a new
process: Python, the SDK's imports, `initialize`, `tools/list`) through McpManager.start, the call
the Tools panel and `python -m app mcp list` make, and stops it. The first run of the process also
pays the client side's SDK import; it is printed apart. Figures: the median and the range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from app.chat.mcp_client import McpManager
from app.chat.mcp_config import parse_server
from app.chat.mcp_demo_server import demo_server_config
from tests.helpers import mcp_servers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("CLOVER_HOME", tempfile.mkdtemp(prefix="mcp-bench-"))
    servers = {"clover-demo (3 tools)": demo_server_config(),
               "test tools (5 tools)": parse_server("tools", mcp_servers.config("tools"))}
    manager = McpManager()
    first = True
    try:
        for label, config in servers.items():
            walls: list[float] = []
            for _ in range(args.runs + (1 if first else 0)):
                start = time.perf_counter()
                state = manager.start(config, 30)
                wall = time.perf_counter() - start
                assert state.ready, state.summary()
                manager.stop(config.name)
                if first:
                    print(f"first start in this process (client SDK import included): {wall:.3f} s")
                    first = False
                    continue
                walls.append(wall)
            print(f"{label}: launch to tools listed, median {statistics.median(walls):.3f} s "
                  f"(min {min(walls):.3f}, max {max(walls):.3f}, {len(walls)} runs)")
    finally:
        manager.close()


if __name__ == "__main__":
    main()
