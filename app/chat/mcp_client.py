"""MCP servers, connected with the official SDK (`mcp` 2.x) behind a synchronous facade. No Qt.

One McpManager owns one asyncio event loop on its own daemon thread; every server's connection is
a task there, so nothing the SDK does ever runs on the caller's thread (the window's or the CLI's).
The caller's methods block until their answer, each bounded by a timeout: the window calls them
from an Op (app/ui/base/ops.py), the CLI and the scenario bench directly.

- `start(config)` spawns a stdio server (stderr kept in `<logs>/mcp/NAME.stderr.log`) or opens a
  streamable-HTTP session, runs `initialize` and lists the tools, all within the start timeout;
  past it the server is stopped (stdin closed, then its process tree killed by the SDK) and the
  state says it timed out. The state records how long launch-to-tools-listed took.
- Lines a stdio server prints on stdout that are not JSON-RPC are noise: the SDK hands them to the
  session as exceptions without ending it; they are kept in the state (and its log) and shown.
- `call(server, tool, args, timeout)` returns a CallOutcome. A timeout, a server that died, an
  error response or the tool's own `isError` all become an outcome with `is_error` and a message
  the model can read (and the call's card shows); only a programming error raises.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import urlparse

from app import APP_NAME, __version__
from app.base.paths import app_dirs
from app.chat.mcp_config import DEFAULT_START_TIMEOUT, ServerConfig

log = logging.getLogger(__name__)
T = TypeVar("T")
STDERR_SHOWN = 8000  # characters of a server's stderr kept in its state for display
NOISE_KEPT = 50
_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")


class _DropParseNoise(logging.Filter):
    """The SDK logs every non-JSON stdout line with a traceback; the manager reports them itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to parse JSONRPC message")


logging.getLogger("mcp.client.stdio").addFilter(_DropParseNoise())


class McpError(Exception):
    """A server that cannot be used (not started, failed, unknown)."""


@dataclass(frozen=True)
class McpTool:
    server: str
    name: str  # the server's name for it
    description: str
    input_schema: dict[str, Any]

    def openai(self, offered_name: str | None = None) -> dict[str, Any]:
        """The tool as an OpenAI function definition, the shape the chat template and the checks take."""
        schema = self.input_schema if isinstance(self.input_schema, dict) else {}
        if schema.get("type") != "object":
            schema = {"type": "object", "properties": {}}
        return {"type": "function", "function": {"name": offered_name or safe_name(self.name),
                                                 "description": self.description, "parameters": schema}}


def safe_name(name: str) -> str:
    """A tool name a template and an OpenAI client accept: [A-Za-z0-9_-], at most 64 characters."""
    return _NAME_OK.sub("_", name)[:64] or "tool"


@dataclass
class ServerState:
    name: str
    transport: str
    status: str = "stopped"  # starting, ready, failed, timed out, stopped
    error: str = ""
    tools: list[McpTool] = field(default_factory=list)
    noise: list[str] = field(default_factory=list)  # stdout lines that were not JSON-RPC
    server_info: str = ""
    started_s: float | None = None  # launch until the tools were listed
    stderr_path: Path | None = None

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    def stderr(self, limit: int = STDERR_SHOWN) -> str:
        if self.stderr_path is None:
            return ""
        try:
            text = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return text[-limit:]

    def summary(self) -> str:
        if self.status == "ready":
            timing = f" in {self.started_s:.2f} s" if self.started_s is not None else ""
            return f"{len(self.tools)} tool(s){timing}" + (f"; {len(self.noise)} noise line(s) on stdout"
                                                           if self.noise else "")
        return self.status + (f": {self.error}" if self.error else "")


@dataclass(frozen=True)
class CallOutcome:
    text: str  # what the model is given: the tool's text, or {"error": ...}
    is_error: bool
    seconds: float
    timed_out: bool = False

    @classmethod
    def error(cls, message: str, seconds: float, *, timed_out: bool = False) -> CallOutcome:
        return cls(json.dumps({"error": message}, ensure_ascii=False), True, seconds, timed_out)


