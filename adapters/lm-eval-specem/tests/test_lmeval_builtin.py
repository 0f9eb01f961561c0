"""One run of both tasks on the embedded default ensemble (real weights): real answers,
stopped where the harness's gsm8k says, scored by the harness."""

from __future__ import annotations

import lm_eval
import pytest
from lm_eval.tasks import TaskManager
from lm_eval_specem import TASKS_DIR

pytestmark = pytest.mark.models


@pytest.mark.heavy  # the default member on both; test_lmeval_tasks.py runs them on tiny ones
def test_the_default_ensemble_answers_both_tasks(data):
    tasks = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata=data)
    results = lm_eval.simple_evaluate(
        model="specem",
        model_args="seed=0",
        tasks=["gsm8k_local", "ifeval_local"],
        task_manager=tasks,
        limit=2,
        num_fewshot=1,
        gen_kwargs="max_gen_toks=40",
        log_samples=True,
    )
    for task in ("gsm8k_local", "ifeval_local"):
        answers = [s["resps"][0][0] for s in results["samples"][task]]
        assert len(answers) >= 2 and all(a.strip() for a in answers)
        assert not any("Question:" in a for a in answers)  # gsm8k's stop sequence
    ifeval = results["results"]["ifeval_local"]
    assert 0.0 <= ifeval["prompt_level_strict_acc,none"] <= 1.0
    assert 0.0 <= results["results"]["gsm8k_local"]["exact_match,flexible-extract"] <= 1.0
