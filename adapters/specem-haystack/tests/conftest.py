"""Two tiny members for the Haystack adapter's tests (the repository's conftest.py has the
rest)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_pair(tiny_models) -> list[str]:
    """Two tiny random members (llama and qwen2 architectures)."""
    return [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
