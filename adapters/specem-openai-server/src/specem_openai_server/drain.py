"""A graceful drain: what the server does between the SIGTERM that ends it and its exit.

From the first SIGTERM (or SIGINT) the server keeps its port open and drains: ``/ready``
answers 503, so that a load balancer stops sending it requests, and a new request under
``/v1/`` gets a 503 with a ``Retry-After`` header and an OpenAI-shaped error, which a client
retries elsewhere. The answers in flight (streamed ones too) go on to their end; at the
drain's deadline those still running are cut, each with an error its client reads (an SSE
error event, or a 503 before a plain answer starts), and then the server stops as uvicorn
does. A second signal stops it at once, as uvicorn's own handler does.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # the command reads this module's defaults without the web stack
    from .errors import APIError

T = TypeVar("T")

DRAIN_S = 25.0
"""The default drain: within Kubernetes' default grace of 30 s, with room for the cut."""

CUT_S = 3.0
"""After the deadline: time for the cut answers to send their error and end."""

RETRY_AFTER_S = 1
"""What a refused request's ``Retry-After`` says: at once, where another replica serves."""

SIGNALS = (signal.SIGTERM, signal.SIGINT)

Send = Callable[[dict[str, Any]], Awaitable[None]]


def refusal() -> APIError:
    """The answer to a request that comes while the server drains."""
    from .errors import APIError

    return APIError(
        503,
        "the server is shutting down and takes no new requests; retry on another replica",
        "service_unavailable",
        "server_shutting_down",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def cut_error(seconds: float) -> APIError:
    """The error an answer still running at the drain's deadline ends with."""
    from .errors import APIError

    return APIError(
        503,
        f"the server shut down: the answer was cut at the end of its {seconds:g} s drain",
        "service_unavailable",
        "server_shutting_down",
    )


class Drain:
    """One server process's drain: the requests it answers now, and whether it drains."""

    def __init__(self, seconds: float = DRAIN_S) -> None:
        self.seconds = seconds
        self.draining = False
        self.in_flight = 0
        """Requests under ``/v1/`` being answered (a stream until its last event)."""
        self.cut = asyncio.Event()
        """Set at the deadline: every answer still running ends with :func:`cut_error`."""
        self._task: asyncio.Task[None] | None = None

    def install(self) -> None:
        """Take the server's SIGTERM and SIGINT (in its main thread, once uvicorn has
        installed its own handlers, which a second signal and the drain's end call)."""
        if threading.current_thread() is not threading.main_thread():
            return  # a server in a thread (tests) has no signals of its own
        loop = asyncio.get_running_loop()
        for number in SIGNALS:
            stop = signal.getsignal(number)
            if not callable(stop):
                continue

            def handle(sig: int, frame: Any, stop: Callable[[int, Any], Any] = stop) -> None:
                if self.draining:
                    stop(sig, frame)
                    return
                self.draining = True
                loop.call_soon_threadsafe(self.start, lambda: stop(sig, None))

            signal.signal(number, handle)

    def start(self, stop: Callable[[], Any]) -> None:
        self.draining = True
        self._task = asyncio.get_running_loop().create_task(self.run(stop))

    async def run(self, stop: Callable[[], Any]) -> None:
        """Wait for the answers in flight until the deadline, cut the rest, then ``stop``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        while self.in_flight and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if self.in_flight:
            self.cut.set()
            deadline = loop.time() + CUT_S
            while self.in_flight and loop.time() < deadline:
                await asyncio.sleep(0.05)
        stop()

    async def before_cut(self, step: Awaitable[T]) -> T:
        """``step``'s result, or :func:`cut_error` where the drain's deadline comes first."""
        work = asyncio.ensure_future(step)
        cut = asyncio.ensure_future(self.cut.wait())
        try:
            await asyncio.wait({work, cut}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cut.cancel()
        if not work.done():
            work.cancel()
            with suppress(asyncio.CancelledError, StopAsyncIteration):
                await work
            raise cut_error(self.seconds)
        return work.result()


class Draining:
    """ASGI middleware: counts the requests under ``/v1/`` in flight, and refuses new
    ones while the server drains (telling ``refused`` the path of each it refuses)."""

    def __init__(
        self, app: Any, drain: Drain, refused: Callable[[str], None] | None = None
    ) -> None:
        self.app = app
        self.drain = drain
        self.refused = refused

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            if self.refused is not None:
                self.refused(scope["path"])
            await refusal().response()(scope, receive, send)
            return
        self.drain.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.drain.in_flight -= 1
