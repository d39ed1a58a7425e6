"""No client can hold the engine for others (issue 29, items 3 and 5): a stream's generation writes
into a bounded buffer, a client that stops reading is dropped after a stall timeout, and a waiting
request says where it is in the line instead of sending its first chunk early. Scripted engines
with a lock of their own stand in for the model (the real engine serialises the same way); each test
failed before its fix."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import openai

from app.engine.contract import AppReplies, ChatRequest, Reply, ReplyStats, SamplingParams
from app.serve.server import LocalServer

QUESTION = {"role": "user", "content": "Hello?"}


@dataclass
class Info:
    name: str = "script-model"
    tools_in_template: bool = True
    n_ctx: int = 4096


class LockedEngine:
    """Holds its lock while it generates, like the real engine. A request whose max_tokens is
    `FLOOD` writes 4 KB pieces until told to stop; a request whose text is a key of `holds` keeps
    the engine busy before its first piece until that Event is set."""

    kind = "script"
    loaded = True
    FLOOD = 100_000

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.info = Info()
        self.holds: dict[str, threading.Event] = {}
        self.started = threading.Event()
        self.pieces: list[int] = []  # per request: the pieces it generated
        self.order: list[str] = []  # the first message's text of each request, in the order generated

    def count_tokens(self, request) -> int:
        return 5

    def generate(self, request, on_event=None, should_stop=None, on_logprob=None):
        with self.lock:
            self.order.append(request.messages[0]["content"])
            self.started.set()
            hold = self.holds.get(request.messages[0]["content"])
            if hold is not None:
                assert hold.wait(30)
            n = 0
            for _ in range(request.sampling.max_tokens):
                n += 1
                if on_event:
                    on_event("answer", "x" * 4000 if request.sampling.max_tokens == self.FLOOD else "hi ")
                if should_stop is not None and should_stop():
                    break
            self.pieces.append(n)
            stats = ReplyStats(prompt_tokens=5, prompt_evaluated=5, generated_tokens=n, stop_reason="end")
            return Reply("hi " * n, "", "hi " * n, "", stats)


def request_bytes(body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def open_stream(server: LocalServer, text: str, max_tokens: int = 3, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connecting: the window the server sees stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(request_bytes({"messages": [{"role": "user", "content": text}], "stream": True,
                                "max_tokens": max_tokens}))
    return sock


def read_for(sock: socket.socket, seconds: float, until: bytes | None = None) -> bytes:
    """What the socket gives within `seconds` (or until `until` arrives, or it closes)."""
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (until is None or until not in got):
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, BlockingIOError):
            break
        if not chunk:
            break
        got += chunk
    return got


def data_events(raw: bytes) -> list[Any]:
    return [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]


# ----------------------------------------------------------------------------- item 3: a client that stops reading


def test_a_client_that_stops_reading_does_not_freeze_the_engine(serve):
    engine = LockedEngine()
    s = serve(engine, stall_timeout=0.5)
    stalled = open_stream(s, "flood", max_tokens=LockedEngine.FLOOD, rcvbuf=4096)
    try:
        assert engine.started.wait(10)
        time.sleep(0.3)  # its pieces pile up: the socket's buffers fill, then the stream's own
        c = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0, timeout=15)
        started = time.monotonic()
        r = c.chat.completions.create(model="m", messages=[QUESTION], max_tokens=2)
        waited = time.monotonic() - started
        assert r.choices[0].message.content == "hi hi " and waited < 5, waited
        assert engine.pieces[0] < 5000  # the stalled stream's generation was stopped, not run to its end
        stalled.settimeout(5)
        read_for(stalled, 5)  # what was sent before the drop, then the end: the server closed the connection
    finally:
        stalled.close()


def test_a_slow_reader_that_keeps_reading_gets_the_whole_stream(serve):
    engine = LockedEngine()
    s = serve(engine, stall_timeout=2.0)
    sock = open_stream(s, "slow", max_tokens=300)
    try:
        got = b""
        deadline = time.monotonic() + 30
        while b"[DONE]" not in got and time.monotonic() < deadline:
            time.sleep(0.01)
            got += read_for(sock, 0.5)
        events = data_events(got)
        assert events[-1] == b"[DONE]"
        text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1])
        assert text == "hi " * 300 and engine.pieces == [300]
    finally:
        sock.close()


# ----------------------------------------------------------------------------- item 5: the queue is visible


def test_nothing_is_sent_until_the_engine_serves_the_request(serve):
    engine = LockedEngine()
    s = serve(engine)
    engine.lock.acquire()  # the window's own reply holds the engine
    try:
        sock = open_stream(s, "waiting")
        early = read_for(sock, 1.0)
        assert b"200 OK" in early and data_events(early) == []  # the headers, no role chunk yet
    finally:
        engine.lock.release()
    try:
        rest = read_for(sock, 10, until=b"[DONE]")
        events = [json.loads(e) for e in data_events(rest)[:-1]]
        assert events[0]["choices"][0]["delta"]["role"] == "assistant" and data_events(rest)[-1] == b"[DONE]"
    finally:
        sock.close()


def test_a_queued_stream_says_its_place_in_line(serve):
    engine = LockedEngine()
    engine.holds = {"hold": threading.Event(), "second": threading.Event()}
    s = serve(engine)
    first = open_stream(s, "hold")
    socks = [first]
    try:
        assert engine.started.wait(10)
        second = open_stream(s, "second")
        socks.append(second)
        assert b": queued, position 1" in read_for(second, 5, until=b"position 1")
        third = open_stream(s, "third")
        socks.append(third)
        early = read_for(third, 5, until=b"position 2")
        assert b": queued, position 2" in early and data_events(early) == []
        engine.holds["hold"].set()
        later = read_for(third, 5, until=b"position 1")
        assert b": queued, position 1" in later and data_events(later) == []  # the first finished: one ahead
        engine.holds["second"].set()
        later = read_for(third, 10, until=b"[DONE]")
        assert data_events(later)[-1] == b"[DONE]"
        assert engine.order == ["hold", "second", "third"]  # first come, first served
        # an OpenAI client reads through the comments
        engine.holds = {"again": threading.Event()}
        socks.append(open_stream(s, "again"))
        c = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0, timeout=15)
        threading.Timer(1.0, engine.holds["again"].set).start()
        pieces = [ch.choices[0].delta.content for ch in c.chat.completions.create(
            model="m", messages=[QUESTION], max_tokens=2, stream=True) if ch.choices and ch.choices[0].delta.content]
        assert "".join(pieces) == "hi hi "
    finally:
        for hold in engine.holds.values():
            hold.set()
        for sock in socks:
            sock.close()


class WindowEngine(LockedEngine):
    """One slot, shared with the window: its replies (client APP) are counted as the real engines count
    them (AppReplies)."""

    def __init__(self) -> None:
        super().__init__()
        self.app_replies = AppReplies()

    def generate(self, request, on_event=None, should_stop=None, on_logprob=None):
        with self.app_replies.during(request):
            return super().generate(request, on_event, should_stop, on_logprob)


def test_a_stream_behind_the_windows_reply_says_its_place_in_line(serve):
    """With one slot and the window writing, a client's stream is told one request is ahead of it (it
    waited unseen inside the engine before), and is written once the window's reply ends."""
    engine = WindowEngine()
    engine.holds = {"window": threading.Event()}
    s = serve(engine)
    window = threading.Thread(target=engine.generate, args=(ChatRequest([{"role": "user", "content": "window"}],
                                                                        sampling=SamplingParams(max_tokens=2)),))
    window.start()
    sock = None
    try:
        assert engine.started.wait(10) and engine.app_replies.count == 1
        sock = open_stream(s, "client")
        early = read_for(sock, 5, until=b"position 1")
        assert b": queued, position 1" in early and data_events(early) == []
        engine.holds["window"].set()
        assert data_events(read_for(sock, 10, until=b"[DONE]"))[-1] == b"[DONE]"
        assert engine.order == ["window", "client"] and engine.app_replies.count == 0
    finally:
        engine.holds["window"].set()
        window.join(10)
        if sock is not None:
            sock.close()


