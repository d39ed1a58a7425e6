"""MCP tools as the chat offers them: names the template can take, the user's switches, and who
answers each call of a reply. No Qt.

A tool is offered under its own name made template-safe; when two servers (or a tool from the
Tools panel's editor) use one name, the later one is offered as `SERVER__TOOL`. The user's
choices (tools off, per-tool timeout, confirm calls) come from McpSettings (mcp_settings.json).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.chat.demo_tools import run_demo_tool
from app.chat.mcp_client import CallOutcome, McpManager, McpTool, safe_name
from app.chat.mcp_config import McpSettings


@dataclass(frozen=True)
class OfferedTool:
    offered: str  # the name the model sees
    tool: McpTool


class McpToolbox:
    def __init__(self, manager: McpManager, settings: McpSettings) -> None:
        self.manager, self.settings = manager, settings

    def enabled(self, reserved: set[str] | frozenset[str] = frozenset()) -> list[OfferedTool]:
        """Every switched-on tool of every ready server, with the name it is offered under."""
        taken = set(reserved)
        out: list[OfferedTool] = []
        for name, state in list(self.manager.states.items()):
            if not state.ready:
                continue
            off = self.settings.get(name).disabled_tools
            for tool in state.tools:
                if tool.name in off:
                    continue
                offered = safe_name(tool.name)
                if offered in taken:
                    offered = safe_name(f"{name}__{tool.name}")
                taken.add(offered)
                out.append(OfferedTool(offered, tool))
        return out

    def definitions(self, reserved: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
        return [o.tool.openai(o.offered) for o in self.enabled(reserved)]

    def route(self, offered: str, reserved: set[str] | frozenset[str] = frozenset()) -> McpTool | None:
        return next((o.tool for o in self.enabled(reserved) if o.offered == offered), None)

    def needs_confirmation(self, tool: McpTool) -> bool:
        return self.settings.get(tool.server).confirm_calls

    def call(self, tool: McpTool, arguments: dict[str, Any]) -> CallOutcome:
        timeout = self.settings.get(tool.server).timeout_for(tool.name)
        return self.manager.call(tool.server, tool.name, arguments, timeout)


def route_calls(calls: list[dict[str, Any]], toolbox: McpToolbox | None, demo: bool,
                reserved: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Who answers each call (as saved, OpenAI-shaped): "mcp", "demo" (the demo tools are on) or "user"."""
    routes = []
    for call in calls:
        name = call["function"]["name"]
        if toolbox is not None and toolbox.route(name, reserved) is not None:
            routes.append("mcp")
        else:
            routes.append("demo" if demo else "user")
    return routes


DECLINED = '{"error": "the user declined this call"}'


def answer_calls(calls: list[dict[str, Any]], routes: list[str], toolbox: McpToolbox | None,
                 approved: list[bool] | None = None,
                 reserved: set[str] | frozenset[str] = frozenset()) -> list[CallOutcome]:
    """Each call's answer: its MCP server's (blocking, bounded by the tool's timeout) or the demo
    tool's; a call the user declined, or one nobody answers, gets an error the model can read."""
    out: list[CallOutcome] = []
    for i, (call, route) in enumerate(zip(calls, routes, strict=True)):
        fn = call["function"]
        args = fn.get("arguments") if isinstance(fn.get("arguments"), dict) else {}
        if approved is not None and not approved[i]:
            out.append(CallOutcome(DECLINED, True, 0.0))
        elif route == "mcp" and toolbox is not None and (tool := toolbox.route(fn["name"], reserved)) is not None:
            out.append(toolbox.call(tool, args))
        elif route == "demo":
            text = run_demo_tool(fn["name"], args)
            out.append(CallOutcome(text, "error" in json.loads(text), 0.0))
        else:
            out.append(CallOutcome.error(f"no tool named {fn['name']!r} is available", 0.0))
    return out
