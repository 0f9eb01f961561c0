"""A reverse proxy on 127.0.0.1 that records every request it passes to a member's server
(method, path, headers and JSON body): for the tests of what a member sends, such as the
session header an answer's requests carry."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

HOP_BY_HOP = {"host", "content-length", "connection", "transfer-encoding", "content-encoding"}


@dataclass(frozen=True)
class Seen:
    """One request as the proxy passed it on."""

    method: str
    path: str
    headers: dict[str, str]
    """Its headers, their names in lower case."""
    body: Any


@contextmanager
def recording_proxy(upstream: str) -> Iterator[tuple[str, list[Seen]]]:
    """``with recording_proxy(url) as (proxy_url, seen)``: a proxy to ``url`` for the block,
    and the requests it passes on, in the order they came."""
    seen: list[Seen] = []

    async def forward(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        headers = {k.lower(): v for k, v in request.headers.items()}
        seen.append(Seen(request.method, request.url.path, headers, body))
        passed = {k: v for k, v in headers.items() if k not in HOP_BY_HOP}
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        async with httpx.AsyncClient(base_url=upstream, timeout=120) as client:
            answer = await client.request(request.method, path, content=raw, headers=passed)
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
        return Response(answer.content, answer.status_code, kept)

    methods = ["GET", "POST"]
    app = Starlette(routes=[Route("/{path:path}", forward, methods=methods)])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="recording-proxy", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the proxy did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.should_exit = True
        thread.join(timeout=30)
