"""Small data files in the tasks' layouts, written here (the repository's conftest.py has
the rest)."""

from __future__ import annotations

import pytest
from lmeval_data import PROMPTS, problem, write_jsonl


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
