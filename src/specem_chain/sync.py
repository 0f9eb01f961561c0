"""Running requests from synchronous code, for every front end: on one event-loop thread of
the package's own, so a sync call works inside a running loop too (a notebook, an async web
handler), and a remote member's connection pool serves every sync caller."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def run_sync(awaitable: Awaitable[T]) -> T:
    """``await awaitable`` on the package's loop thread; return its result here."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="specem-loop", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(_await(awaitable), _loop).result()


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def iterate_sync(items: AsyncIterator[T]) -> Iterator[T]:
    """The items of an async iterator, each awaited on the loop thread; it is closed there
    however the iteration ends."""
    try:
        while True:
            try:
                yield run_sync(items.__anext__())
            except StopAsyncIteration:
                return
    finally:
        if aclose := getattr(items, "aclose", None):
            run_sync(aclose())
