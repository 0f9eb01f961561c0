"""Tiny random models built offline (the repo's tests/tiny_models.py), small data files in
the tasks' layouts written here, and the repo's examples/ on the import path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "examples")]

from lmeval_data import PROMPTS, problem, write_jsonl  # noqa: E402


@pytest.fixture(scope="session")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The tasks' metadata: a gsm8k test file (3 problems), a train file of few-shot
    examples (6) and an ifeval file (3 prompts)."""
    root = tmp_path_factory.mktemp("lm-eval-data")
    return {
        "gsm8k_test": write_jsonl(root / "gsm8k-test.jsonl", [problem(i) for i in range(3)]),
        "gsm8k_train": write_jsonl(root / "gsm8k-train.jsonl", [problem(i) for i in range(3, 9)]),
        "ifeval_data": write_jsonl(root / "ifeval.jsonl", PROMPTS),
    }


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders of tiny random models: "llama" and "qwen2"."""
    from tiny_models import build_model

    root = tmp_path_factory.mktemp("tiny-lm-eval")
    return {
        "llama": build_model(root / "llama", "llama"),
        "qwen2": build_model(root / "qwen2", "qwen2"),
    }
