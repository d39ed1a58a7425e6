"""The server's HTTP on Starlette and uvicorn (issue 38, item 5): the connection rules the old
`http.server` had that uvicorn does not keep by itself (app/serve/connection.py), and a stop that
ends cleanly. A scripted engine stands in for the model."""

from __future__ import annotations

import json
import socket
import threading
import time

from tests.helpers.fakes import ScriptedEngine, Turn


def read_all(sock: socket.socket, timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_a_head_that_stops_coming_is_closed_after_the_read_timeout(serve):
    s = serve(ScriptedEngine(loaded=True), read_timeout=1.0)
    for start in (b"", b"GET /v1/mod"):  # nothing at all, or half a request line
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
            sock.sendall(start)
            assert read_all(sock) == b""
        assert 0.9 < time.monotonic() - started < 5


def test_a_body_http_cannot_parse_is_a_json_400_that_says_why(serve):
    s = serve(ScriptedEngine(loaded=True))
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
        sock.sendall(head + b"zz\r\n{}\r\n0\r\n\r\n")
        answer = read_all(sock)
    status, _, body = answer.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400 ") and b"Content-Type: application/json" in status
    assert "illegal chunk header" in json.loads(body)["error"]["message"]


def test_stop_ends_a_reply_being_written_within_its_grace(serve):
    engine = ScriptedEngine(Turn("x " * 5000, stream=[("answer", "x ")] * 5000), loaded=True, rate=50)
    s = serve(engine)
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    got = sock.recv(65536)
    assert b"200 OK" in got
    reading = threading.Thread(target=read_all, args=(sock, 30), daemon=True)
    reading.start()
    started = time.monotonic()
    s.stop(grace=0.5)
    assert time.monotonic() - started < 5 and not s.running
    reading.join(10)
    assert not reading.is_alive()  # the connection was closed
    sock.close()
    deadline = time.monotonic() + 5  # its generation stopped (5,000 pieces at 50 a second would take 100 s)
    while any(t.name == "openai-server-generation" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "openai-server-generation" for t in threading.enumerate())


def test_a_finished_stream_leaves_its_connection_open_for_the_next_request(serve):
    """After a stream has ended, its keep-alive connection serves the client's next request, as after
    a whole reply. (A stream's end once cut its connection a moment later: a client that reused it in
    that moment, as httpx's pool does, got "Server disconnected without sending a response".)"""
    import http.client

    s = serve(ScriptedEngine(Turn("Hello there", stream=[("answer", "Hello"), ("answer", " there")]), loaded=True))
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    for stream in (True, True, False, True):
        body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "stream": stream})
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 200 and not resp.will_close
        assert (b"data: [DONE]" in data) if stream else json.loads(data)["choices"][0]["message"]["content"]
        time.sleep(0.3)  # the moment in which the connection was cut
    conn.close()
