"""Opening URLs that may carry a token, with sockets another thread can shut. No Qt.

urllib's redirect handler copies every header to the next request, Authorization included, whatever
host the redirect names: a Hugging Face token would go to the CDN a file redirects to, or to any
host a compromised or mistaken redirect points at. Here the token goes only to the origin (scheme,
host, port) it was given for, as `requests` does, and a redirect from HTTPS down to plain HTTP is
refused.

A read blocked on a server that stopped sending returns only at the timeout. So that a cancel is
answered at once, `open_url` can hand out the sockets it connects: shutting one down from another
thread ends the read.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, Any

DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(parts.scheme)


class _TokenStaysHome(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        old, now = origin(req.full_url), origin(new.full_url)
        if old[0] == "https" and now[0] != "https":
            raise urllib.error.HTTPError(req.full_url, code, "refused a redirect from HTTPS to plain HTTP",
                                         headers, fp)
        if now != old:
            new.remove_header("Authorization")
        return new


_connecting = threading.local()  # .sockets: the list the current open_url call fills, or None


def _report(sock: socket.socket) -> None:
    sockets = getattr(_connecting, "sockets", None)
    if sockets is not None:
        sockets.append(sock)


class _HTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _report(self.sock)


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _report(self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        # a default context made now, as urlopen would: it reads SSL_CERT_FILE and the system's CAs
        return self.do_open(_HTTPSConnection, req, context=ssl.create_default_context())


_opener = urllib.request.build_opener(_TokenStaysHome, _HTTPHandler, _HTTPSHandler)


def open_url(request: urllib.request.Request, timeout: float, *,
             sockets: list[socket.socket] | None = None) -> Any:
    """`urllib.request.urlopen`, with redirects that keep the token at home; each socket it connects
    (one per redirect hop) is appended to `sockets`."""
    _connecting.sockets = sockets
    try:
        return _opener.open(request, timeout=timeout)
    finally:
        _connecting.sockets = None


def shut(sockets: list[socket.socket]) -> None:
    """End any read blocked on these sockets, from another thread; they are closed later as usual."""
    for sock in list(sockets):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed already
