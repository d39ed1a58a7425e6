"""MCP servers as the user configures them. No Qt.

Two files in the config folder (app/base/paths.py):

- `mcp.json`, Claude Desktop's format, so a file from another app can be pasted as it is:
  `{"mcpServers": {NAME: {"command": ..., "args": [...], "env": {...}} | {"url": ..., "headers": {...}}}}`.
  The launcher only reads it (the Tools panel edits it as text); an unknown key in a server's entry
  is ignored, as other apps add their own.
- `mcp_settings.json`, the launcher's own choices about those servers, written by the Tools panel:
  per server whether each call is confirmed first, its start timeout, the tools switched off and a
  timeout per tool. Kept apart so that the launcher never rewrites the user's mcp.json.

Every problem in either file is a McpConfigError whose message names the file, the server and the
key, in words a user can act on.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from app.base.paths import app_dirs

log = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT = 20.0  # seconds from launch to the tools listed
DEFAULT_TOOL_TIMEOUT = 60.0  # seconds for one call
EXAMPLE = {"mcpServers": {"example": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"],
                                      "env": {}}}}


class McpConfigError(ValueError):
    """A configuration file that cannot be used, with the reason in words."""


@dataclass(frozen=True)
class ServerConfig:
    name: str
    command: str | None = None  # stdio: the program and its arguments
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None  # streamable HTTP
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def describe(self) -> str:
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)


def config_path() -> Path:
    return app_dirs().config / "mcp.json"


def settings_path() -> Path:
    return app_dirs().config / "mcp_settings.json"


def _strings(value: Any, where: str, kind: str) -> Any:
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise McpConfigError(f"{where} must be a list of strings")
        return tuple(value)
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise McpConfigError(f"{where} must be an object of strings (\"NAME\": \"value\")")
    return dict(value)


def parse_server(name: str, entry: Any, source: str = "mcp.json") -> ServerConfig:
    where = f"{source}: server {name!r}"
    if not name.strip():
        raise McpConfigError(f"{source}: a server has an empty name")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where} must be an object with \"command\" or \"url\"")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise McpConfigError(f"{where} needs exactly one of \"command\" (a program started here) or \"url\" "
                             "(a streamable-HTTP server)")
    if has_command:
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise McpConfigError(f"{where}: \"command\" must be a program name or path")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise McpConfigError(f"{where}: \"cwd\" must be a folder path")
        return ServerConfig(name, command=command, args=_strings(entry.get("args", []), f"{where}: \"args\"", "list"),
                            env=_strings(entry.get("env", {}), f"{where}: \"env\"", "dict"), cwd=cwd)
    url = entry["url"]
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise McpConfigError(f"{where}: \"url\" must be an http:// or https:// address, not {url!r}")
    return ServerConfig(name, url=url, headers=_strings(entry.get("headers", {}), f"{where}: \"headers\"", "dict"))


def parse_config(text: str, source: str = "mcp.json") -> dict[str, ServerConfig]:
    """The servers of an mcp.json text, in file order; McpConfigError says what is wrong and where."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") \
            from None
    if not isinstance(data, dict) or "mcpServers" not in data:
        raise McpConfigError(f"{source} must be an object with \"mcpServers\": "
                             "{\"mcpServers\": {\"NAME\": {\"command\": ..., \"args\": [...]}}}")
    servers = data["mcpServers"]
    if not isinstance(servers, dict):
        raise McpConfigError(f"{source}: \"mcpServers\" must be an object of servers by name")
    return {name: parse_server(name, entry, source) for name, entry in servers.items()}


def load_config(path: Path | None = None) -> dict[str, ServerConfig]:
    """The configured servers; none when the file does not exist."""
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{path} cannot be read: {exc}") from None
    return parse_config(text, str(path))


def save_config_text(text: str, path: Path | None = None) -> dict[str, ServerConfig]:
    """Check the text, then write it (atomically); the servers it holds. Nothing is written if it is wrong."""
    path = path or config_path()
    servers = parse_config(text, path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return servers


# ----------------------------------------------------------------------------- the launcher's choices


@dataclass
class ServerPrefs:
    confirm_calls: bool = True
    start_timeout: float = DEFAULT_START_TIMEOUT
    disabled_tools: set[str] = field(default_factory=set)
    tool_timeouts: dict[str, float] = field(default_factory=dict)

    def timeout_for(self, tool: str) -> float:
        return self.tool_timeouts.get(tool, DEFAULT_TOOL_TIMEOUT)

    def as_json(self) -> dict[str, Any]:
        return {"confirm_calls": self.confirm_calls, "start_timeout": self.start_timeout,
                "disabled_tools": sorted(self.disabled_tools),
                "tool_timeouts": dict(sorted(self.tool_timeouts.items()))}


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
        raise McpConfigError(f"{where} must be a number of seconds above 0, not {value!r}")
    return float(value)


def parse_prefs(entry: Any, where: str) -> ServerPrefs:
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where} must be an object")
    unknown = set(entry) - {"confirm_calls", "start_timeout", "disabled_tools", "tool_timeouts"}
    if unknown:
        log.warning("%s: unknown key(s) %s dropped", where, ", ".join(sorted(unknown)))
    prefs = ServerPrefs()
    if "confirm_calls" in entry:
        if not isinstance(entry["confirm_calls"], bool):
            raise McpConfigError(f"{where}: confirm_calls must be true or false")
        prefs.confirm_calls = entry["confirm_calls"]
    if "start_timeout" in entry:
        prefs.start_timeout = _seconds(entry["start_timeout"], f"{where}: start_timeout")
    prefs.disabled_tools = set(_strings(entry.get("disabled_tools", []), f"{where}: disabled_tools", "list"))
    timeouts = entry.get("tool_timeouts", {})
    if not isinstance(timeouts, dict):
        raise McpConfigError(f"{where}: tool_timeouts must be an object of seconds by tool name")
    prefs.tool_timeouts = {str(k): _seconds(v, f"{where}: tool_timeouts.{k}") for k, v in timeouts.items()}
    return prefs


class McpSettings:
    """The launcher's per-server choices (mcp_settings.json); a server not in the file has the defaults."""

    def __init__(self, servers: dict[str, ServerPrefs] | None = None, path: Path | None = None) -> None:
        self.servers = servers or {}
        self.path = path or settings_path()

    @classmethod
    def load(cls, path: Path | None = None) -> McpSettings:
        path = path or settings_path()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(path=path)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise McpConfigError(f"{path} cannot be read: {exc}") from None
        servers = data.get("servers") if isinstance(data, dict) else None
        if not isinstance(servers, dict):
            raise McpConfigError(f"{path} must be an object with \"servers\"")
        return cls({name: parse_prefs(entry, f"{path.name}: server {name!r}") for name, entry in servers.items()},
                   path)

    def get(self, server: str) -> ServerPrefs:
        return self.servers.setdefault(server, ServerPrefs())

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"version": 1, "servers": {n: p.as_json() for n, p in self.servers.items()}},
                                  indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)
