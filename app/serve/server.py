"""A local OpenAI- and Anthropic-compatible server for the model the app has loaded. No Qt.

Routes: `POST /v1/chat/completions` (below), `POST /v1/messages` and `/v1/messages/count_tokens`
(Anthropic Messages, app/serve/anthropic_messages.py), `POST /v1/responses` and `GET
/v1/responses/{id}` (OpenAI Responses, app/serve/openai_responses.py), `GET /v1/models`,
`/v1/models/{id}`, `/health` and `/metrics` (Prometheus; these two without the key). Every API's
request goes down one path (a surface, app/serve/surface.py, parses it and shapes its answers and
errors): the checks below, the prompt checked without the engine's lock, the line, the engine.

`POST /v1/chat/completions` (streaming or not, `stream_options.include_usage`; tools, `tool_choice`,
`parallel_tool_calls` and the legacy `functions`/`function_call`; `response_format`
json_schema/json_object; `stop`, `seed`, `logprobs`/`top_logprobs`; every `chat_template_kwargs`
key, `enable_thinking` and `preserve_thinking` included; earlier turns' `reasoning_content`; the
`developer` role as `system`), `GET /v1/models` and `GET /v1/models/{id}`, on 127.0.0.1 with an
optional API key. It serves the app's own engine (the model is never loaded twice); the engine
serialises requests from the chat window and from clients.

What clients can rely on (each checked by tests/serve/test_server*.py with real clients):
- errors are OpenAI-shaped JSON: 400 says what is wrong (unsupported parameters like `n` > 1 or a
  `logit_bias` too, as llama-server does: never silently ignored), 401 a wrong key, 403 a foreign
  Host or Origin, 404/405, 408 a body that stops coming, 411/413 for bodies, 415 for a body that is
  not JSON, 503 while no local model is loaded; `logit_bias` goes into the reply's sampler chain
  (llama.cpp's logit-bias sampler), a token id outside the vocabulary is a 400;
- the request body is always read (or the connection closed), so keep-alive never desyncs: a
  401/404 does not leave its body to be parsed as the next request, chunked bodies are decoded;
- prompt, template and grammar problems (a prompt past the context too) are found before a stream
  starts and before the request waits for the engine, without its lock (app/serve/prompts.py): a
  400 while others generate; an error after the first byte of a stream is an SSE `error` event,
  then the stream closes;
- a client that disconnects stops its generation, streaming or not (and one that leaves while it
  waits is never generated);
- requests take the engine first come, first served, as many at once as it has parallel slots for
  clients (`LoadSettings.parallel`, less the slot kept for the window's chat); a waiting stream sends
  only `: queued, position N` comments until it is served (its role chunk comes with its first
  piece); past `max_queue` waiting requests the answer is 429 with `Retry-After`;
- a stream is generated into a bounded buffer (app/serve/flow.py) that this thread writes out: a
  client that stops reading holds the engine at most `stall_timeout` seconds, then it is dropped;
- tools the model's chat template does not read are never dropped silently: a forced call is a 400,
  otherwise the answer says so (`X-Clover-Warning` header, top-level `warnings`);
- forced and required tool calls are held to the tools' schemas by a grammar in the template's own
  call syntax, and structured output to its schema in the answer, not the reasoning
  (app/engine/grammars.py); a tool call that still does not fit its tool's schema (one cut by
  `max_tokens`, a string past a `pattern` or length the grammar does not hold, an unforced call)
  carries the violations in `x_clover_errors`;
- `usage.prompt_tokens_details.cached_tokens`: the prompt tokens reused from the cache;
- DNS rebinding and drive-by pages are refused: only loopback Host names (plus `allowed_hosts`),
  no foreign Origin, `application/json` bodies only.

llama-cpp-python's own server is built on FastAPI/uvicorn and loads its own model; what fits here
is its request and response shapes, which this module follows, on the standard library.
"""

from __future__ import annotations

import http.server
import json
import re
import secrets
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.engine.chat_template import TemplateError
from app.engine.local import ChatRequest, EngineError, Reply
from app.serve.anthropic_messages import MessagesSurface
from app.serve.flow import POLL, STALL_TIMEOUT, Line, StreamBuffer
from app.serve.guard import LOOPBACK, MAX_BODY, MAX_DRAIN, READ_TIMEOUT, GuardedHandler
from app.serve.metrics import CONTENT_TYPE as METRICS_TYPE
from app.serve.metrics import ServerMetrics
from app.serve.openai_responses import ResponsesSurface
from app.serve.prompts import PromptCheck
from app.serve.response_store import ResponseStore
from app.serve.schema import TOOLS_UNREAD, BadRequest, ParsedRequest, parse_body, parse_request
from app.serve.surface import ChatSurface, Surface

