"""A local OpenAI- and Anthropic-compatible server for the model the app has loaded. No Qt.

Routes: `POST /v1/chat/completions` (here), `POST /v1/messages` and `/v1/messages/count_tokens`
(app/serve/anthropic_messages.py), `POST /v1/responses` and `GET /v1/responses/{id}`
(app/serve/openai_responses.py), `GET /v1/models`, `/v1/models/{id}`, `/health` and `/metrics`.
Every API's request goes down one path: a surface (app/serve/surface.py) parses it and shapes its
answers, then the checks, the prompt prepared without the engine's lock, the line, the engine. It
runs on Starlette and uvicorn on a thread of its own, behind the guard (app/serve/guard.py); nothing
that blocks runs on the event loop. It serves the app's own engine on 127.0.0.1, with an optional key.

What clients can rely on (errors, queueing, streams, tools, security): docs/architecture/server.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.engine.chat_template import TemplateError
from app.engine.contract import ChatRequest, EngineError, Reply
from app.serve import connection
from app.serve.anthropic_messages import MessagesSurface
from app.serve.connection import Connection
from app.serve.flow import POLL, STALL_TIMEOUT, Line, StreamBuffer
from app.serve.guard import LOOPBACK, MAX_BODY, MAX_DRAIN, READ_TIMEOUT, Guard, error_response, json_response
from app.serve.loop_calls import in_thread
from app.serve.loop_calls import soon as _soon
from app.serve.metrics import CONTENT_TYPE as METRICS_TYPE
from app.serve.metrics import ServerMetrics
from app.serve.openai_responses import ResponsesSurface
from app.serve.prompts import Checked, PromptCheck
from app.serve.recorder import Recorder
from app.serve.request_log import RequestLog
from app.serve.response_store import ResponseStore
from app.serve.schema import TOOLS_UNREAD, BadRequest, ParsedRequest, parse_body, parse_request
from app.serve.surface import ChatSurface, Surface, warning_header

if TYPE_CHECKING:
    from app.engine.contract import ChatEngine

__all__ = ["MAX_BODY", "MAX_DRAIN", "READ_TIMEOUT", "BadRequest", "LocalServer", "ParsedRequest", "parse_body",
           "parse_request"]

PORT_TRIES = 20  # a taken port: the next ones are tried, then any free one
MAX_QUEUE = 64  # requests waiting for a slot (llama-server queues without a bound; a bound says "busy")
RETRY_AFTER = 1  # seconds a refused client is told to wait
STOP_GRACE = 2.0  # seconds stop() gives the replies being written to end before it cuts them
BACKLOG = 128  # connections the kernel holds before the server takes them
SERVER_NAME = "CloverLauncher"
COUNT_ROUTE = "/v1/messages/count_tokens"
POST_ROUTES = ("/v1/chat/completions", "/v1/messages", COUNT_ROUTE, "/v1/responses")

class LocalServer:
    """Serves `engine`, or whatever engine `engine_source()` returns at each request (the window's,
    which may be swapped for a remote one or unloaded: then requests get 503 and /v1/models is empty)."""

    def __init__(self, engine: ChatEngine | None = None, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None, engine_source: Callable[[], ChatEngine | None] | None = None,
                 allowed_hosts: tuple[str, ...] = (), read_timeout: float = READ_TIMEOUT,
                 stall_timeout: float = STALL_TIMEOUT, max_queue: int = MAX_QUEUE,
                 responses: ResponseStore | None = None, requests: RequestLog | None = None) -> None:
        self._engine = engine
        self.stall_timeout = stall_timeout  # a stream whose client reads nothing this long is dropped
        self.line = Line(self.client_slots)  # the requests for the engine, first come first served
        self.max_queue = max_queue  # requests that may wait for a slot; past it, 429 with Retry-After
        self.prompts = PromptCheck()  # a request's prompt, checked before it joins the line
        self.read_timeout = read_timeout  # a client silent this long mid-request gets a 408 (or is closed)
        self._engine_source = engine_source
        self.api_key = api_key or None
        self.host, self.port = host, port
        # beyond loopback (0.0.0.0, a LAN address) clients name the machine as they reach it: any Host
        self.allowed_hosts = LOOPBACK | {host} | set(allowed_hosts) | (set() if host in LOOPBACK else {"*"})
        self._uvicorn: uvicorn.Server | None = None
        self._doorbell: Doorbell | None = None  # the event loop's (`_stream`)
        self._thread: threading.Thread | None = None
        self._address: tuple[str, int] | None = None
        self.metrics = ServerMetrics(self.line.waiting, self.busy, self.client_slots)
        self.responses = responses if responses is not None else ResponseStore()  # /v1/responses with store
        self.requests = requests if requests is not None else RequestLog()  # what the inspector shows

    def busy(self) -> int:
        """Requests the engine is writing for this server's clients now."""
        return len(self.line) - self.line.waiting()

    def health(self) -> dict[str, Any]:
        """`GET /health`: "ok" with a local model loaded, "loading" while one loads, else "no_model"
        (503 for both), and the slots: busy, for clients in all, requests waiting."""
        engine = self.engine
        if self.serving():
            status = "ok"
        elif engine is not None and getattr(engine, "loading", False):
            status = "loading"
        else:
            status = "no_model"
        return {"status": status, "model": self.model_id(),
                "slots": {"busy": self.busy(), "total": self.client_slots(), "waiting": self.line.waiting()}}

    def answered(self, path: str, status: int) -> None:
        """Every answer, for /metrics (the guard calls it)."""
        self.metrics.answered(path, status)

    def count_reply(self, reply: Reply) -> None:
        self.metrics.reply(reply.stats)

    @property
    def engine(self) -> ChatEngine | None:
        return self._engine_source() if self._engine_source is not None else self._engine

    def client_slots(self) -> int:
        """Requests the engine writes at once for this server's clients now: its parallel slots, less the
        one it keeps for the window's chat, less those the window's replies hold beyond it (with one
        slot and the window writing: none, and the server's requests hear their place in line)."""
        engine = self.engine
        info = engine.info if engine is not None else None
        parallel = getattr(info, "parallel", 1) if info is not None else 1
        kept = 1 if parallel > 1 and getattr(engine, "reserve_app", False) else 0
        app = getattr(getattr(engine, "app_replies", None), "count", 0)
        return max(0, parallel - kept - max(0, app - kept))

    def serving(self) -> bool:
        """A local model is loaded and answers requests."""
        engine = self.engine
        return engine is not None and engine.loaded and getattr(engine, "kind", "local") != "remote"

    @property
    def url(self) -> str:
        if self._address is None:
            raise RuntimeError("the server is not running")
        host, port = self._address
        return f"http://[{host}]:{port}/v1" if ":" in host else f"http://{host}:{port}/v1"

    @property
    def running(self) -> bool:
        return self._uvicorn is not None

    def model_id(self) -> str | None:
        """The served model's id: its file's name as a slug (no spaces or brackets for a client to
        quote), or the engine's name for the model when it has no file."""
        engine = self.engine
        info = engine.info if engine is not None and self.serving() else None
        return model_slug(getattr(info, "path", "") or info.name) if info else None

    # -- listening --------------------------------------------------------------------------------

    def start(self) -> str:
        """Listen on the configured port, else the next free one (PORT_TRIES), else any; the URL. The
        socket is bound here (so a taken port is known at once), then served by uvicorn on a thread of
        its own with its own event loop (uvicorn takes signals only on the main thread: none here)."""
        if self._uvicorn is not None:
            return self.url
        sock = self._listen()
        config = uvicorn.Config(self.app(), http=Connection, ws="none", lifespan="off", loop="asyncio",
                                interface="asgi3", log_config=None, access_log=False, proxy_headers=False,
                                server_header=False, headers=[("Server", SERVER_NAME)], backlog=BACKLOG,
                                timeout_keep_alive=max(1, math.ceil(self.read_timeout)))
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="openai-server", daemon=True)
        thread.start()
        while not server.started and thread.is_alive():
            time.sleep(0.005)
        if not server.started:
            sock.close()
            raise OSError("the server's event loop did not start")
        self._address = sock.getsockname()[:2]
        self.port = self._address[1]
        self._uvicorn, self._thread = server, thread
        return self.url

    def _listen(self) -> socket.socket:
        wanted = self.port
        candidates = [p for p in range(wanted, min(wanted + PORT_TRIES, 65536))] + [0] if wanted else [0]
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        last: OSError | None = None
        for port in candidates:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                if sys.platform != "win32":  # there it would let two servers share a port
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((self.host, port))
                sock.listen(BACKLOG)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        raise last or OSError("no port to listen on")

    def stop(self, grace: float = STOP_GRACE) -> None:
        """Stop listening at once; replies being written get `grace` seconds to end, then they are cut
        (their generation stops). Returns when the server's thread has ended."""
        server, thread = self._uvicorn, self._thread
        if server is None or thread is None:
            return
        server.config.timeout_graceful_shutdown = max(0, math.ceil(grace))
        server.should_exit = True
        thread.join(grace + 10)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)
        self._uvicorn = self._thread = self._address = None

    # -- the routes ---------------------------------------------------------------------------------

    def app(self) -> Starlette:
        """The ASGI application: the guard (app/serve/guard.py), then the routes."""
        routes = [Route(path, self._post, methods=["POST"]) for path in POST_ROUTES] + [
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/models/{model:path}", self._model, methods=["GET"]),
            Route("/v1/responses/{rid:path}", self._stored, methods=["GET"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/metrics", self._metrics, methods=["GET"])]
        app = Starlette(routes=routes, middleware=[Middleware(Recorder, server=self), Middleware(Guard, config=self)],
                        exception_handlers={HTTPException: self._no_route})
        app.router.redirect_slashes = False  # the guard reads /v1/models/ as /v1/models
        return app

    async def _no_route(self, request: Request, exc: Exception) -> Response:
        path = request.scope["path"]
        if isinstance(exc, HTTPException) and exc.status_code == 405:
            return error_response(path, 405, f"{request.method} is not allowed on {path}", headers=exc.headers)
        return error_response(path, 404, f"no route {path}", "not_found_error")

    def _entry(self) -> dict[str, Any] | None:
        model = self.model_id()
        return None if model is None else {"id": model, "object": "model", "created": 0, "owned_by": "clover-launcher"}

    async def _models(self, request: Request) -> Response:
        entry = self._entry()
        return json_response(200, {"object": "list", "data": [] if entry is None else [entry]})

    async def _model(self, request: Request) -> Response:
        wanted, entry = request.path_params["model"], self._entry()
        if entry is not None and wanted == entry["id"]:
            return json_response(200, entry)
        model = self.model_id()
        return error_response(request.scope["path"], 404, f"no model {wanted!r}: this server serves "
                              + (repr(model) if model else "no model now"), "not_found_error")

    async def _health(self, request: Request) -> Response:
        health = self.health()
        return json_response(200 if health["status"] == "ok" else 503, health)

    async def _metrics(self, request: Request) -> Response:
        return Response(self.metrics.text(), 200, media_type=METRICS_TYPE)

    async def _stored(self, request: Request) -> Response:
        rid = request.path_params["rid"]
        stored = await run_in_threadpool(self.responses.get, rid)
        if stored is None:
            return error_response(request.scope["path"], 404, f"no stored response {rid!r} (only responses created "
                                  f"with store true are kept, the latest {self.responses.limit})", "not_found_error")
        return json_response(200, stored["response"])

    async def _post(self, request: Request) -> Response:
        """Every API's request: parsed and checked on a worker thread (a large body's JSON and prompt
        take time: the event loop goes on serving others), then in line, then generated."""
        path = request.scope["path"]
        try:
            surface, engine, checked = await run_in_threadpool(
                self._check, path, request.state.body, request.headers.get("content-type", ""))
        except BadRequest as exc:
            return error_response(path, exc.status, str(exc), exc.code)
        request.state.surface = surface  # its reply, once made, for the request inspector (app/serve/recorder.py)
        if path == COUNT_ROUTE:
            return json_response(200, {"input_tokens": checked.n})
        if self.line.waiting() >= self.max_queue:
            return error_response(path, 429, f"the server is busy: {self.max_queue} requests are already waiting "
                                             "for a slot; try again shortly", "rate_limit_exceeded",
                                  headers={"Retry-After": str(RETRY_AFTER)})
        conn = connection.of(request.scope)
        if surface.stream:
            return self._stream(engine, surface, checked, conn)
        return await self._complete(path, engine, surface, checked, conn)

    def _check(self, path: str, raw: bytes, ctype: str) -> tuple[Surface, ChatEngine, Checked]:
        """The request as its API's surface, for the engine loaded now, its prompt checked (its length
        in tokens, and the prompt the engine prepared for the reply); BadRequest with the status to
        answer."""
        if ctype.split(";")[0].strip().lower() != "application/json":
            raise BadRequest("the body must be sent as application/json", 415)
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise BadRequest(f"the body is not valid JSON: {exc}") from None
        surface = self._surface(path, body)
        request = surface.request
        engine = self.engine
        if engine is None or not self.serving():
            raise BadRequest("no model is loaded in Clover Launcher", 503, "service_unavailable")
        if isinstance(surface, ChatSurface):
            n_vocab = getattr(engine.info, "n_vocab", 0)
            outside = [t for t, _ in surface.parsed.logit_bias if n_vocab and t >= n_vocab]
            if outside:
                raise BadRequest(f"logit_bias: token {outside[0]} is not in the model's vocabulary "
                                 f"(ids 0 to {n_vocab - 1})")
        if request.tools and not getattr(engine.info, "tools_in_template", True):
            if request.tool_choice:
                raise BadRequest("the model's chat template does not read tools, so the model cannot be shown "
                                 f"them and a call cannot be forced ({surface.forced_words}); send the tools "
                                 "without forcing a call, or use a model whose template reads tools")
            surface.warnings.append(TOOLS_UNREAD)
        try:  # everything that can be wrong with the prompt, found before a stream starts and before
            # it joins the line: without the engine's lock
            return surface, engine, self.prompts.check(engine, request, fit=path != COUNT_ROUTE)
        except (EngineError, TemplateError) as exc:
            raise BadRequest(surface.error_message(exc)) from None

    def _surface(self, path: str, body: Any) -> Surface:
        """The request in the shape of the API its path names (BadRequest when it is not valid)."""
        if path == "/v1/chat/completions":
            return ChatSurface(parse_body(body), f"chatcmpl-{secrets.token_hex(12)}", int(time.time()))
        if path in ("/v1/messages", COUNT_ROUTE):
            return MessagesSurface(body, count_only=path == COUNT_ROUTE)
        return ResponsesSurface(body, self.responses)

    # -- a whole reply ---------------------------------------------------------------------------

    async def _complete(self, path: str, engine: ChatEngine, surface: Surface, checked: Checked,
                        conn: Connection | None) -> Response:
        watch = ClientWatch(conn)
        try:
            reply = await in_thread(self._generate_whole, engine, surface.request, checked, watch.gone)
        except (EngineError, TemplateError) as exc:
            return error_response(path, 400, surface.error_message(exc))
        except Exception as exc:  # noqa: BLE001 -- the engine failed: said, not a dropped connection
            return error_response(path, 500, surface.error_message(exc) or type(exc).__name__, "server_error")
        finally:
            watch.cancelled = True  # a cancelled request (the server stopping) stops its reply too
        if reply is None or watch.said_gone:  # the client left: nobody to answer
            return Dropped(conn)
        payload = surface.complete(reply, self.model_id() or "")
        await run_in_threadpool(surface.done, reply, payload)  # stored before the client hears of it
        warnings = surface.warnings
        return json_response(200, payload, {"X-Clover-Warning": warning_header(warnings)} if warnings else None)

    def _generate_whole(self, engine: ChatEngine, request: ChatRequest, checked: Checked,
                        gone: Callable[[], bool]) -> Reply | None:
        """On a thread of its own: the request's place in line, then its reply (None when the client
        left while it waited: nothing was generated)."""
        ticket = self.line.wait(lambda ahead: None, gone)
        if ticket is None:
            return None
        try:
            reply = engine.generate(request, should_stop=gone, **prepared(checked))
        finally:
            self.line.leave(ticket)
        self.count_reply(reply)
        return reply

    # -- a stream -----------------------------------------------------------------------------------

    def _stream(self, engine: ChatEngine, surface: Surface, checked: Checked, conn: Connection | None) -> Response:
        """The generation runs on a thread of its own, into a bounded buffer; the event loop writes
        what comes out of it. Nothing is sent but `: queued` comments until the engine serves the
        request: the surface's opening events go out with its first piece."""
        loop = asyncio.get_running_loop()
        if self._doorbell is None or self._doorbell.loop is not loop:  # one a loop (a restart makes a new one)
            self._doorbell = Doorbell(loop)
        wake = Wake(self._doorbell)
        buffer = StreamBuffer(self.stall_timeout, on_drop=lambda: _soon(loop, conn.abort) if conn else None,
                              on_put=wake.poke)
        generation = threading.Thread(target=_generate_into, args=(self, engine, surface.request, checked, buffer),
                                      name="openai-server-generation", daemon=True)
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        if surface.warnings:
            headers["X-Clover-Warning"] = warning_header(surface.warnings)
        frames = self._frames(buffer, wake, generation, surface, checked.n, conn)
        return EventStream(frames, buffer, generation, headers)

    async def _frames(self, buffer: StreamBuffer, wake: Wake, generation: threading.Thread, surface: Surface,
                      prompt_tokens: int, conn: Connection | None) -> AsyncIterator[bytes]:
        """The stream's bytes, as the generation puts its pieces into the buffer (all that is there at
        once in one write)."""
        served = False
        while not buffer.dropped.is_set():
            items = await wake.take(buffer)
            if not items:
                if generation.is_alive():
                    if conn is not None and conn.gone():
                        return  # the client left while nothing came
                    continue
                items = buffer.take()  # what it put last, after the wait above gave up
                if not items:
                    return  # it ended without a word (it cannot, but never wait for nothing)
            out: list[bytes] = []
            for kind, value in items:
                if kind == "queued":
                    out.append(f": queued, position {value}\n\n".encode())
                    continue
                if kind == "error":
                    status = 400 if isinstance(value, (EngineError, TemplateError)) else 500
                    out += surface.failure(surface.error_message(value) or type(value).__name__, status)
                    buffer.end()
                    yield b"".join(out)
                    return
                if not served:
                    out += surface.opening(self.model_id() or "", prompt_tokens)
                    served = True
                if kind == "event":
                    out += surface.piece(*value)
                elif kind == "logprob":
                    out += surface.logprob(value)
                elif kind == "end":
                    out += surface.ending(value)
                    await run_in_threadpool(surface.done, value, None)  # stored before the client hears
                    buffer.end()
                    yield b"".join(out)
                    return
            if out:
                yield b"".join(out)
            if conn is not None and conn.lost:
                return


class ClientWatch:
    """Whether a whole reply's client is still there, for the engine's `should_stop` and the line; it
    remembers saying no (the reply was cut for it: it gets no answer)."""

    def __init__(self, conn: Connection | None) -> None:
        self.conn = conn
        self.said_gone = False
        self.cancelled = False

    def gone(self) -> bool:
        if self.cancelled or (self.conn is not None and self.conn.gone()):
            self.said_gone = True
        return self.said_gone


class Doorbell:
    """The event loop's wake-ups for the streams it writes. From other threads, `ring` wakes a stream's
    `Wake` with one wake-up of the loop for all those rung before it runs: the slots' scheduler hands
    every reply its token in the same moment, and each wake-up is a write to the loop's socket and a
    thread switch (on 2 cores, taken from the decode). On the loop, it is the waiting streams' clock:
    while any waits, one timer wakes them all every POLL seconds to look whether their client or
    generation is gone, instead of a timeout made and cancelled for each wait (with 4 slots streaming,
    a sixth of the loop's time went to the timeouts' timer heap)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._due: list[Wake] = []
        self._waiting: set[Wake] = set()  # the loop's own: streams waiting for a piece
        self._tick: asyncio.TimerHandle | None = None

    def ring(self, wake: Wake) -> None:
        with self._lock:
            self._due.append(wake)
            if len(self._due) > 1:
                return  # a wake-up is on its way: it wakes this one too
        _soon(self.loop, self._answer)

    def _answer(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for wake in due:
            wake.wake()

    def waiting(self, wake: Wake) -> None:
        """On the loop: `wake` waits, woken at the latest by the next tick."""
        self._waiting.add(wake)
        if self._tick is None:
            self._tick = self.loop.call_later(POLL, self._on_tick)

    def done(self, wake: Wake) -> None:
        self._waiting.discard(wake)

    def _on_tick(self) -> None:
        self._tick = None  # the streams that wait again after they looked start the next one
        for wake in list(self._waiting):
            wake.wake()


class Wake:
    """Wakes the event loop when a stream's generation puts a piece in its buffer, only while the loop
    waits for one (a thread-safe call per piece would cost a wake-up each), through the loop's doorbell."""

    def __init__(self, bell: Doorbell) -> None:
        self.bell = bell
        self.future: asyncio.Future[None] | None = None  # set while the loop waits

    def poke(self) -> None:
        if self.future is not None:
            self.bell.ring(self)

    def wake(self) -> None:
        """On the loop: the wait ends (a piece came, or the doorbell's tick)."""
        future = self.future
        if future is not None and not future.done():
            future.set_result(None)

    async def take(self, buffer: StreamBuffer) -> list[tuple[str, Any]]:
        """What the buffer holds, waiting for something when it holds nothing: until a piece comes or
        the doorbell's next tick (at most POLL seconds; empty then)."""
        items = buffer.take()
        if items:
            return items
        self.future = self.bell.loop.create_future()  # before looking again: a piece put after this look pokes
        try:
            items = buffer.take()
            if not items:
                self.bell.waiting(self)
                await self.future
                items = buffer.take()
        finally:
            self.future = None
            self.bell.done(self)
        return items


class EventStream(StreamingResponse):
    """A stream's response: its generation starts when the response does, and whatever ends the
    response before its last chunk (a client gone, the server stopping) drops the buffer, which stops
    the generation and cuts the connection; after its last chunk the connection stays open."""

    def __init__(self, frames: AsyncIterator[bytes], buffer: StreamBuffer, generation: threading.Thread,
                 headers: dict[str, str]) -> None:
        super().__init__(frames, headers=headers)
        self.buffer, self.generation = buffer, generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.generation.start()
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.buffer.drop()  # a no-op after the end (`StreamBuffer.end`); else the generation stops


class Dropped(Response):
    """No answer: the connection is closed (its client left; what was made for it is thrown away)."""

    def __init__(self, conn: Connection | None) -> None:
        super().__init__(status_code=500)
        self.conn = conn

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.conn is None:
            await super().__call__(scope, receive, send)  # another server: no connection to close
            return
        self.conn.abort()
        await asyncio.sleep(0)  # the connection is lost before the request ends: uvicorn sends nothing


def model_slug(name_or_path: str) -> str:
    """`/models/SmolLM2 135M (test).gguf` -> `SmolLM2-135M-test`: the file name without .gguf, each
    run of characters other than letters, digits, '.', '_' and '-' one '-'."""
    name = name_or_path.replace("\\", "/").rsplit("/", 1)[-1]
    name = name[:-5] if name.lower().endswith(".gguf") else name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "model"


def prepared(checked: Checked) -> dict[str, Any]:
    """generate's `prepared` argument, for an engine that prepared the prompt (others take none)."""
    return {} if checked.prepared is None else {"prepared": checked.prepared}


def _generate_into(server: LocalServer, engine: ChatEngine, request: ChatRequest, checked: Checked,
                   buffer: StreamBuffer) -> None:
    """A stream's generation, on its own thread: its place in line, then the engine's pieces and its
    reply (or error), all into the buffer. It never touches the connection, so a client that does not
    read holds the engine at most `stall_timeout` seconds."""
    line = server.line
    ticket = line.wait(lambda ahead: buffer.put("queued", ahead), buffer.dropped.is_set)
    if ticket is None:
        return
    try:
        try:
            reply = engine.generate(request, on_event=lambda kind, text: buffer.put("event", (kind, text)),
                                    should_stop=buffer.dropped.is_set,
                                    on_logprob=(lambda entry: buffer.put("logprob", entry))
                                    if request.logprobs is not None else None, **prepared(checked))
        finally:
            line.leave(ticket)  # before the last put, which may wait for a slow reader
    except Exception as exc:  # after the 200: an SSE error event, then the stream ends
        buffer.put("error", exc)
    else:
        server.count_reply(reply)
        buffer.put("end", reply)
