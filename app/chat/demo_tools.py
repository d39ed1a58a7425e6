"""Deterministic demo tools that answer the example tool calls, so a tool conversation can go on
without a real backend. No Qt, no network."""

from __future__ import annotations

import ast
import json
import operator
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.base.paths import resource

WEATHER = {  # fixed, plausible figures: the point is a stable answer to test against
    "lisbon": (24, "sunny"), "oslo": (9, "light rain"), "paris": (18, "cloudy"), "canberra": (21, "clear"),
    "berlin": (15, "overcast"), "new york": (20, "clear"), "tokyo": (22, "humid"),
}

_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Pow: operator.pow, ast.Mod: operator.mod, ast.FloorDiv: operator.floordiv,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](left, right)
    raise ValueError("only numbers, + - * / // % ** and parentheses are allowed")


def get_weather(city: str, unit: str = "celsius") -> dict[str, Any]:
    temp, sky = WEATHER.get(city.strip().lower(), (16, "unknown (demo data)"))
    if unit == "fahrenheit":
        temp = round(temp * 9 / 5 + 32)
    return {"city": city, "temperature": temp, "unit": unit, "conditions": sky}


def calculate(expression: str) -> dict[str, Any]:
    try:
        return {"expression": expression, "result": _eval(ast.parse(expression, mode="eval"))}
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return {"expression": expression, "error": str(exc)}


def dispatch_drone(drone: str, destination: str, payload: str, priority: str) -> dict[str, Any]:
    order = zlib.crc32(f"{drone}|{destination}|{payload}|{priority}".encode()) % 100000
    return {"status": "dispatched", "order_id": f"ORD-{order:05d}", "drone": drone, "destination": destination,
            "eta_minutes": 12 if priority == "urgent" else 25}


DEMO_TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "get_weather": get_weather, "calculate": calculate, "dispatch_drone": dispatch_drone,
}


def run_demo_tool(name: str, arguments: dict[str, Any]) -> str:
    """The demo tool's answer as JSON text, or an error object a model can read."""
    fn = DEMO_TOOLS.get(name)
    if fn is None:
        return json.dumps({"error": f"no demo tool named {name!r}"})
    try:
        return json.dumps(fn(**arguments))
    except TypeError as exc:
        return json.dumps({"error": f"bad arguments: {exc}"})


def example_tools() -> dict[str, list[dict[str, Any]]]:
    """The example tool sets in resources/tools/, by file stem."""
    folder = resource("tools")
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(folder).glob("*.json"))}
