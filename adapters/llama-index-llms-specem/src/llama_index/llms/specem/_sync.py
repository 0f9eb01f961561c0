"""Synchronous calls into the async request, on one event-loop thread of this package's own,
so that they also work where an event loop is already running (a notebook, a server)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def run_sync(awaitable: Awaitable[T]) -> T:
    """``await awaitable`` on the package's event-loop thread, and wait for the result."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(
                target=_loop.run_forever, name="specem-llamaindex", daemon=True
            ).start()
    return asyncio.run_coroutine_threadsafe(_wrap(awaitable), _loop).result()


def iterate_sync(items: AsyncIterator[T]) -> Iterator[T]:
    """The items of an async iterator, each awaited on the event-loop thread; the iterator
    is closed there too, however the loop over it ends."""
    try:
        while True:
            try:
                yield run_sync(items.__anext__())
            except StopAsyncIteration:
                return
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            run_sync(aclose())


async def _wrap(awaitable: Awaitable[T]) -> T:
    return await awaitable