if TYPE_CHECKING:
    from app.engine.protocol import ChatEngine

__all__ = ["MAX_BODY", "MAX_DRAIN", "READ_TIMEOUT", "BadRequest", "LocalServer", "ParsedRequest", "parse_body",
           "parse_request"]

PORT_TRIES = 20  # a taken port: the next ones are tried, then any free one
MAX_QUEUE = 64  # requests waiting for a slot (llama-server queues without a bound; a bound says "busy")
RETRY_AFTER = 1  # seconds a refused client is told to wait
DISCONNECT_CHECK = 0.2  # seconds between checks that a non-streaming client is still there
COUNT_ROUTE = "/v1/messages/count_tokens"
POST_ROUTES = {"/v1/chat/completions", "/v1/messages", COUNT_ROUTE, "/v1/responses"}


class LocalServer:
    """Serves `engine`, or whatever engine `engine_source()` returns at each request (the window's,
    which may be swapped for a remote one or unloaded: then requests get 503 and /v1/models is empty)."""

    def __init__(self, engine: ChatEngine | None = None, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None, engine_source: Callable[[], ChatEngine | None] | None = None,
                 allowed_hosts: tuple[str, ...] = (), read_timeout: float = READ_TIMEOUT,
                 stall_timeout: float = STALL_TIMEOUT, max_queue: int = MAX_QUEUE,
                 responses: ResponseStore | None = None) -> None:
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
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.metrics = ServerMetrics(self.line.waiting, self.busy, self.client_slots)
        self.responses = responses if responses is not None else ResponseStore()  # /v1/responses with store

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

    def count_reply(self, reply: Reply) -> None:
        s = reply.stats
        self.metrics.reply(s.prompt_tokens, max(0, s.prompt_tokens - s.prompt_evaluated), s.generated_tokens,
                           s.stop_reason)

    @property
    def engine(self) -> ChatEngine | None:
        return self._engine_source() if self._engine_source is not None else self._engine

    def client_slots(self) -> int:
        """Requests the engine writes at once for this server's clients: its parallel slots, less the
        one it keeps for the window's chat."""
        engine = self.engine
        info = engine.info if engine is not None else None
        parallel = getattr(info, "parallel", 1) if info is not None else 1
        return max(1, parallel - (1 if parallel > 1 and getattr(engine, "reserve_app", False) else 0))

    def serving(self) -> bool:
        """A local model is loaded and answers requests."""
        engine = self.engine
        return engine is not None and engine.loaded and getattr(engine, "kind", "local") != "remote"

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def model_id(self) -> str | None:
        """The served model's id: its file's name as a slug (no spaces or brackets for a client to
        quote), or the engine's name for the model when it has no file."""
        engine = self.engine
        info = engine.info if engine is not None and self.serving() else None
        return model_slug(getattr(info, "path", "") or info.name) if info else None

    def start(self) -> str:
        """Listen on the configured port, else the next free one (PORT_TRIES), else any; the URL."""
        if self._httpd is not None:
            return self.url
        wanted = self.port
        candidates = [p for p in range(wanted, min(wanted + PORT_TRIES, 65536))] + [0] if wanted else [0]
        last: OSError | None = None
        for port in candidates:
            try:
                self._httpd = http.server.ThreadingHTTPServer((self.host, port), _handler(self))
                break
            except OSError as exc:
                last = exc
        if self._httpd is None:
            raise last or OSError("no port to listen on")
        self.port = self._httpd.server_address[1]
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="openai-server", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


