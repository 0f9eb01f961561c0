"""The server over three tiny members for a whole module (the repository's conftest.py has
the rest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_server_harness import serve
from specem_chain import RequestSettings


@pytest.fixture(scope="module")
def tiny_server(tiny_models) -> Iterator[str]:
    members = [str(tiny_models[name]) for name in ("llama", "qwen2", "plain")]
    with serve(members, RequestSettings(max_tokens=16)) as base:
        yield base
