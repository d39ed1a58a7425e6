"""Calls between the local server's event loop and the threads beside it: a call put on the loop from
another thread, and a blocking function run on a thread of its own and awaited on the loop. No Qt."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def soon(loop: asyncio.AbstractEventLoop, call: Callable[[], Any]) -> None:
    """`call` on the event loop, from another thread (nothing once the loop is closed: the server stopped)."""
    try:
        loop.call_soon_threadsafe(call)
    except RuntimeError:
        pass


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) on a thread of its own: a reply waits in line and generates for as long as it takes,
    never on the event loop, and not in the shared worker pool, which a full line would exhaust."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 -- handed to the awaiting request
            soon(loop, functools.partial(settle, None, exc))
        else:
            soon(loop, functools.partial(settle, result, None))

    threading.Thread(target=run, name="openai-server-generation", daemon=True).start()
    return await future