def _client_gone(sock: socket.socket) -> bool:
    """The client closed its side (or reset): nothing to read but the end of the stream."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True



def model_slug(name_or_path: str) -> str:
    """`/models/SmolLM2 135M (test).gguf` -> `SmolLM2-135M-test`: the file name without .gguf, each
    run of characters other than letters, digits, '.', '_' and '-' one '-'."""
    name = name_or_path.replace("\\", "/").rsplit("/", 1)[-1]
    name = name[:-5] if name.lower().endswith(".gguf") else name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "model"


def _handler(server: LocalServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(GuardedHandler):
        config = server
        timeout = server.read_timeout  # the socket's: a request line, headers or body that stop coming

        def _route(self) -> str:
            return urllib.parse.urlsplit(self.path).path.rstrip("/")

        def send_response(self, code: int, message: str | None = None) -> None:
            server.metrics.answered(self._route(), code)
            super().send_response(code, message)

        def _error(self, status: int, message: str, code: str = "invalid_request_error", close: bool = False,
                   headers: dict[str, str] | None = None) -> None:
            """An error in the shape of the API the path belongs to (Anthropic's under /v1/messages)."""
            shape = MessagesSurface if self._route().startswith("/v1/messages") else Surface
            if close:
                headers = {**(headers or {}), "Connection": "close"}
                self.close_connection = True
            self._json(status, shape.error_json(message, status, code), headers=headers)

        def do_GET(self) -> None:  # noqa: N802
            path = self._route()
            if self._admitted(key=path not in ("/health", "/metrics")) is None:
                return
            model = server.model_id()
            entry = None if model is None else {"id": model, "object": "model", "created": 0,
                                                "owned_by": "clover-launcher"}
            if path == "/v1/models":
                self._json(200, {"object": "list", "data": [] if entry is None else [entry]})
            elif path.startswith("/v1/models/"):
                wanted = urllib.parse.unquote(path[len("/v1/models/"):])
                if entry is not None and wanted == model:
                    self._json(200, entry)
                else:
                    self._error(404, f"no model {wanted!r}: this server serves "
                                     + (repr(model) if model else "no model now"), "not_found_error")
            elif path == "/health":
                health = server.health()
                self._json(200 if health["status"] == "ok" else 503, health)
            elif path == "/metrics":
                data = server.metrics.text()
                self.send_response(200)
                self.send_header("Content-Type", METRICS_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif path.startswith("/v1/responses/"):
                rid = urllib.parse.unquote(path[len("/v1/responses/"):])
                stored = server.responses.get(rid)
                if stored is None:
                    self._error(404, f"no stored response {rid!r} (only responses created with store true are "
                                     f"kept, the latest {server.responses.limit})", "not_found_error")
                else:
                    self._json(200, stored["response"])
            else:
                self._error(404, f"no route {self.path}", "not_found_error")

        def do_POST(self) -> None:  # noqa: N802
            raw = self._admitted()
            if raw is None:
                return
            path = self._route()
            if path not in POST_ROUTES:
                self._error(404, f"no route {self.path}", "not_found_error")
                return
            ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if ctype != "application/json":
                self._error(415, "the body must be sent as application/json")
                return
            try:
                body = json.loads(raw or b"null")
            except ValueError as exc:
                self._error(400, f"the body is not valid JSON: {exc}")
                return
            try:
                surface = self._surface(path, body)
            except BadRequest as exc:
                self._error(exc.status, str(exc), exc.code)
                return
            request = surface.request
            engine = server.engine
            if engine is None or not server.serving():
                self._error(503, "no model is loaded in Clover Launcher", "service_unavailable")
                return
            if isinstance(surface, ChatSurface):
                n_vocab = getattr(engine.info, "n_vocab", 0)
                outside = [t for t, _ in surface.parsed.logit_bias if n_vocab and t >= n_vocab]
                if outside:
                    self._error(400, f"logit_bias: token {outside[0]} is not in the model's vocabulary "
                                     f"(ids 0 to {n_vocab - 1})")
                    return
            warnings = surface.warnings
            if request.tools and not getattr(engine.info, "tools_in_template", True):
                if request.tool_choice:
                    self._error(400, "the model's chat template does not read tools, so the model cannot be "
                                     f"shown them and a call cannot be forced ({surface.forced_words}); "
                                     "send the tools without forcing a call, or use a model whose template "
                                     "reads tools")
                    return
                warnings.append(TOOLS_UNREAD)
            try:  # everything that can be wrong with the prompt, found before a stream starts and before
                # it joins the line: without the engine's lock
                prompt_tokens = server.prompts.check(engine, request, fit=path != COUNT_ROUTE)
            except (EngineError, TemplateError) as exc:
                self._error(400, surface.error_message(exc))
                return
            if path == COUNT_ROUTE:
                self._json(200, {"input_tokens": prompt_tokens})
                return
            if server.line.waiting() >= server.max_queue:
                self._error(429, f"the server is busy: {server.max_queue} requests are already waiting for a "
                                 "slot; try again shortly", "rate_limit_exceeded",
                            headers={"Retry-After": str(RETRY_AFTER)})
                return
            if surface.stream:
                self._stream(engine, surface, prompt_tokens)
            else:
                self._complete(engine, surface)

        def _surface(self, path: str, body: Any) -> Surface:
            """The request in the shape of the API its path names (BadRequest when it is not valid)."""
            if path == "/v1/chat/completions":
                return ChatSurface(parse_body(body), f"chatcmpl-{secrets.token_hex(12)}", int(time.time()))
            if path in ("/v1/messages", COUNT_ROUTE):
                return MessagesSurface(body, count_only=path == COUNT_ROUTE)
            return ResponsesSurface(body, server.responses)

        def _complete(self, engine: ChatEngine, surface: Surface) -> None:
            last_check = [0.0]
            gone = [False]

            def client_left() -> bool:
                now = time.monotonic()
                if now - last_check[0] >= DISCONNECT_CHECK:
                    last_check[0] = now
                    gone[0] = _client_gone(self.connection)
                return gone[0]

            ticket = server.line.wait(lambda ahead: None, client_left)
            if ticket is None:  # the client left while it waited: nothing was generated
                self.close_connection = True
                return
            try:
                reply = engine.generate(surface.request, should_stop=client_left)
            except (EngineError, TemplateError) as exc:
                self._error(400, surface.error_message(exc))
                return
            finally:
                server.line.leave(ticket)
            server.count_reply(reply)
            if gone[0]:
                self.close_connection = True
                return
            payload = surface.complete(reply, server.model_id() or "")
            surface.finished(reply, payload)  # stored before the client hears of it (and may ask for it)
            warnings = surface.warnings
            self._json(200, payload, headers={"X-Clover-Warning": "; ".join(warnings)} if warnings else None)

        def _stream(self, engine: ChatEngine, surface: Surface, prompt_tokens: int) -> None:
            """The generation runs on a thread of its own, into a bounded buffer; this thread writes
            what comes out of it. Nothing is sent but `: queued` comments until the engine serves
            the request: the surface's opening events go out with its first piece."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            if surface.warnings:
                self.send_header("X-Clover-Warning", "; ".join(surface.warnings))
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            buffer = StreamBuffer(server.stall_timeout, on_drop=self._shut)
            generation = threading.Thread(target=_generate_into, args=(server, engine, surface.request, buffer),
                                          name="openai-server-generation", daemon=True)
            generation.start()
            try:
                self._write_stream(buffer, surface, prompt_tokens, generation)
            except OSError:
                pass  # the client left, or did not read for the socket's timeout
            finally:
                buffer.drop()  # a no-op after the end; else the generation stops

        def _write_stream(self, buffer: StreamBuffer, surface: Surface, prompt_tokens: int,
                          generation: threading.Thread) -> None:
            def send(frames: list[bytes]) -> None:
                for frame in frames:
                    self.wfile.write(frame)

            served = False
            while not buffer.dropped.is_set():
                item = buffer.get(POLL)
                if item is None and generation.is_alive():
                    if _client_gone(self.connection):
                        return
                    continue
                if item is None:
                    item = buffer.get(0.01)  # what it put last, after the wait above gave up
                    if item is None:
                        return  # it ended without a word (it cannot, but never wait for nothing)
                kind, value = item
                if kind == "queued":
                    self.wfile.write(f": queued, position {value}\n\n".encode())
                elif kind == "error":
                    status = 400 if isinstance(value, (EngineError, TemplateError)) else 500
                    send(surface.failure(surface.error_message(value) or type(value).__name__, status))
                    return
                else:
                    if not served:
                        send(surface.opening(server.model_id() or "", prompt_tokens))
                        served = True
                    if kind == "event":
                        send(surface.piece(*value))
                    elif kind == "logprob":
                        send(surface.logprob(value))
                    elif kind == "end":
                        frames = surface.ending(value)
                        surface.finished(value, None)  # stored before the client hears of it
                        send(frames)
                        self.wfile.flush()
                        return
                self.wfile.flush()

        def _shut(self) -> None:
            """Unblock a write to a client that does not read: the connection is closed."""
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    return Handler


def _generate_into(server: LocalServer, engine: ChatEngine, request: ChatRequest, buffer: StreamBuffer) -> None:
    """A stream's generation, on its own thread: its place in line, then the engine's pieces and its
    reply (or error), all into the buffer. It never touches the socket, so a client that does not
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
                                    if request.logprobs is not None else None)
        finally:
            line.leave(ticket)  # before the last put, which may wait for a slow reader
    except Exception as exc:  # after the 200: an SSE error event, then the stream ends
        buffer.put("error", exc)
    else:
        server.count_reply(reply)
        buffer.put("end", reply)
