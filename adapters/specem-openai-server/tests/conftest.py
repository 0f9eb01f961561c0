"""The repo's test helpers (``tiny_models``) for the server's tests, the repo's examples/ on
the import path, and the server over three tiny members for a whole module."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
sys.path.insert(0, str(ROOT / "examples"))

_spec = importlib.util.spec_from_file_location("specem_repo_conftest", ROOT / "tests/conftest.py")
_repo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_repo)  # sets HF_HUB_OFFLINE and puts tests/ on sys.path
tiny_models = _repo.tiny_models

from openai_server_harness import serve  # noqa: E402  (this folder, on sys.path for pytest)
from specem_chain import RequestSettings  # noqa: E402


@pytest.fixture(scope="module")
def tiny_server(tiny_models) -> Iterator[str]:
    members = [str(tiny_models[name]) for name in ("llama", "qwen2", "plain")]
    with serve(members, RequestSettings(max_tokens=16)) as base:
        yield base
