"""A local OpenAI-compatible server for the model the app has loaded. No Qt.

`POST /v1/chat/completions` (streaming or not; tools and `tool_choice`; `response_format`
json_schema/json_object; `stop`, `seed`, `logprobs`/`top_logprobs`; every `chat_template_kwargs`
key, `enable_thinking` and `preserve_thinking` included; earlier turns' `reasoning_content`) and
`GET /v1/models`, on 127.0.0.1 with an optional API key. It serves the app's own engine (the model is
never loaded twice); the engine serialises requests from the chat window and from clients.

What clients can rely on (each checked by tests/test_server.py with real clients):
- errors are OpenAI-shaped JSON: 400 says what is wrong (unsupported parameters like `n` > 1 too,
  as llama-server does), 401 a wrong key, 403 a foreign Host or Origin, 404/405, 411/413 for bodies,
  415 for a body that is not JSON, 503 while no local model is loaded;
- the request body is always read (or the connection closed), so keep-alive never desyncs: a
  401/404 does not leave its body to be parsed as the next request, chunked bodies are decoded;
- prompt, template and grammar problems are found before a stream starts (a 400); an error after
  the first byte of a stream is an SSE `error` event, then the stream closes;
- a client that disconnects stops its generation, streaming or not;
- DNS rebinding and drive-by pages are refused: only loopback Host names (plus `allowed_hosts`),
  no foreign Origin, `application/json` bodies only.

llama-cpp-python's own server is built on FastAPI/uvicorn and loads its own model; what fits here
is its request and response shapes, which this module follows, on the standard library.
"""

from __future__ import annotations

import http.server
import json
import secrets
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.engine.chat_template import TemplateError
from app.engine.local import ChatRequest, EngineError, Reply, SamplingParams
from app.engine.tool_calls import ToolsError, check_tools

if TYPE_CHECKING:
    from app.engine.protocol import ChatEngine

