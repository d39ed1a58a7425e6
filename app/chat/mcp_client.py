"""MCP servers, connected with the official SDK (`mcp` 2.x) behind a synchronous facade. No Qt.

One McpManager owns one asyncio event loop on its own daemon thread; every server's connection is a
task there, so nothing the SDK does runs on the caller's thread (the window's or the CLI's). The
caller's methods block until their answer, each bounded by a timeout: `start(config)` (a stdio or
streamable-HTTP server, initialised and its tools listed), `call(...)` a tool, `stop`. A server that
fails or times out is stopped and its state says why.

Start, calls, timeouts and stderr logs in detail: docs/architecture/server.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from contextvars import ContextVar
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


# the processes the SDK spawns for the connection whose task set this (see _record_spawns)
_SPAWNED: ContextVar[list[Any] | None] = ContextVar("clover_mcp_spawned", default=None)
_spawns_recorded = threading.Lock()


def _record_spawns() -> None:
    """Let a connection know its server's process, for the exit code of one that ends before it
    answers (the SDK's stdio_client keeps the process to itself). Wraps the SDK's spawn function
    (mcp 2.3.0, pinned; tests/chat/test_mcp.py checks the exit code) once per process: each spawn
    is appended to the list the calling task's `_SPAWNED` holds."""
    import mcp.client.stdio as stdio

    with _spawns_recorded:
        spawn = stdio._create_platform_compatible_process
        if getattr(spawn, "clover_records", False):
            return

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            process = await spawn(*args, **kwargs)
            sink = _SPAWNED.get()
            if sink is not None:
                sink.append(process)
            return process

        recorded.clover_records = True  # type: ignore[attr-defined]
        stdio._create_platform_compatible_process = recorded


def _json_kind(value: Any) -> str:
    """What a JSON value is, in words: `a string ("object")`, `a number (5)`, `null`."""
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}
    if value is None:
        return "null"
    text = json.dumps(value, ensure_ascii=False)
    return f"{kinds.get(type(value), type(value).__name__)} ({text if len(text) <= 40 else text[:37] + '...'})"


def tool_problem(tool: Any, version: str) -> str | None:
    """What is wrong with one tool of a `tools/list` result by the SDK's own validation for the
    protocol `version` (None: nothing, or a version the SDK does not know, which the SDK judges),
    in words: the common faults of a schema by name, any other by Pydantic's first error."""
    import mcp_types
    from mcp_types import methods
    from pydantic import ValidationError

    try:
        methods.validate_server_result("tools/list", version, {"tools": [tool]})
        mcp_types.ListToolsResult.model_validate({"tools": [tool]}, by_name=False)
        return None
    except ValidationError as exc:
        error = exc.errors()[0]
    except (KeyError, ValueError):  # a version the SDK does not know: it decides for the whole listing
        return None
    if not isinstance(tool, dict):
        return f"it is {_json_kind(tool)}, not an object"
    for key in ("inputSchema", "outputSchema"):
        if key not in tool:
            if key == "inputSchema":
                return "it has no inputSchema"
            continue
        schema = tool[key]
        if schema is None and key == "outputSchema":
            continue
        if not isinstance(schema, dict):
            return f"its {key} is {_json_kind(schema)}, not an object"
        if schema.get("type") != "object":
            return f'its {key}\'s "type" is {_json_kind(schema.get("type"))}, not "object"'
        props = schema.get("properties")
        if props is not None and not isinstance(props, dict):
            return f"its {key}'s properties are {_json_kind(props)}, not an object"
        for name, prop in (props or {}).items():
            if not isinstance(prop, (dict, bool)):
                return f"its {key}'s property {name!r} is {_json_kind(prop)}, not an object"
    where = ".".join(str(part) for part in error.get("loc", ())[2:] if not str(part).startswith(("dict[", "bool")))
    return f"{where or 'the tool'}: {error.get('msg', 'not valid')}"