def test_a_client_that_leaves_the_line_is_never_generated(serve):
    engine = LockedEngine()
    engine.holds = {"hold": threading.Event()}
    s = serve(engine)
    first = open_stream(s, "hold")
    try:
        assert engine.started.wait(10)
        gone = open_stream(s, "gone")
        assert b"position 1" in read_for(gone, 5, until=b"position 1")
        gone.close()
        plain = socket.create_connection(("127.0.0.1", s.port), timeout=10)  # not streaming: leaves too
        plain.sendall(request_bytes({"messages": [{"role": "user", "content": "left too"}]}))
        time.sleep(0.5)
        plain.close()
        time.sleep(0.5)  # both noticed gone while in line
        engine.holds["hold"].set()
        assert b"[DONE]" in read_for(first, 10, until=b"[DONE]")
        c = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0, timeout=15)
        c.chat.completions.create(model="m", messages=[QUESTION], max_tokens=1)
        assert engine.order == ["hold", "Hello?"]
    finally:
        engine.holds["hold"].set()
        first.close()


def test_the_doorbell_wakes_the_loop_once_for_every_stream_rung_before_it_runs(monkeypatch):
    """Streams rung from other threads in the same moment (the scheduler hands every reply its token at
    once) cost the event loop one wake-up, and every one of their waits ends with its piece (the tick is
    a minute away: only the rings can end the waits)."""
    import asyncio
    import threading

    from app.serve import server
    from app.serve.flow import StreamBuffer
    from app.serve.server import Doorbell, Wake

    monkeypatch.setattr(server, "POLL", 60.0)

    async def main() -> tuple[int, list[list]]:
        loop = asyncio.get_running_loop()
        bell = Doorbell(loop)
        wakes = 0
        real = loop.call_soon_threadsafe

        def counted(*args, **kwargs):
            nonlocal wakes
            wakes += 1
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        streams = [Wake(bell) for _ in range(4)]
        buffers = [StreamBuffer(on_put=w.poke) for w in streams]
        takes = [asyncio.ensure_future(w.take(b)) for w, b in zip(streams, buffers, strict=True)]
        await asyncio.sleep(0)  # every stream waits
        assert all(w.future is not None for w in streams)
        putters = [threading.Thread(target=b.put, args=("event", i)) for i, b in enumerate(buffers)]
        for t in putters:
            t.start()
        for t in putters:
            t.join()  # all rung before the loop runs again
        got = await asyncio.wait_for(asyncio.gather(*takes), 5)
        again = Wake(bell)
        buffer = StreamBuffer(on_put=again.poke)
        later = asyncio.ensure_future(again.take(buffer))
        await asyncio.sleep(0)
        threading.Thread(target=buffer.put, args=("event", "later")).start()  # a later ring wakes it again
        got.append(await asyncio.wait_for(later, 5))
        return wakes, got

    wakes, got = asyncio.run(main())
    assert got == [[("event", i)] for i in range(4)] + [[("event", "later")]] and wakes == 2


