"""Tiny random models built offline (the repo's tests/tiny_models.py), and the repo's
examples/ on the import path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "examples")]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders of tiny random models: "llama", "qwen2" and "tools" (a template that writes
    tools)."""
    from tiny_models import TOOLS_TEMPLATE, build_model

    root = tmp_path_factory.mktemp("tiny-llamaindex")
    return {
        "llama": build_model(root / "llama", "llama"),
        "qwen2": build_model(root / "qwen2", "qwen2"),
        "tools": build_model(root / "tools", "qwen2", chat_template=TOOLS_TEMPLATE),
    }
