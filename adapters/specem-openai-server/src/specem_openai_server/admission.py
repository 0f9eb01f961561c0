"""Admission control: at most ``--max-concurrent-requests`` answers in progress per worker,
then a queue of at most ``--max-queue`` requests waiting for a slot, first come first
served; past that, a 429 with ``Retry-After`` at once, as TGI's router answers
``--max-concurrent-requests`` overflow ("Model is overloaded"). Overload is answered in
milliseconds instead of growing a queue without end.

A chat completion's body is read first, at most ``--max-body-bytes`` of it (a larger one is a
413, told by its ``Content-Length`` before any byte is read, or as soon as the bytes read pass
the limit): a request holds no slot while its client is still sending. A queued request whose
client leaves is dropped from the queue and costs nothing more. A streamed answer holds its
slot until its last event.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

from . import metrics
from .errors import APIError

RETRY_AFTER_S = 1
"""What a refused request's ``Retry-After`` says: the queue moves as answers end."""

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def overloaded(concurrent: int, queue: int) -> APIError:
    return APIError(
        429,
        f"the server is overloaded: {concurrent} answers are in progress and {queue} requests "
        "wait (--max-concurrent-requests, --max-queue); retry after a second, or on another "
        "replica",
        "rate_limit_error",
        "overloaded",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def body_too_large(size: int | None, limit: int) -> APIError:
    sent = f"{size} bytes" if size is not None else "more"
    return APIError(
        413,
        f"the request body is {sent}, more than this server's limit of {limit} bytes "
        "(--max-body-bytes); send a shorter conversation, or ask the operator to raise "
        "--max-body-bytes",
        "invalid_request_error",
        "request_too_large",
    )


class Admission:
    """One worker's slots for answers in progress and its queue of requests waiting for
    one. Call :meth:`enter` and, once admitted, :meth:`leave` when the answer ends."""

    def __init__(self, concurrent: int, queue: int) -> None:
        self.concurrent = concurrent
        self.queue = queue
        self.running = 0
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def enter(self, left: asyncio.Future[Any]) -> bool:
        """Take a slot, waiting in the queue for one while the client stays (``left``
        completes when it goes): True once admitted, False where the client left first.
        A full queue raises the 429 at once."""
        if self.running < self.concurrent and not self.waiting:
            self.running += 1
            metrics.IN_PROGRESS.inc()
            return True
        if len(self.waiting) >= self.queue:
            metrics.rejected("overloaded")
            raise overloaded(self.concurrent, self.queue)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        metrics.QUEUED.inc()
        started = time.perf_counter()
        try:
            await asyncio.wait({turn, left}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled (the server stops): a slot handed over goes on
            if turn.done() and not turn.cancelled():
                self.leave()
            raise
        finally:
            metrics.QUEUED.dec()
            metrics.QUEUE_SECONDS.observe(time.perf_counter() - started)
            if not turn.done():
                self.waiting.remove(turn)
                turn.cancel()
        if left.done():  # the client went away: a slot handed over meanwhile goes on
            if not turn.cancelled():
                self.leave()
            return False
        return True

    def leave(self) -> None:
        """An answer ended: its slot goes to the first request waiting, or is freed."""
        if self.waiting:
            self.waiting.popleft().set_result(None)  # the slot passes on: running stays
            return
        self.running -= 1
        metrics.IN_PROGRESS.dec()


async def disconnected(receive: Receive) -> dict[str, Any]:
    """The client's disconnect message (its body has been read: nothing else comes)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return message


async def read_body(scope: dict[str, Any], receive: Receive, limit: int) -> bytes | None:
    """The request's body, at most ``limit`` bytes of it (None: the client left); a larger
    one raises the 413 as soon as it is known to be larger."""
    declared = dict(scope["headers"]).get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise body_too_large(int(declared), limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise body_too_large(None, limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class Admit:
    """ASGI middleware: each ``POST`` to ``path`` (chat completions) is read within the body
    limit, then admitted (:class:`Admission`) before the app sees it."""

    def __init__(self, app: Any, admission: Admission, path: str, max_body_bytes: int) -> None:
        self.app = app
        self.admission = admission
        self.path = path
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(scope, receive, self.max_body_bytes)
        except APIError as error:
            metrics.rejected("body_too_large")
            await error.response()(scope, receive, send)
            return
        if body is None:
            return
        left = asyncio.ensure_future(disconnected(receive))
        try:
            try:
                admitted = await self.admission.enter(left)
            except APIError as error:
                await error.response()(scope, receive, send)
                return
            if not admitted:
                return
            try:
                await self.app(scope, replay(body, left), send)
            finally:
                self.admission.leave()
        finally:
            left.cancel()
            with suppress(asyncio.CancelledError):
                await left


def replay(body: bytes, left: asyncio.Future[dict[str, Any]]) -> Receive:
    """The app's ``receive``: the body read, then the client's disconnect when it comes."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await asyncio.shield(left)

    return receive