def test_a_stream_that_gets_nothing_wakes_at_the_doorbells_tick_with_nothing():
    """A stream whose generation puts nothing still wakes every POLL seconds (to see whether its client
    or its generation is gone), all waiting streams on one timer; a piece put meanwhile is not lost."""
    import asyncio
    import time

    from app.serve.flow import POLL, StreamBuffer
    from app.serve.server import Doorbell, Wake

    async def main() -> tuple[list, float, list, int]:
        loop = asyncio.get_running_loop()
        bell = Doorbell(loop)
        streams = [Wake(bell) for _ in range(3)]
        buffers = [StreamBuffer(on_put=w.poke) for w in streams]
        started = time.perf_counter()
        empty = await asyncio.wait_for(asyncio.gather(*(w.take(b) for w, b in zip(streams, buffers, strict=True))),
                                       5 * POLL)
        waited = time.perf_counter() - started
        buffers[1].put("event", "x")  # on the loop's thread, while nobody waits: no ring needed
        after = [await asyncio.wait_for(w.take(b), 5 * POLL) for w, b in zip(streams, buffers, strict=True)]
        return empty, waited, after, len(bell._waiting)  # noqa: SLF001

    empty, waited, after, still = asyncio.run(main())
    assert empty == [[], [], []]
    assert 0.5 * POLL <= waited < 3 * POLL
    assert after[1] == [("event", "x")] and still == 0  # no stream left behind on the clock


def test_a_full_buffer_holds_its_generation_until_the_loop_takes_and_a_drop_frees_it_at_once():
    """The generation waits while its buffer is full, goes on as soon as the loop takes a full buffer's
    worth, and stops waiting the moment the stream is dropped (not after the stall timeout)."""
    import threading
    import time

    from app.serve.flow import StreamBuffer

    buffer = StreamBuffer(stall_timeout=30.0, size=4)
    done = threading.Event()

    def generate(n: int) -> None:
        for i in range(n):
            buffer.put("event", i)
        done.set()

    def full() -> None:  # the generation filled the buffer and waits with its 5th chunk
        deadline = time.monotonic() + 10
        while len(buffer._items) < 4 and time.monotonic() < deadline:  # noqa: SLF001
            time.sleep(0.01)
        time.sleep(0.05)

    threading.Thread(target=generate, args=(6,), daemon=True).start()
    full()
    assert not done.is_set() and [v for _, v in buffer.take()] == [0, 1, 2, 3]  # full: the 5th waited
    assert done.wait(5) and [v for _, v in buffer.take()] == [4, 5]

    done.clear()
    threading.Thread(target=generate, args=(5,), daemon=True).start()
    full()
    assert not done.is_set()
    started = time.perf_counter()
    buffer.drop()
    assert done.wait(5) and time.perf_counter() - started < 1.0  # freed by the drop, long before 30 s
    assert [v for _, v in buffer.take()] == [0, 1, 2, 3]  # nothing after the drop


def test_a_piece_put_while_the_loop_looks_is_not_left_for_the_tick(monkeypatch):
    """A piece put after the loop's first look at the buffer, before it waits (the generation's poke then
    sees nobody waiting and rings nothing), is found by the look the loop takes once it waits: it comes
    at once, not at the next tick (a minute away here)."""
    import asyncio
    import threading

    from app.serve import server
    from app.serve.flow import StreamBuffer
    from app.serve.server import Doorbell, Wake

    monkeypatch.setattr(server, "POLL", 60.0)

    class Racy(StreamBuffer):
        looked = False

        def take(self):
            items = super().take()
            if not self.looked:  # right after the first look: the generation puts its piece
                self.looked = True
                putter = threading.Thread(target=self.put, args=("event", "raced"))
                putter.start()
                putter.join()
            return items

    async def main() -> list:
        wake = Wake(Doorbell(asyncio.get_running_loop()))
        buffer = Racy(on_put=wake.poke)
        return await asyncio.wait_for(wake.take(buffer), 5)

    assert asyncio.run(main()) == [("event", "raced")]
