"""Real servers on 127.0.0.1 for the remote-member tests, started and stopped here.

- the TGI test server (``tgi_test_server.py``: TGI's protocol over a transformers model)
  serving SmolLM2-135M,
  for the tests that compare it with the same model in process, and serving a tiny random
  model, for those where only the protocol's plumbing matters (a float32 SmolLM2 on
  transformers takes about 0.1 s a token on two cores; the tiny model a millisecond);
- llama-cpp-python's own OpenAI-compatible server serving the SmolLM2 and Qwen2.5-Coder
  GGUFs (not a random model: an OpenAI-style member checks on a counting answer that the
  server's echoed log-probs belong to their tokens).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_servers import LlamaServer, llama_server, tgi_server


@pytest.fixture(scope="package")
def tgi_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tgi_server(tmp_path_factory.mktemp("tgi")) as (url, _):
        yield url


@pytest.fixture(scope="package")
def tiny_tgi_url(
    tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with tgi_server(tmp_path_factory.mktemp("tiny-tgi"), model=tiny_models["llama"]) as (url, _):
        yield url


@pytest.fixture(scope="package")
def smollm2_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-cpp-python's server serving SmolLM2."""
    with llama_server(tmp_path_factory.mktemp("llama"), "smollm2") as server:
        yield server


@pytest.fixture(scope="package")
def qwen_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-cpp-python's server serving Qwen2.5-Coder, whose chat prompts do not start
    with its BOS token."""
    with llama_server(tmp_path_factory.mktemp("llama-qwen"), "qwen2.5-coder") as server:
        yield server
