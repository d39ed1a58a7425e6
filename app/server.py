"""A local OpenAI-compatible server for the model the app has loaded. No Qt.

`POST /v1/chat/completions` (streaming or not; tools; `response_format` json_schema/json_object;
`chat_template_kwargs.enable_thinking`) and `GET /v1/models`, on 127.0.0.1 by default, with an
optional API key. It serves the app's own `Engine` (the model is never loaded twice); the engine
serialises requests from the chat window and from clients. Errors are OpenAI-shaped JSON:
400 for a bad request (it says what is wrong), 401 for a wrong key, 404/405, 413 for a body over
16 MiB, 503 while no model is loaded.

llama-cpp-python's own server is built on FastAPI/uvicorn and loads its own model; what fits here
is its request and response shapes, which this module follows, on the standard library.
"""

from __future__ import annotations

import http.server
import json
import secrets
import threading
import time
from typing import Any

from app.engine import ChatRequest, Engine, EngineError, Reply, SamplingParams
from app.tool_calls import ToolsError, check_tools

MAX_BODY = 16 << 20
ROLES = {"system", "user", "assistant", "tool"}


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_request_error"):
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


def parse_request(body: dict[str, Any]) -> tuple[ChatRequest, bool]:
    """An OpenAI chat-completions body as the engine's request, and whether to stream."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}]: needs a role, one of {sorted(ROLES)}")
        msg: dict[str, Any] = {"role": m["role"], "content": _content_text(m.get("content"), f"messages[{i}]")}
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = (c or {}).get("function") or {}
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        args = json.loads(args or "{}")
                    except ValueError:
                        raise BadRequest(f"messages[{i}]: tool call arguments are not JSON") from None
                calls.append({"type": "function", "function": {"name": fn.get("name", ""), "arguments": args}})
            msg["tool_calls"] = calls
        if m["role"] == "tool":
            msg["tool_call_id"] = m.get("tool_call_id", "")
            if m.get("name"):
                msg["name"] = m["name"]
        out.append(msg)
    tools = None
    if body.get("tools"):
        try:
            tools = check_tools(body["tools"])
        except ToolsError as exc:
            raise BadRequest(f"'tools': {exc}") from None
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

    def number(name: str, default: float, lo: float, hi: float) -> float:
        value = body.get(name, default)
        if value is None:
            return default
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not lo <= value <= hi:
            raise BadRequest(f"'{name}' must be a number from {lo} to {hi}")
        return float(value)

    max_tokens = body.get("max_completion_tokens", body.get("max_tokens")) or 4096
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("'max_tokens' must be a positive integer")
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = kwargs.get("enable_thinking", True) if isinstance(kwargs, dict) else True
    sampling = SamplingParams(temperature=number("temperature", 0.7, 0, 2), top_p=number("top_p", 0.9, 0, 1),
                              max_tokens=max_tokens)
    return ChatRequest(out, enable_thinking=bool(thinking), tools=tools, sampling=sampling,
                       json_schema=schema), bool(body.get("stream"))


def _finish_reason(reply: Reply) -> str:
    if reply.tool_calls:
        return "tool_calls"
    return "length" if reply.stats.stop_reason == "length" else "stop"


def _usage(reply: Reply) -> dict[str, int]:
    s = reply.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens}


PORT_TRIES = 20  # a taken port: the next ones are tried, then any free one


class LocalServer:
    """Serves `engine`, or whatever engine `engine_source()` returns at each request (the window's,
    which may be swapped for a remote one or unloaded: then requests get 503 and /v1/models is empty)."""

    def __init__(self, engine: Engine | None = None, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None, engine_source=None):
        self._engine = engine
        self._engine_source = engine_source
        self.api_key = api_key or None
        self.host, self.port = host, port
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def engine(self):
        return self._engine_source() if self._engine_source is not None else self._engine

    def serving(self) -> bool:
        """A local model is loaded and answers requests."""
        engine = self.engine
        return engine is not None and engine.loaded and getattr(engine, "kind", "local") == "local"

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def model_id(self) -> str | None:
        info = self.engine.info if self.serving() else None
        return info.name if info else None

    def start(self) -> str:
        """Listen on the configured port, else the next free one (PORT_TRIES), else any; the URL."""
        if self._httpd is not None:
            return self.url
        wanted = self.port
        candidates = [wanted + i for i in range(PORT_TRIES)] if wanted else [0]
        last: OSError | None = None
        for port in candidates + ([0] if wanted else []):
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


def _handler(server: LocalServer):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "CloverLauncher"

        def log_message(self, *args) -> None:  # no request log (prompts are private)
            pass

        # -- plumbing ---------------------------------------------------------

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, code: str = "invalid_request_error") -> None:
            self._json(status, {"error": {"message": message, "type": code, "code": status}})

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
            if not self._authorised():
                return
            if self.path.rstrip("/") == "/v1/models":
                model = server.model_id()
                self._json(200, {"object": "list", "data": [] if model is None else [
                    {"id": model, "object": "model", "created": 0, "owned_by": "clover-launcher"}]})
            else:
                self._error(404, f"no route {self.path}", "not_found_error")

        def do_POST(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._error(404, f"no route {self.path}", "not_found_error")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._error(413, f"the body is larger than {MAX_BODY >> 20} MiB")
                return
            try:
                body = json.loads(self.rfile.read(length) or b"null")
                request, stream = parse_request(body)
            except ValueError as exc:
                self._error(400, f"the body is not valid JSON: {exc}")
                return
            except BadRequest as exc:
                self._error(exc.status, str(exc), exc.code)
                return
            if not server.serving():
                self._error(503, "no model is loaded in Clover Launcher", "service_unavailable")
                return
            created, cid = int(time.time()), f"chatcmpl-{secrets.token_hex(12)}"
            try:
                if stream:
                    self._stream(request, created, cid)
                else:
                    reply = server.engine.generate(request)
                    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
                    if reply.reasoning:
                        message["reasoning_content"] = reply.reasoning
                    if reply.tool_calls:
                        message["tool_calls"] = [c.as_openai() for c in reply.tool_calls]
                    self._json(200, {"id": cid, "object": "chat.completion", "created": created,
                                     "model": server.model_id() or "", "usage": _usage(reply),
                                     "choices": [{"index": 0, "message": message,
                                                  "finish_reason": _finish_reason(reply)}]})
            except EngineError as exc:
                self._error(400, str(exc))

        def _stream(self, request: ChatRequest, created: int, cid: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            gone = threading.Event()

            def send(delta: dict[str, Any], finish: str | None = None, extra: dict | None = None) -> None:
                if gone.is_set():
                    return
                chunk = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": server.model_id() or "",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **(extra or {})}
                try:
                    self.wfile.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
                    self.wfile.flush()
                except OSError:
                    gone.set()  # the client left: stop generating

            send({"role": "assistant", "content": ""})

            def on_event(kind: str, text: str) -> None:
                if kind == "reasoning":
                    send({"reasoning_content": text})
                elif kind == "answer":
                    send({"content": text})

            reply = server.engine.generate(request, on_event=on_event, should_stop=gone.is_set)
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