def result_text(result: Any) -> tuple[str, bool]:
    """A CallToolResult as text for the model: its text blocks, structured content when there is no
    text, a note for images and audio; with is_error."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '?')}, not shown to the model]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(block, 'uri', '?')}]")
        else:
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True), ensure_ascii=False))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), bool(result.is_error)


def _is_loopback(url: str) -> bool:
    return (urlparse(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


class _Connection:
    """One server's session, owned by a task on the manager's loop."""

    def __init__(self, config: ServerConfig, state: ServerState) -> None:
        self.config, self.state = config, state
        self.session: Any = None
        self.scope: Any = None  # the anyio CancelScope around the whole connection
        self.stopped = threading.Event()  # set when the task has ended and everything is closed
        self._stderr: IO[str] | None = None

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a stdout line that is not JSON-RPC, or a transport fault
            errors = getattr(message, "errors", None)
            line = None
            if callable(errors):
                try:
                    line = errors()[0].get("input")
                except (IndexError, TypeError, AttributeError):
                    line = None
            if isinstance(line, str):
                text = line
            elif isinstance(line, (dict, list)):  # JSON, but not a JSON-RPC message
                text = json.dumps(line, ensure_ascii=False)
            else:
                text = f"{type(message).__name__}: {str(message).splitlines()[0] if str(message) else ''}"
            log.info("mcp %s: not JSON-RPC: %s", self.config.name, text[:200])
            if len(self.state.noise) < NOISE_KEPT:
                self.state.noise.append(text[:500])

    async def _transport(self, stack: AsyncExitStack) -> tuple[Any, Any]:
        if self.config.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            folder = app_dirs().logs / "mcp"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{safe_name(self.config.name)}.stderr.log"
            # appending: the server's writes never clobber what we read, and a re-start starts the file anew
            path.write_text("", encoding="utf-8")
            self._stderr = stack.enter_context(open(path, "a", encoding="utf-8"))  # noqa: SIM115 (the stack closes it)
            self.state.stderr_path = path
            params = StdioServerParameters(command=self.config.command, args=list(self.config.args),
                                           env=self.config.env or None, cwd=self.config.cwd,
                                           encoding_error_handler="replace")  # a bad byte must not end the reader
            return await stack.enter_async_context(stdio_client(params, errlog=self._stderr))
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert self.config.url is not None
        client = httpx2.AsyncClient(headers=self.config.headers or None,
                                    timeout=httpx2.Timeout(30.0, read=300.0),
                                    trust_env=not _is_loopback(self.config.url))  # no proxy for 127.0.0.1
        await stack.enter_async_context(client)
        return await stack.enter_async_context(streamable_http_client(self.config.url, http_client=client))

    async def run(self, timeout: float, ready: asyncio.Future[None]) -> None:
        import anyio
        from mcp import ClientSession, Implementation

        state = self.state
        started = time.perf_counter()
        state.status, state.error, state.noise, state.tools = "starting", "", [], []
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
                self.scope = scope
                async with AsyncExitStack() as stack:
                    read, write = await self._transport(stack)
                    session = await stack.enter_async_context(ClientSession(
                        read, write, message_handler=self._on_message,
                        client_info=Implementation(name=APP_NAME, version=__version__)))
                    init = await session.initialize()
                    state.server_info = f"{init.server_info.name} {init.server_info.version}".strip()
                    tools: list[McpTool] = []
                    cursor = None
                    while True:
                        from mcp.types import PaginatedRequestParams

                        listed = await session.list_tools(
                            params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                        tools += [McpTool(self.config.name, t.name, t.description or "", dict(t.input_schema or {}))
                                  for t in listed.tools]
                        cursor = listed.next_cursor
                        if not cursor:
                            break
                    state.tools, state.started_s = tools, time.perf_counter() - started
                    state.status = "ready"
                    self.session = session
                    scope.deadline = math.inf
                    if not ready.done():
                        ready.set_result(None)
                    log.info("mcp %s: %d tool(s) in %.2f s", self.config.name, len(tools), state.started_s)
                    await anyio.sleep_forever()
            if scope.cancelled_caught and state.status == "starting":
                state.status = "timed out"
                state.error = f"no tools listed within {timeout:g} s (the server did not answer)"
        except Exception as exc:  # every failure is the server's state, shown to the user
            state.status = "failed"
            state.error = _in_words(exc)
            log.info("mcp %s failed: %s", self.config.name, state.error, exc_info=exc)
        finally:
            if state.status in ("ready", "starting"):
                state.status = "stopped"
            self.session = None
            self.stopped.set()
            if not ready.done():
                ready.set_result(None)


def _in_words(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_in_words(e) for e in exc.exceptions)
    if isinstance(exc, FileNotFoundError):
        return f"program not found: {exc.filename or exc}"
    text = str(exc) or type(exc).__name__
    return text if not text.startswith("(") else f"{type(exc).__name__}: {text}"


class McpManager:
    """The servers of one mcp.json, each started and called from any thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-loop", daemon=True)
        self._thread.start()
        self._connections: dict[str, _Connection] = {}
        self.states: dict[str, ServerState] = {}
        self._lock = threading.Lock()

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -------------------------------------------------------------- servers

    def start(self, config: ServerConfig, timeout: float = DEFAULT_START_TIMEOUT) -> ServerState:
        """Start (or restart) one server; returns when its tools are listed or it failed or timed out."""
        self.stop(config.name)
        state = ServerState(config.name, config.transport, status="starting")
        conn = _Connection(config, state)
        with self._lock:
            self._connections[config.name] = conn
            self.states[config.name] = state

        async def launch() -> None:
            ready: asyncio.Future[None] = self._loop.create_future()
            self._loop.create_task(conn.run(timeout, ready))
            await ready

        # the deadline is inside the connection; the margin covers the SDK's bounded shutdown (~6 s)
        self._run(launch(), timeout + 15)
        if state.status == "timed out":
            conn.stopped.wait(10)
        return state

    def stop(self, name: str) -> None:
        with self._lock:
            conn = self._connections.pop(name, None)
        if conn is None:
            return
        scope = conn.scope
        if scope is not None:
            self._loop.call_soon_threadsafe(scope.cancel)
            conn.stopped.wait(10)
        conn.state.status = "stopped" if conn.state.status in ("ready", "starting") else conn.state.status

    def close(self, wait: float = 6.0) -> None:
        """Stop every server at once (each bounded by the SDK's shutdown), then the loop."""
        with self._lock:
            conns = list(self._connections.values())
            self._connections.clear()
        for conn in conns:
            if conn.scope is not None:
                self._loop.call_soon_threadsafe(conn.scope.cancel)
        deadline = time.monotonic() + wait
        for conn in conns:
            conn.stopped.wait(max(0.0, deadline - time.monotonic()))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2)

    def state(self, name: str) -> ServerState:
        if name not in self.states:
            raise McpError(f"no MCP server named {name!r}")
        return self.states[name]

    # -------------------------------------------------------------- calls

    def call(self, server: str, tool: str, arguments: dict[str, Any] | None, timeout: float) -> CallOutcome:
        """Call one tool; every failure is an outcome with is_error and a message for the model."""
        start = time.perf_counter()
        conn = self._connections.get(server)
        session = conn.session if conn is not None and conn.state.ready else None
        if conn is None or session is None:
            state = self.states.get(server)
            why = f"the MCP server {server!r} is not running" + (f" ({state.summary()})" if state else "")
            return CallOutcome.error(why, 0.0)

        async def call() -> Any:
            import anyio

            with anyio.fail_after(timeout):
                return await session.call_tool(tool, arguments or {})

        try:
            result = self._run(call(), timeout + 10)
        except TimeoutError:
            return CallOutcome.error(f"{server}/{tool} timed out after {timeout:g} s", time.perf_counter() - start,
                                     timed_out=True)
        except Exception as exc:  # the server's error response, or the connection ended under the call
            if conn.stopped.is_set() or _connection_closed(exc):
                conn.state.status, conn.state.error = "failed", f"the server ended during a call ({_in_words(exc)})"
                conn.session = None
            return CallOutcome.error(f"{server}/{tool} failed: {_in_words(exc)}", time.perf_counter() - start)
        text, is_error = result_text(result)
        seconds = time.perf_counter() - start
        if is_error:
            return CallOutcome(json.dumps({"error": text or "the tool reported an error"}, ensure_ascii=False),
                               True, seconds)
        return CallOutcome(text, False, seconds)


def _connection_closed(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED

    return isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED


def start_all(manager: McpManager, configs: dict[str, ServerConfig], timeouts: Callable[[str], float]) -> None:
    """Start every server at once (each on the manager's loop), returning when all are ready or failed."""
    threads = [threading.Thread(target=manager.start, args=(c, timeouts(c.name)), daemon=True)
               for c in configs.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
