"""The harness calls models synchronously; specem's request API is async. Every call runs
on one event loop on its own thread, so it works from inside a running loop too (a
notebook), and what a backend keeps per loop (a server's connection pool) is reused."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end on the adapter's loop thread and return its result."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="lm-eval-specem", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coroutine, _loop).result()
