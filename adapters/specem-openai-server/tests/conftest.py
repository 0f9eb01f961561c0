"""The server over three tiny members for a whole module, and a slow member for the whole
run (the repository's conftest.py has the rest)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_server_harness import serve
from remote.remote_servers import tgi_server
from specem_chain import Member, RequestSettings


@pytest.fixture(scope="module")
def tiny_server(tiny_models) -> Iterator[str]:
    members = [str(tiny_models[name]) for name in ("llama", "qwen2", "plain")]
    with serve(members, RequestSettings(max_tokens=16)) as base:
        yield base


@pytest.fixture(scope="session")
def slow_member(tiny_models, tmp_path_factory) -> Iterator[Member]:
    """A member on the TGI test server made to wait 0.4 s before each drafting or scoring
    answer (a slow server): an answer of 24 tokens takes a second or more."""
    folder = tmp_path_factory.mktemp("slow")
    with tgi_server(folder, "--delay", "0.4", model=tiny_models["llama"]) as (url, _):
        yield Member.tgi(url, name="slow", retries=0)
