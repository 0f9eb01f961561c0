"""The vLLM tests' server: one real vLLM server (CPU build) on SmolLM2's model folder for
the whole run, started and stopped here. These tests run under ``pytest -m vllm`` (CI's
vLLM step), never in the default run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_server import SERVED, VLLMServer, vllm_server

from specem_chain import models


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    """SmolLM2's converted float32 folder: what the vLLM server serves, and what the
    in-process member it is compared with loads."""
    return models.model_folder("smollm2", progress=False)


@pytest.fixture(scope="session")
def vllm(smollm2_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    with vllm_server(smollm2_folder, tmp_path_factory.mktemp("vllm"), name=SERVED) as server:
        yield server
