"""Async iteration from synchronous code, on one event-loop thread of the package's own, so
``run`` works inside a running loop (a notebook, an async web handler) too."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def run_sync(awaitable: Awaitable[T]) -> T:
    """``await awaitable`` on the loop thread and return its result here."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="specem-haystack", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(_await(awaitable), _loop).result()


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def iterate_sync(items: AsyncIterator[T]) -> Iterator[T]:
    """The items of an async generator, each awaited on the loop thread; the generator is
    closed there however the iteration ends."""
    try:
        while True:
            try:
                yield run_sync(items.__anext__())
            except StopAsyncIteration:
                return
    finally:
        run_sync(items.aclose())
