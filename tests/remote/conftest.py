"""Real servers on 127.0.0.1 for the remote-member tests, started and stopped here.

- ``specem serve-tgi`` (TGI's protocol over a transformers model) serving SmolLM2-135M;
- llama-cpp-python's own OpenAI-compatible server serving the SmolLM2 GGUF.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_servers import free_port, running, tgi_server

from specem_chain import defaults


@pytest.fixture(scope="session")
def tgi_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tgi_server(tmp_path_factory.mktemp("tgi")) as (url, _):
        yield url


@pytest.fixture(scope="session")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API root (``.../v1``) of llama-cpp-python's server."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(defaults.gguf_path("smollm2", progress=False)),
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
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with running(command, f"{url}/models", log):
        yield url


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    """The converted SmolLM2 folder: the llama-cpp member's tokenizer and chat template."""
    return defaults.model_folder("smollm2", progress=False)