MAX_BODY = 16 << 20
MAX_DRAIN = 64 << 20  # a larger body is not read: the connection is closed after the 413
ROLES = {"system", "user", "assistant", "tool"}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
PORT_TRIES = 20  # a taken port: the next ones are tried, then any free one
DISCONNECT_CHECK = 0.2  # seconds between checks that a non-streaming client is still there


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.code = status, code


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise BadRequest(f"{where}: only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise BadRequest(f"{where}: content must be a string or a list of text parts")


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise BadRequest(f"{where}: tool_calls must be a list")
    calls = []
    for j, c in enumerate(value):
        if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
            raise BadRequest(f"{where}: tool_calls[{j}] must be an object with a function")
        fn = c["function"]
        if not isinstance(fn.get("name"), str):
            raise BadRequest(f"{where}: tool_calls[{j}].function.name must be a string")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args or "{}")
            except ValueError:
                raise BadRequest(f"{where}: tool_calls[{j}] arguments are not JSON") from None
        if not isinstance(args, dict):
            raise BadRequest(f"{where}: tool_calls[{j}] arguments must be a JSON object")
        call: dict[str, Any] = {"type": "function", "function": {"name": fn["name"], "arguments": args}}
        if isinstance(c.get("id"), str):
            call["id"] = c["id"]
        calls.append(call)
    return calls


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"{where}: needs a role, one of {sorted(ROLES)}")
        msg: dict[str, Any] = {"role": m["role"], "content": _content_text(m.get("content"), where)}
        if m["role"] == "assistant":
            if m.get("tool_calls") is not None:
                msg["tool_calls"] = _tool_calls(m["tool_calls"], where)
            for key in ("reasoning_content", "reasoning", "thinking"):  # the names clients use for it
                if isinstance(m.get(key), str) and m[key]:
                    msg["reasoning_content"] = m[key]
                    break
        if m["role"] == "tool":
            msg["tool_call_id"] = m.get("tool_call_id", "") if isinstance(m.get("tool_call_id"), str) else ""
            if isinstance(m.get("name"), str):
                msg["name"] = m["name"]
        out.append(msg)
    return out


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(tools to offer, the call that must be made: None, "required", or a function name)."""
    if value is None or value == "auto":
        return tools, None
    if value == "none":
        return None, None
    if value == "required":
        if not tools:
            raise BadRequest("tool_choice 'required' needs tools")
        return tools, "required"
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict):
        name = value["function"].get("name")
        chosen = [t for t in tools or () if t["function"]["name"] == name]
        if not chosen:
            raise BadRequest(f"tool_choice names {name!r}, which is not among the tools")
        return chosen, name
    raise BadRequest("tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
                     "{\"name\": ...}}")


def parse_request(body: Any) -> tuple[ChatRequest, bool]:
    """An OpenAI chat-completions body as the engine's request, and whether to stream."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    messages = _messages(body.get("messages"))
    tools = None
    if body.get("tools"):
        try:
            tools = check_tools(body["tools"])
        except ToolsError as exc:
            raise BadRequest(f"'tools': {exc}") from None
    tools, forced = _tool_choice(body.get("tool_choice"), tools)
    schema = None
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema")
            if not isinstance(schema, dict):
                raise BadRequest("response_format.json_schema.schema must be a JSON schema object")
        elif fmt.get("type") == "json_object":
            schema = {"type": "object"}
        elif fmt.get("type") not in (None, "text"):
            raise BadRequest(f"response_format type {fmt.get('type')!r} is not supported")
    elif fmt is not None:
        raise BadRequest("response_format must be an object")
    if forced and schema is not None:
        raise BadRequest("a forced tool call and response_format cannot be combined")

    def number(name: str, default: float, lo: float, hi: float) -> float:
        value = body.get(name, default)
        if value is None:
            return default
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not lo <= value <= hi:
            raise BadRequest(f"'{name}' must be a number from {lo} to {hi}")
        return float(value)

    n = body.get("n")
    if n is not None and n != 1:
        raise BadRequest("'n' must be 1: one model answers one choice per request (as llama-server)")
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = SamplingParams().max_tokens
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("'max_tokens' must be a positive integer")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)
                             or len(stop) > 16):
        raise BadRequest("'stop' must be a string or a list of up to 16 non-empty strings")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32):
        raise BadRequest("'seed' must be an integer from 0 to 2**32-1")
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise BadRequest("'logprobs' must be true or false")
    top = body.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= 20):
        raise BadRequest("'top_logprobs' must be an integer from 0 to 20")
    if top and not logprobs:
        raise BadRequest("'top_logprobs' needs 'logprobs': true")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise BadRequest("'chat_template_kwargs' must be an object")
    thinking = kwargs.pop("enable_thinking", None)
    if thinking is not None and not isinstance(thinking, bool):
        raise BadRequest("chat_template_kwargs.enable_thinking must be true or false")
    reserved = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"} & set(kwargs)
    if reserved:
        raise BadRequest(f"chat_template_kwargs cannot set {', '.join(sorted(reserved))}")
    sampling = SamplingParams(temperature=number("temperature", 0.7, 0, 2), top_p=number("top_p", 0.9, 0, 1),
                              max_tokens=max_tokens, stop=tuple(stop or ()), seed=seed,
                              frequency_penalty=number("frequency_penalty", 0.0, -2, 2),
                              presence_penalty=number("presence_penalty", 0.0, -2, 2))
    request = ChatRequest(messages, enable_thinking=thinking, tools=tools, sampling=sampling, json_schema=schema,
                          template_kwargs=kwargs, tool_choice=forced, logprobs=top if logprobs else None)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false")
    return request, stream


def _finish_reason(reply: Reply) -> str:
    if reply.tool_calls:
        return "tool_calls"
    return "length" if reply.stats.stop_reason == "length" else "stop"


def _usage(reply: Reply) -> dict[str, int]:
    s = reply.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens}


