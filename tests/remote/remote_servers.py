"""Start and stop real member servers on 127.0.0.1 for the remote-member tests."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from servers import wait_until_healthy

from specem_chain import models

TGI_TEST_SERVER = Path(__file__).with_name("tgi_test_server.py")
STARTUP_S = 240


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running(command: list[str], health_url: str, log: Path) -> Iterator[subprocess.Popen]:
    """Run a server until the block ends; wait until ``health_url`` answers 200."""
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until_healthy(process, health_url, log, STARTUP_S)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def tgi_server(
    tmp: Path, *flags: str, model: str | Path = "smollm2"
) -> Iterator[tuple[str, subprocess.Popen]]:
    """The TGI test server (``tgi_test_server.py``) on ``model`` (a built-in name or a model
    folder)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, str(TGI_TEST_SERVER), str(model), "--port", str(port), *flags]
    with running(command, f"{url}/health", tmp / f"tgi-{port}.log") as process:
        yield url, process


@dataclass(frozen=True)
class LlamaServer:
    """A running llama-cpp-python server: its API root (``.../v1``), the GGUF it serves, and
    the model folder whose tokenizer and chat template its members render prompts with."""

    url: str
    gguf: Path
    folder: Path


@contextmanager
def llama_server(tmp: Path, model: str) -> Iterator[LlamaServer]:
    """llama-cpp-python's own OpenAI-compatible server on a built-in model's GGUF."""
    gguf = models.gguf_path(model, progress=False)
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--logits_all",
        "true",
    ]
    url = f"http://127.0.0.1:{port}/v1"
    with running(command, f"{url}/models", tmp / f"llama-{port}.log"):
        yield LlamaServer(url, gguf, models.model_folder(model, progress=False))
