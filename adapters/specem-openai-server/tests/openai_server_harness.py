"""Serve an ensemble with the OpenAI-compatible app on a free 127.0.0.1 port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from specem_chain import Feedback, Member, RequestSettings

from specem_openai_server import create_app

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather at a location.",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
}
"""A tool for the tests, as an OpenAI client sends it."""


@contextmanager
def serve(
    members: Sequence[Member | str],
    settings: RequestSettings | None = None,
    *,
    feedback: Feedback | None = None,
    log_level: str = "warning",
    **options: Any,
) -> Iterator[str]:
    """``with serve(members, settings) as base_url: ...``: uvicorn in a thread for the
    block (with task-level ``feedback`` and the guard's ``options``, as ``create_app``
    takes them). At ``log_level="debug"`` uvicorn's loggers are left as they are, so that
    the test's own logging (pytest's ``caplog``) sees every record."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(members, settings, feedback=feedback, **options),
            host="127.0.0.1",
            port=port,
            log_level=log_level,
            log_config=None if log_level == "debug" else uvicorn.config.LOGGING_CONFIG,
        )
    )
    thread = threading.Thread(target=server.run, name="specem-test-server", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    assert httpx.get(f"{base}/health").status_code == 200
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)