def _logprobs(reply: Reply) -> dict[str, Any] | None:
    if reply.logprobs is None:
        return None
    return {"content": reply.logprobs, "refusal": None}


class LocalServer:
    """Serves `engine`, or whatever engine `engine_source()` returns at each request (the window's,
    which may be swapped for a remote one or unloaded: then requests get 503 and /v1/models is empty)."""

    def __init__(self, engine: ChatEngine | None = None, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None, engine_source: Callable[[], ChatEngine | None] | None = None,
                 allowed_hosts: tuple[str, ...] = ()) -> None:
        self._engine = engine
        self._engine_source = engine_source
        self.api_key = api_key or None
        self.host, self.port = host, port
        self.allowed_hosts = LOOPBACK | {host} | set(allowed_hosts)
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def engine(self) -> ChatEngine | None:
        return self._engine_source() if self._engine_source is not None else self._engine

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
        engine = self.engine
        info = engine.info if engine is not None and self.serving() else None
        return info.name if info else None

    def start(self) -> str:
        """Listen on the configured port, else the next free one (PORT_TRIES), else any; the URL."""
        if self._httpd is not None:
            return self.url
        wanted = self.port
        candidates = [wanted + i for i in range(PORT_TRIES)] + [0] if wanted else [0]
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


def _handler(server: LocalServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "CloverLauncher"

        def log_message(self, *args: Any) -> None:  # no request log (prompts are private)
            pass

        # -- plumbing ---------------------------------------------------------

        def _json(self, status: int, payload: dict[str, Any], close: bool = False) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, code: str = "invalid_request_error", close: bool = False) -> None:
            self._json(status, {"error": {"message": message, "type": code, "code": status}}, close)

        def _read_body(self) -> bytes | None:
            """The request body, always consumed (or the connection marked to close); None after an
            error answer was sent."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                return self._read_chunked()
            raw = self.headers.get("Content-Length")
            if raw is None:
                return b""
            if not raw.strip().isdigit():
                self._error(400, f"Content-Length {raw!r} is not a number", close=True)
                return None
            length = int(raw)
            if length > MAX_BODY:
                if length <= MAX_DRAIN:  # read it away, so the client sees the answer, not a broken pipe
                    left = length
                    while left > 0:
                        chunk = self.rfile.read(min(1 << 20, left))
                        if not chunk:
                            break
                        left -= len(chunk)
                self._error(413, f"the body is larger than {MAX_BODY >> 20} MiB", close=True)
                return None
            return self.rfile.read(length)

        def _read_chunked(self) -> bytes | None:
            parts: list[bytes] = []
            total = 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip() or b"x", 16)
                except ValueError:
                    self._error(400, "malformed chunked body", close=True)
                    return None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                total += size
                if total > MAX_BODY:
                    self._error(413, f"the body is larger than {MAX_BODY >> 20} MiB", close=True)
                    return None
                parts.append(self.rfile.read(size))
                self.rfile.readline(16)  # the chunk's CRLF

        def _host_allowed(self) -> bool:
            host = self.headers.get("Host", "")
            name = urllib.parse.urlsplit(f"//{host}").hostname or ""
            if name not in server.allowed_hosts:
                self._error(403, f"Host {host!r} is not allowed: this server answers only loopback names",
                            "permission_error")
                return False
            origin = self.headers.get("Origin")
            if origin and origin != "null" and urllib.parse.urlsplit(origin).hostname not in server.allowed_hosts:
                self._error(403, f"requests from the web page {origin!r} are not allowed", "permission_error")
                return False
            return True

        def _authorised(self) -> bool:
            if server.api_key is None:
                return True
            given = self.headers.get("Authorization", "")
            if secrets.compare_digest(given.encode(), f"Bearer {server.api_key}".encode()):
                return True
            self._error(401, "invalid API key", "authentication_error")
            return False

        # -- routes -------------------------------------------------------------

        def do_GET(self) -> None:  # noqa: N802
            if self._read_body() is None or not self._host_allowed() or not self._authorised():
                return
            if self.path.rstrip("/") == "/v1/models":
                model = server.model_id()
                self._json(200, {"object": "list", "data": [] if model is None else [
                    {"id": model, "object": "model", "created": 0, "owned_by": "clover-launcher"}]})
            else:
                self._error(404, f"no route {self.path}", "not_found_error")

        def do_POST(self) -> None:  # noqa: N802
            raw = self._read_body()
            if raw is None or not self._host_allowed() or not self._authorised():
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
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
                request, stream = parse_request(body)
            except BadRequest as exc:
                self._error(exc.status, str(exc), exc.code)
                return
            engine = server.engine
            if engine is None or not server.serving():
                self._error(503, "no model is loaded in Clover Launcher", "service_unavailable")
                return
            try:  # everything that can be wrong with the prompt, found before a stream starts
                engine.count_tokens(request)
            except (EngineError, TemplateError) as exc:
                self._error(400, str(exc))
                return
            created, cid = int(time.time()), f"chatcmpl-{secrets.token_hex(12)}"
            if stream:
                self._stream(engine, request, created, cid)
                return
            last_check = [0.0]
            gone = [False]

            def client_left() -> bool:
                now = time.monotonic()
                if now - last_check[0] >= DISCONNECT_CHECK:
                    last_check[0] = now
                    gone[0] = _client_gone(self.connection)
                return gone[0]

            try:
                reply = engine.generate(request, should_stop=client_left)
            except (EngineError, TemplateError) as exc:
                self._error(400, str(exc))
                return
            if gone[0]:
                self.close_connection = True
                return
            message: dict[str, Any] = {"role": "assistant", "content": None if reply.tool_calls and not reply.text
                                       else reply.text}
            if reply.reasoning:
                message["reasoning_content"] = reply.reasoning
            if reply.tool_calls:
                message["tool_calls"] = [c.as_openai() for c in reply.tool_calls]
            self._json(200, {"id": cid, "object": "chat.completion", "created": created,
                             "model": server.model_id() or "", "usage": _usage(reply),
                             "choices": [{"index": 0, "message": message, "logprobs": _logprobs(reply),
                                          "finish_reason": _finish_reason(reply)}]})

        def _stream(self, engine: ChatEngine, request: ChatRequest, created: int, cid: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            gone = threading.Event()
            model = server.model_id() or ""

            def write(payload: dict[str, Any]) -> None:
                if gone.is_set():
                    return
                try:
                    self.wfile.write(f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode())
                    self.wfile.flush()
                except OSError:
                    gone.set()  # the client left: stop generating

            def send(delta: dict[str, Any], finish: str | None = None, extra: dict | None = None,
                     logprobs: list | None = None) -> None:
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
                if logprobs is not None:
                    choice["logprobs"] = {"content": logprobs}
                write({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [choice], **(extra or {})})

            send({"role": "assistant", "content": ""})

            def on_event(kind: str, text: str) -> None:
                if kind == "reasoning":
                    send({"reasoning_content": text})
                elif kind == "answer":
                    send({"content": text})

            def on_token(entry: dict[str, Any]) -> None:
                send({}, logprobs=[entry])

            try:
                reply = engine.generate(request, on_event=on_event, should_stop=gone.is_set,
                                        on_logprob=on_token if request.logprobs is not None else None)
            except Exception as exc:  # after the 200: an SSE error event, then the stream ends
                status = 400 if isinstance(exc, (EngineError, TemplateError)) else 500
                write({"error": {"message": str(exc) or type(exc).__name__, "type": "server_error"
                                 if status == 500 else "invalid_request_error", "code": status}})
                return
            for i, call in enumerate(reply.tool_calls):
                send({"tool_calls": [{"index": i, **call.as_openai()}]})
            send({}, _finish_reason(reply), {"usage": _usage(reply)})
            if not gone.is_set():
                try:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except OSError:
                    pass

    return Handler
