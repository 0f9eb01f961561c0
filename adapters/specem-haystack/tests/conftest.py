"""The repo's test helpers (``tiny_models``) for the Haystack adapter's tests, and
Haystack's usage telemetry off (nothing leaves the machine in a test)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
ROOT = Path(__file__).parents[3]
sys.path.insert(0, str(ROOT / "examples"))

_spec = importlib.util.spec_from_file_location("specem_repo_conftest", ROOT / "tests/conftest.py")
_repo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_repo)  # sets HF_HUB_OFFLINE and puts tests/ on sys.path
tiny_models = _repo.tiny_models


@pytest.fixture(scope="session")
def tiny_pair(tiny_models) -> list[str]:
    """Two tiny random members (llama and qwen2 architectures)."""
    return [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
