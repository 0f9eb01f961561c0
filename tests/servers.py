"""Waiting for a real server that a test started: healthy, or a clear error with its log."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx


def wait_until_healthy(
    process: subprocess.Popen, health_url: str, log: Path, startup_s: float
) -> None:
    """Return once ``health_url`` answers 200; fail with the log's tail if the server
    exits first or is not healthy after ``startup_s`` seconds."""
    deadline = time.monotonic() + startup_s
    while True:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the server exited before it was ready:\n{tail}")
        try:
            if httpx.get(health_url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server was not ready after {startup_s} s ({log})")
        time.sleep(0.5)
