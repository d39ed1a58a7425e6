"""The demo tools (get_weather, calculate, dispatch_drone) as a stdio MCP server, written with the
SDK's MCPServer: what the scenario bench's MCP drone dispatch calls, and a server a user can add to
mcp.json to try MCP (`python -m app mcp demo-server`, or `clover-launcher mcp demo-server`)."""

from __future__ import annotations

import sys
from typing import Any, Literal

from app.chat import demo_tools
from app.chat.mcp_config import ServerConfig

NAME = "clover-demo"


def demo_server_config(name: str = NAME) -> ServerConfig:
    """How to start this server from this installation: the bundle's program, or this Python."""
    if getattr(sys, "frozen", False):
        return ServerConfig(name, command=sys.executable, args=("mcp", "demo-server"))
    return ServerConfig(name, command=sys.executable, args=("-m", "app", "mcp", "demo-server"))


def run_demo_server() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(NAME, version="1.0", instructions="Deterministic demo tools of Clover Launcher.")

    @server.tool(description="Current weather for a city: temperature and conditions (demo data).")
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> dict[str, Any]:
        return demo_tools.get_weather(city, unit)

    @server.tool(description="Evaluate an arithmetic expression with + - * / ** and parentheses.")
    def calculate(expression: str) -> dict[str, Any]:
        return demo_tools.calculate(expression)

    @server.tool(description="Send one delivery drone on one order.")
    def dispatch_drone(drone: str, destination: str, payload: str,
                       priority: Literal["low", "normal", "urgent"]) -> dict[str, Any]:
        return demo_tools.dispatch_drone(drone, destination, payload, priority)

    server.run("stdio")