class _ToolFilter:
    """Between the transport and the session: records the ids of the `initialize` and `tools/list`
    requests going out, reads the negotiated protocol version from the answer to the first, and
    takes every tool that does not validate out of the answers to the second (`skipped`: its name,
    what is wrong), so one bad tool does not fail the listing of the rest."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.version = "2025-11-25"  # until the server says
        self.skipped: dict[str, str] = {}  # tool name -> what is wrong with it
        self._initialize: set[Any] = set()
        self._listings: set[Any] = set()

    def wrap(self, read: Any, write: Any) -> tuple[Any, Any]:
        return _FilteredRead(read, self), _WatchedWrite(write, self)

    def sent(self, item: Any) -> None:
        message = getattr(item, "message", None)
        method, request_id = getattr(message, "method", None), getattr(message, "id", None)
        if request_id is not None and method == "tools/list":
            self._listings.add(request_id)
        elif request_id is not None and method == "initialize":
            self._initialize.add(request_id)

    def received(self, item: Any) -> Any:
        message = getattr(item, "message", None)
        result = getattr(message, "result", None)
        request_id = getattr(message, "id", None)
        if request_id is None or not isinstance(result, dict):
            return item
        if request_id in self._initialize:
            self._initialize.discard(request_id)
            if isinstance(result.get("protocolVersion"), str):
                self.version = result["protocolVersion"]
        elif request_id in self._listings:
            self._listings.discard(request_id)
            tools = result.get("tools")
            if isinstance(tools, list):  # anything else is a broken listing: the SDK says so
                kept = []
                for i, tool in enumerate(tools):
                    problem = tool_problem(tool, self.version)
                    if problem is None:
                        kept.append(tool)
                        continue
                    name = tool.get("name") if isinstance(tool, dict) else None
                    name = name if isinstance(name, str) and name else f"#{i + 1} (no name)"
                    if name not in self.skipped:
                        log.warning("mcp %s: tool %r skipped: %s", self.server, name, problem)
                    self.skipped[name] = problem
                result["tools"] = kept
        return item


class _StreamWrapper:
    """A transport stream with `_ToolFilter` between it and the session: closing and entering go to it."""

    def __init__(self, inner: Any, tool_filter: _ToolFilter) -> None:
        self._inner, self._filter = inner, tool_filter

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Any:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


class _FilteredRead(_StreamWrapper):
    """The transport's read stream, each message passed through `_ToolFilter.received`."""

    @property
    def last_context(self) -> Any:  # the SDK's dispatcher reads it from context-aware streams
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        return self._filter.received(await self._inner.receive())

    def __aiter__(self) -> _FilteredRead:
        return self

    async def __anext__(self) -> Any:
        return self._filter.received(await self._inner.__anext__())


class _WatchedWrite(_StreamWrapper):
    """The transport's write stream, each message shown to `_ToolFilter.sent` first."""

    async def send(self, item: Any) -> None:
        self._filter.sent(item)
        await self._inner.send(item)


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
    skipped: dict[str, str] = field(default_factory=dict)  # tool name -> what is wrong: the tools left out
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

    def stderr_tail(self, lines: int = 10) -> list[str]:
        """The last lines of its stderr that are not blank."""
        return [line for line in self.stderr(2000).splitlines() if line.strip()][-lines:]

    def summary(self) -> str:
        if self.status == "ready":
            timing = f" in {self.started_s:.2f} s" if self.started_s is not None else ""
            skipped = (f"; {len(self.skipped)} skipped (schema not valid)" if self.skipped else "")
            return f"{len(self.tools)} tool(s){timing}{skipped}" + (f"; {len(self.noise)} noise line(s) on stdout"
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
        self._processes: list[Any] = []  # the process the SDK spawned (stdio)
        self.tools_filter = _ToolFilter(config.name)

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
            _record_spawns()
            token = _SPAWNED.set(self._processes)
            try:
                streams = await stack.enter_async_context(stdio_client(params, errlog=self._stderr))
            finally:
                _SPAWNED.reset(token)
            return streams
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert self.config.url is not None
        client = httpx2.AsyncClient(headers=self.config.headers or None,
                                    timeout=httpx2.Timeout(30.0, read=300.0),
                                    trust_env=not _is_loopback(self.config.url))  # no proxy for 127.0.0.1
        await stack.enter_async_context(client)
        return await stack.enter_async_context(streamable_http_client(self.config.url, http_client=client))

    def _end_if_unanswered(self, scope: Any) -> None:
        """A server that did not answer within the start timeout is terminated now, not after the
        SDK's grace for a server whose stdin closed (2 s), so that the timeout bounds the start."""
        import anyio

        if not (self._processes and self.state.status == "starting" and scope.cancel_called
                and anyio.current_time() >= scope.deadline):
            return
        process = self._processes[-1]
        if process.returncode is not None:
            return
        try:
            if hasattr(os, "killpg"):
                os.killpg(process.pid, signal.SIGTERM)  # the SDK starts it in a session of its own
            else:
                process.terminate()
        except (ProcessLookupError, PermissionError):  # gone already; or the SDK's own stop escalates
            pass

    async def run(self, timeout: float, ready: asyncio.Future[None]) -> None:
        import anyio
        from mcp import ClientSession, Implementation

        state = self.state
        started = time.perf_counter()
        state.status, state.error, state.noise, state.tools, state.skipped = "starting", "", [], [], {}
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
                self.scope = scope
                async with AsyncExitStack() as stack:
                    read, write = self.tools_filter.wrap(*await self._transport(stack))
                    stack.callback(self._end_if_unanswered, scope)  # runs before the transport's own stop
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
                    state.skipped = dict(self.tools_filter.skipped)
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
            code = self._processes[-1].returncode if self._processes else None  # known: the stack has stopped it
            if code is not None and _connection_closed(exc):  # the server ended before it answered
                state.error = (f"exited at once (code {code})" if code >= 0
                               else f"ended before it answered (signal {-code})")
            log.info("mcp %s failed: %s%s", self.config.name, state.error,
                     "".join(f"\n  {line}" for line in state.stderr_tail(5)), exc_info=exc)
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

    if isinstance(exc, BaseExceptionGroup):
        return any(_connection_closed(e) for e in exc.exceptions)
    return isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED


def start_all(manager: McpManager, configs: dict[str, ServerConfig], timeouts: Callable[[str], float]) -> None:
    """Start every server at once (each on the manager's loop), returning when all are ready or failed."""
    threads = [threading.Thread(target=manager.start, args=(c, timeouts(c.name)), daemon=True)
               for c in configs.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
