"""A local HTTP server on 127.0.0.1 for download and remote-header tests, with switchable faults."""

from __future__ import annotations

import contextlib
import http.server
import re
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ServerState:
    files: dict[str, Path] = field(default_factory=dict)  # URL path -> file
    honor_range: bool = True
    require_token: str | None = None
    requests: list[dict] = field(default_factory=list)  # method, path, headers of each request; body bytes sent
    bytes_sent: int = 0
    # faults
    errors_first: int = 0  # answer this many GET requests with 500 before serving
    drop_after: int | None = None  # close the connection after this many body bytes ...
    drops: int = 0  # ... on this many responses
    drop_how: str = "close"  # "close" (FIN), "reset" (RST) or "stall" (send nothing more for stall_seconds)
    stall_seconds: float = 2.0
    bytes_per_second: float | None = None  # throttle (a slow server)
    send_hash: tuple[str, str] | None = None  # (header name, value), e.g. ("X-Linked-Etag", sha256)
    redirect: dict[str, str] = field(default_factory=dict)  # URL path -> path to redirect to
    drop_every: int | None = None  # every response closes after this many body bytes (a flaky link)
    range_416: int = 0  # answer this many Range requests with 416 (a server that lost the object)
    range_shift: int = 0  # answer a Range from this many bytes before the asked start (and say so in Content-Range)
    range_total: int | None = None  # the total size a 206's Content-Range claims (another object's)
    halve: bool = False  # every response closes after half of the bytes it announced (0 of 1: none)
    etag: str | None = None  # sent as ETag; a request whose If-Range differs gets the whole file (200)
    content_type: str = "application/octet-stream"
    content_encoding: str | None = None  # claimed in the answer (the body is sent as it is)


def _handler(state: ServerState):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            record = {"method": "GET", "path": self.path, "headers": dict(self.headers), "sent": 0}
            state.requests.append(record)
            if state.require_token and self.headers.get("Authorization") != f"Bearer {state.require_token}":
                self.send_error(401, "Unauthorized")
                return
            if self.path in state.redirect:
                self.send_response(302)
                self.send_header("Location", state.redirect[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if state.errors_first > 0:
                state.errors_first -= 1
                self.send_error(500, "Internal Server Error")
                return
            path = state.files.get(self.path.split("?")[0])
            if path is None:
                self.send_error(404, "Not Found")
                return
            size = path.stat().st_size
            start, end = 0, size - 1
            rng = self.headers.get("Range")
            if rng and state.range_416 > 0:
                state.range_416 -= 1
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if_range = self.headers.get("If-Range")
            if rng and if_range is not None and state.etag is not None and if_range != state.etag:
                rng = None  # the object changed since the client's copy: RFC 9110 says send it all
            partial = False
            if rng and state.honor_range:
                m = re.match(r"bytes=(\d+)-(\d*)", rng)
                if m:
                    start = max(int(m.group(1)) - state.range_shift, 0)
                    end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
                    partial = True
            self.send_response(206 if partial else 200)
            if partial:
                total = state.range_total if state.range_total is not None else size
                self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes" if state.honor_range else "none")
            self.send_header("Content-Type", state.content_type)
            if state.content_encoding:
                self.send_header("Content-Encoding", state.content_encoding)
            if state.etag:
                self.send_header("ETag", state.etag)
            if state.send_hash:
                self.send_header(*state.send_hash)
            self.end_headers()
            if state.drop_every is not None:
                state.drops, state.drop_after = 1, state.drop_every
            if state.halve:
                state.drops, state.drop_after = 1, (end - start + 1) // 2
            if not state.bytes_per_second and not (state.drops > 0 and state.drop_after is not None):
                with open(path, "rb") as f:  # no faults: zero-copy, so a benchmark measures the client
                    try:
                        self.wfile.flush()
                        sent = self.connection.sendfile(f, start, end - start + 1)
                        state.bytes_sent += sent
                        record["sent"] += sent
                    except (BrokenPipeError, ConnectionResetError, OSError):
                        pass
                return
            drop_at = None
            if state.drops > 0 and state.drop_after is not None:
                state.drops -= 1
                drop_at = state.drop_after
            sent = 0
            began = time.monotonic()
            with open(path, "rb") as f:
                f.seek(start)
                left = end - start + 1
                try:
                    while left > 0:
                        n = min(1 << 16, left)
                        if drop_at is not None:
                            n = min(n, drop_at - sent)
                            if n <= 0:
                                self.close_connection = True
                                self.wfile.flush()
                                if state.drop_how == "reset":  # linger 0: close sends RST, the reader gets ECONNRESET
                                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                               struct.pack("ii", 1, 0))
                                    self.connection.close()
                                    return
                                if state.drop_how == "stall":
                                    time.sleep(state.stall_seconds)
                                self.connection.shutdown(socket.SHUT_RDWR)
                                return
                        chunk = f.read(n)
                        self.wfile.write(chunk)
                        state.bytes_sent += len(chunk)
                        record["sent"] += len(chunk)
                        sent += len(chunk)
                        left -= len(chunk)
                        if state.bytes_per_second:
                            ahead = sent / state.bytes_per_second - (time.monotonic() - began)
                            if ahead > 0:
                                time.sleep(ahead)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass  # the client stopped reading: fine

    return Handler


def self_signed_cert(folder: Path) -> tuple[Path, Path] | None:
    """A certificate for 127.0.0.1 and its key, made by the openssl tool; None where it is missing.
    Point SSL_CERT_FILE at the certificate and clients trust it."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return cert, key


@contextlib.contextmanager
def serve_handler(handler: type[http.server.BaseHTTPRequestHandler],
                  tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1 (a free port) from a daemon thread, over TLS with `tls` =
    (certificate, key); yields the base URL and shuts the server down on the way out."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def serve(state: ServerState, tls: tuple[Path, Path] | None = None) -> contextlib.AbstractContextManager[str]:
    """Serve `state` (see serve_handler); yields the base URL."""
    return serve_handler(_handler(state), tls)
