"""The local server's connections: uvicorn's h11 protocol with the rules the server keeps below HTTP's
requests. No Qt; the guard (app/serve/guard.py) and the routes (app/serve/server.py) are ASGI above it.

- A connection that sends nothing for the read timeout while a request's head is due (a new one, an
  idle keep-alive one, or a head that stops coming) is closed (uvicorn only times out idle ones).
- A request that HTTP cannot parse (a Content-Length that is not a number, a bad chunk, a body that
  ends before its length) gets a 400 in the API's JSON that says what is wrong, then the connection
  closes (uvicorn answers "Invalid HTTP request received." in plain text).
- A client that closes its sending side once its request is in is still answered (curl, raw sockets:
  uvicorn dropped the answer); the routes read that, or a lost connection, as the client gone
  (`gone()`) to stop a reply nobody will read.
- The routes reach their connection through the request's scope (`of(scope)`), to ask `gone()` and
  to `abort()` it: a stream whose client stopped reading is cut, its buffered bytes thrown away.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import h11
from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.serve.schema import error_json

EXTENSION = "clover.connection"  # the scope's `extensions` key that holds the connection
log = logging.getLogger("app.serve.http")
log.setLevel(logging.ERROR)  # uvicorn's warnings about bad requests are answered, not logged (prompts are private)


class Connection(H11Protocol):
    """One client connection (uvicorn makes one per accepted socket, from the server's Config)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = log
        self.eof = False  # the client closed its sending side
        inner = self.app

        async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
            extensions: Any = scope.setdefault("extensions", {})  # type: ignore[typeddict-item]
            extensions[EXTENSION] = self
            await inner(scope, receive, send)

        self.app = app

    # -- what the routes ask ----------------------------------------------------------------

    def gone(self) -> bool:
        """The client closed its side or the connection is lost: nobody will read a reply."""
        return self.eof or self.transport.is_closing()

    @property
    def lost(self) -> bool:
        return self.transport.is_closing()

    def abort(self) -> None:
        """Close at once, unsent bytes thrown away (a client that does not read would never take them)."""
        self.transport.abort()

    # -- timeouts ---------------------------------------------------------------------------

    def _await_head(self) -> None:
        """Close the connection if no byte comes within the read timeout (uvicorn's keep-alive timer)."""
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._await_head()  # a head begun, not finished: it must go on coming

    # -- the client's end of sending ----------------------------------------------------------

    def eof_received(self) -> bool | None:  # type: ignore[override]
        self.eof = True
        if self.conn.their_state is h11.SEND_BODY:  # the body ended before its length: h11 says how, a 400
            self.conn.receive_data(b"")
            self.handle_events()
            return None
        if self.cycle is not None and not self.cycle.response_complete:
            return True  # keep the connection open: the answer still goes out
        return None  # nothing asked: close

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.eof and not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self.conn.send(h11.ConnectionClosed())
            self.transport.close()

    # -- requests HTTP cannot parse -------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this inside its `except h11.RemoteProtocolError`: h11's own words say what is
        wrong with the request."""
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # an answer is on its way already: it cannot be followed by another
            return
        reason = sys.exc_info()[1]
        body = json.dumps(error_json(f"malformed request: {reason or msg}", 400), ensure_ascii=False).encode()
        try:
            out = self.conn.send(h11.Response(status_code=400, reason=b"Bad Request", headers=[
                (b"Content-Type", b"application/json"), (b"Content-Length", str(len(body)).encode()),
                (b"Connection", b"close")]))
            out = (out or b"") + (self.conn.send(h11.Data(data=body)) or b"") + (self.conn.send(h11.EndOfMessage())
                                                                                 or b"")
        except h11.LocalProtocolError:
            out = b""
        self.transport.write(out)
        self.transport.close()


def of(scope: MutableMapping[str, Any]) -> Connection | None:
    """The connection a request came on (None under another server, e.g. a test client)."""
    conn = scope.get("extensions", {}).get(EXTENSION)
    return conn if isinstance(conn, Connection) else None
