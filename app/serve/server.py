"""A local OpenAI-compatible server for the model the app has loaded. No Qt.

`POST /v1/chat/completions` (streaming or not, `stream_options.include_usage`; tools, `tool_choice`,
`parallel_tool_calls` and the legacy `functions`/`function_call`; `response_format`
json_schema/json_object; `stop`, `seed`, `logprobs`/`top_logprobs`; every `chat_template_kwargs`
key, `enable_thinking` and `preserve_thinking` included; earlier turns' `reasoning_content`; the
`developer` role as `system`), `GET /v1/models` and `GET /v1/models/{id}`, on 127.0.0.1 with an
optional API key. It serves the app's own engine (the model is never loaded twice); the engine
serialises requests from the chat window and from clients.

What clients can rely on (each checked by tests/test_server*.py with real clients):
- errors are OpenAI-shaped JSON: 400 says what is wrong (unsupported parameters like `n` > 1 or a
  `logit_bias` too, as llama-server does: never silently ignored), 401 a wrong key, 403 a foreign
  Host or Origin, 404/405, 408 a body that stops coming, 411/413 for bodies, 415 for a body that is
  not JSON, 503 while no local model is loaded;
- the request body is always read (or the connection closed), so keep-alive never desyncs: a
  401/404 does not leave its body to be parsed as the next request, chunked bodies are decoded;
- prompt, template and grammar problems are found before a stream starts (a 400); an error after
  the first byte of a stream is an SSE `error` event, then the stream closes;
- a client that disconnects stops its generation, streaming or not;
- tools the model's chat template does not read are never dropped silently: a forced call is a 400,
  otherwise the answer says so (`X-Clover-Warning` header, top-level `warnings`);
- a tool call that does not fit its tool's schema carries the violations in `x_clover_errors`;
- `usage.prompt_tokens_details.cached_tokens`: the prompt tokens reused from the cache;
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.engine.chat_template import TemplateError
from app.engine.local import ChatRequest, EngineError, Reply, SamplingParams
from app.engine.tool_calls import ToolCall, ToolsError, check_tools

if TYPE_CHECKING:
    from app.engine.protocol import ChatEngine

MAX_BODY = 16 << 20
MAX_DRAIN = 64 << 20  # a larger body is not read: the connection is closed after the 413
READ_TIMEOUT = 30.0  # seconds a connection may stay silent mid-request (a body shorter than its length)
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}  # developer: system; function: tool
TOOLS_UNREAD = ("tools were not shown to the model: its chat template does not read tools, so the model "
                "answers without knowing them")
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
        # OpenAI's clients send the system prompt as "developer" now; a legacy "function" result is a tool's
        role = {"developer": "system", "function": "tool"}.get(m["role"], m["role"])
        msg: dict[str, Any] = {"role": role, "content": _content_text(m.get("content"), where)}
        if role == "assistant":
            if m.get("tool_calls") is not None:
                msg["tool_calls"] = _tool_calls(m["tool_calls"], where)
            elif m.get("function_call") is not None:  # the legacy form: one call
                msg["tool_calls"] = _tool_calls([{"type": "function", "function": m["function_call"]}], where)
            for key in ("reasoning_content", "reasoning", "thinking"):  # the names clients use for it
                if isinstance(m.get(key), str) and m[key]:
                    msg["reasoning_content"] = m[key]
                    break
        if role == "tool":
            msg["tool_call_id"] = m.get("tool_call_id", "") if isinstance(m.get("tool_call_id"), str) else ""
            if isinstance(m.get("name"), str):
                msg["name"] = m["name"]
        out.append(msg)
    return out


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None,
                 what: str = "tool_choice") -> tuple[list[dict[str, Any]] | None, str | None]:
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
            raise BadRequest(f"{what} names {name!r}, which is not among the "
                             f"{'functions' if what == 'function_call' else 'tools'}")
        return chosen, name
    raise BadRequest("tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
                     "{\"name\": ...}}")


def _legacy_functions(body: dict[str, Any]) -> tuple[Any, Any]:
    """The legacy `functions` and `function_call` as `tools` and `tool_choice` (or the body's own)."""
    functions, call = body.get("functions"), body.get("function_call")
    if functions is None:
        if call is not None:
            raise BadRequest("'function_call' needs 'functions' (with 'tools', use 'tool_choice')")
        return body.get("tools"), body.get("tool_choice")
    if body.get("tools") is not None or body.get("tool_choice") is not None:
        raise BadRequest("'functions' and 'function_call' (the legacy form) cannot be mixed with 'tools' and "
                         "'tool_choice'")
    if not isinstance(functions, list):
        raise BadRequest("'functions' must be a list of function definitions")
    tools = [{"type": "function", "function": f} for f in functions]
    if call is None or call in ("auto", "none"):
        return tools, call
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        return tools, {"type": "function", "function": {"name": call["name"]}}
    raise BadRequest("function_call must be 'none', 'auto' or {\"name\": ...}")


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """OpenAI's `logit_bias` ({"token id": bias from -100 to 100}) as (token, bias) pairs, checked."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise BadRequest("'logit_bias' must be an object mapping token ids to a bias from -100 to 100")
    out = []
    for key, bias in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise BadRequest(f"logit_bias: {key!r} is not a token id (a non-negative integer)")
        if not isinstance(bias, (int, float)) or isinstance(bias, bool) or not -100 <= bias <= 100:
            raise BadRequest(f"logit_bias[{key!r}] must be a number from -100 to 100")
        out.append((int(key), float(bias)))
    return tuple(out)


@dataclass(frozen=True)
class ParsedRequest:
    """A chat-completions body: the engine's request and how to answer it."""

    request: ChatRequest
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a usage-only chunk ends the stream
    one_call: bool = False  # parallel_tool_calls false, or the legacy functions: at most one call is returned
    legacy_functions: bool = False  # the request used `functions`: the call is answered as `function_call`
    logit_bias: tuple[tuple[int, float], ...] = ()


def parse_request(body: Any) -> tuple[ChatRequest, bool]:
    """An OpenAI chat-completions body as the engine's request, and whether to stream."""
    parsed = parse_body(body)
    return parsed.request, parsed.stream


def parse_body(body: Any) -> ParsedRequest:
    """An OpenAI chat-completions body, checked: every parameter is applied or refused with a 400."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    messages = _messages(body.get("messages"))
    legacy = body.get("functions") is not None
    raw_tools, choice = _legacy_functions(body)
    tools = None
    if raw_tools:
        try:
            tools = check_tools(raw_tools)
        except ToolsError as exc:
            raise BadRequest(f"'{'functions' if legacy else 'tools'}': {exc}") from None
    tools, forced = _tool_choice(choice, tools, "function_call" if legacy else "tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise BadRequest("'parallel_tool_calls' must be true or false")
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
    limit_name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = body.get(limit_name)
    if max_tokens is None:
        max_tokens = SamplingParams().max_tokens
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest(f"'{limit_name}' must be a positive integer")
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
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise BadRequest("'stream_options' is only allowed when 'stream' is true")
        if not isinstance(options, dict):
            raise BadRequest("'stream_options' must be an object")
        include_usage = options.get("include_usage", False)
        if not isinstance(include_usage, bool):
            raise BadRequest("stream_options.include_usage must be true or false")
    return ParsedRequest(request, stream, include_usage, one_call=parallel is False or legacy,
                         legacy_functions=legacy, logit_bias=_logit_bias(body.get("logit_bias")))


def _finish_reason(reply: Reply, calls: list[ToolCall], legacy: bool = False) -> str:
    if calls:
        return "function_call" if legacy else "tool_calls"
    return "length" if reply.stats.stop_reason == "length" else "stop"


def _returned_calls(reply: Reply, parsed: ParsedRequest) -> list[ToolCall]:
    """The calls to answer with: the first only when the client allows one (parallel_tool_calls false,
    or the legacy `function_call`, which holds one)."""
    return reply.tool_calls[:1] if parsed.one_call else list(reply.tool_calls)


def _call_json(call: ToolCall) -> dict[str, Any]:
    """A call in OpenAI's shape; one that did not validate against its tool's schema (or did not parse)
    carries the violations in `x_clover_errors`, so a client never takes it for a valid call."""
    out = call.as_openai()
    if call.errors:
        out["x_clover_errors"] = list(call.errors)
    return out


def _function_call_json(call: ToolCall) -> dict[str, Any]:
    """The legacy `function_call` shape of a call."""
    out = dict(call.as_openai()["function"])
    if call.errors:
        out["x_clover_errors"] = list(call.errors)
    return out


def _usage(reply: Reply) -> dict[str, Any]:
    s = reply.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": max(0, s.prompt_tokens - s.prompt_evaluated)}}


def _logprobs(reply: Reply) -> dict[str, Any] | None:
    if reply.logprobs is None:
        return None
    return {"content": reply.logprobs, "refusal": None}


class LocalServer:
    """Serves `engine`, or whatever engine `engine_source()` returns at each request (the window's,
    which may be swapped for a remote one or unloaded: then requests get 503 and /v1/models is empty)."""

    def __init__(self, engine: ChatEngine | None = None, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None, engine_source: Callable[[], ChatEngine | None] | None = None,
                 allowed_hosts: tuple[str, ...] = (), read_timeout: float = READ_TIMEOUT) -> None:
        self._engine = engine
        self.read_timeout = read_timeout  # a client silent this long mid-request gets a 408 (or is closed)
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
        timeout = server.read_timeout  # the socket's: a request line, headers or body that stop coming

        def log_message(self, *args: Any) -> None:  # no request log (prompts are private)
            pass

        # -- plumbing ---------------------------------------------------------

        def _json(self, status: int, payload: dict[str, Any], close: bool = False,
                  headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, code: str = "invalid_request_error", close: bool = False) -> None:
            self._json(status, {"error": {"message": message, "type": code, "code": status}}, close)

        def _read_body(self) -> bytes | None:
            """The request body, always consumed (or the connection marked to close); None after an
            error answer was sent. A body that stops coming for `read_timeout` seconds gets a 408."""
            try:
                return self._read_body_bytes()
            except TimeoutError:
                self._error(408, f"the request body stopped coming: no byte for {server.read_timeout:g} s "
                                 f"(Content-Length says {self.headers.get('Content-Length', '?')})",
                            "timeout_error", close=True)
                return None

        def _read_body_bytes(self) -> bytes | None:
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
            body = self.rfile.read(length)
            if len(body) < length:  # the client closed its side early
                self._error(400, f"the body ended after {len(body)} of the {length} bytes its Content-Length "
                                 "says", close=True)
                return None
            return body

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
            scheme, _, token = self.headers.get("Authorization", "").strip().partition(" ")
            if scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(),
                                                                     server.api_key.encode()):
                return True  # the scheme's name is case-insensitive (RFC 9110, 11.1)
            self._error(401, "invalid API key", "authentication_error")
            return False

        # -- routes -------------------------------------------------------------

        def do_GET(self) -> None:  # noqa: N802
            if self._read_body() is None or not self._host_allowed() or not self._authorised():
                return
            path = urllib.parse.urlsplit(self.path).path.rstrip("/")
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
            else:
                self._error(404, f"no route {self.path}", "not_found_error")

        def do_POST(self) -> None:  # noqa: N802
            raw = self._read_body()
            if raw is None or not self._host_allowed() or not self._authorised():
                return
            if urllib.parse.urlsplit(self.path).path.rstrip("/") != "/v1/chat/completions":
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
                parsed = parse_body(body)
            except BadRequest as exc:
                self._error(exc.status, str(exc), exc.code)
                return
            if parsed.logit_bias:
                self._error(400, "logit_bias is not supported by this server yet (llama.cpp's logit-bias sampler "
                                 "is not wired into the engine); the request was not run, rather than run "
                                 "without the bias")
                return
            request = parsed.request
            engine = server.engine
            if engine is None or not server.serving():
                self._error(503, "no model is loaded in Clover Launcher", "service_unavailable")
                return
            warnings = []
            if request.tools and not getattr(engine.info, "tools_in_template", True):
                if request.tool_choice:
                    self._error(400, "the model's chat template does not read tools, so the model cannot be "
                                     "shown them and a call cannot be forced (tool_choice / function_call); "
                                     "send the tools without forcing a call, or use a model whose template "
                                     "reads tools")
                    return
                warnings.append(TOOLS_UNREAD)
            try:  # everything that can be wrong with the prompt, found before a stream starts
                engine.count_tokens(request)
            except (EngineError, TemplateError) as exc:
                self._error(400, str(exc))
                return
            created, cid = int(time.time()), f"chatcmpl-{secrets.token_hex(12)}"
            if parsed.stream:
                self._stream(engine, parsed, created, cid, warnings)
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
            calls = _returned_calls(reply, parsed)
            message: dict[str, Any] = {"role": "assistant", "content": None if calls and not reply.text
                                       else reply.text}
            if reply.reasoning:
                message["reasoning_content"] = reply.reasoning
            if calls and parsed.legacy_functions:
                message["function_call"] = _function_call_json(calls[0])
            elif calls:
                message["tool_calls"] = [_call_json(c) for c in calls]
            payload: dict[str, Any] = {
                "id": cid, "object": "chat.completion", "created": created, "model": server.model_id() or "",
                "usage": _usage(reply), "choices": [{"index": 0, "message": message, "logprobs": _logprobs(reply),
                                                     "finish_reason": _finish_reason(reply, calls,
                                                                                     parsed.legacy_functions)}]}
            if warnings:
                payload["warnings"] = warnings
            self._json(200, payload, headers={"X-Clover-Warning": "; ".join(warnings)} if warnings else None)

        def _stream(self, engine: ChatEngine, parsed: ParsedRequest, created: int, cid: str,
                    warnings: list[str]) -> None:
            request = parsed.request
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            if warnings:
                self.send_header("X-Clover-Warning", "; ".join(warnings))
            self.end_headers()
            self.close_connection = True
            gone = threading.Event()
            model = server.model_id() or ""
            # OpenAI: with include_usage, every chunk has "usage": null and a last chunk with no choices
            # carries the usage; without it, no chunk mentions usage
            usage_field: dict[str, Any] = {"usage": None} if parsed.include_usage else {}

            def write(payload: dict[str, Any]) -> None:
                if gone.is_set():
                    return
                try:
                    self.wfile.write(f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode())
                    self.wfile.flush()
                except OSError:
                    gone.set()  # the client left (or stopped reading past the timeout): stop generating

            def chunk(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> dict[str, Any]:
                return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": choices, **usage_field, **(extra or {})}

            def send(delta: dict[str, Any], finish: str | None = None, extra: dict | None = None,
                     logprobs: list | None = None) -> None:
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
                if logprobs is not None:
                    choice["logprobs"] = {"content": logprobs}
                write(chunk([choice], extra))

            send({"role": "assistant", "content": ""}, extra={"warnings": warnings} if warnings else None)

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
            calls = _returned_calls(reply, parsed)
            if calls and parsed.legacy_functions:
                send({"function_call": _function_call_json(calls[0])})
            else:
                for i, call in enumerate(calls):
                    send({"tool_calls": [{"index": i, **_call_json(call)}]})
            send({}, _finish_reason(reply, calls, parsed.legacy_functions))
            if parsed.include_usage:
                write(chunk([], {"usage": _usage(reply)}))
            if not gone.is_set():
                try:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except OSError:
                    pass

    return Handler
