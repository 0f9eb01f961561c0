"""The harness's own gsm8k and ifeval on local files, answered by a specem ensemble.

Needs the adapter: pip install ./adapters/lm-eval-specem
"""

from __future__ import annotations

import sys

import lm_eval
from lm_eval.tasks import TaskManager
from lm_eval.utils import make_table
from lm_eval_specem import TASKS_DIR


def evaluate_offline(
    members: str,
    files: dict[str, str],
    *,
    limit: int | None = None,
    num_fewshot: int | None = None,
    max_gen_toks: int = 256,
) -> dict:
    """Run gsm8k_local and ifeval_local; ``files`` holds ``gsm8k_test``, ``gsm8k_train``
    (few-shot examples) and ``ifeval_data``. ``members`` are separated by ';'."""
    tasks = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata=files)
    return lm_eval.simple_evaluate(
        model="specem",
        model_args={"members": members, "policy": "paper", "seed": 0},
        tasks=["gsm8k_local", "ifeval_local"],
        task_manager=tasks,
        limit=limit,
        num_fewshot=num_fewshot,
        gen_kwargs={"max_gen_toks": max_gen_toks},
    )


if __name__ == "__main__":
    # python examples/lm_eval_offline.py gsm8k-test.jsonl gsm8k-train.jsonl ifeval.jsonl
    test, train, ifeval = sys.argv[1:4]
    files = {"gsm8k_test": test, "gsm8k_train": train, "ifeval_data": ifeval}
    results = evaluate_offline("smollm2;qwen2.5-coder", files, limit=10, max_gen_toks=128)
    print(make_table(results))
