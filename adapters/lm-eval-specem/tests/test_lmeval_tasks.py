"""gsm8k_local and ifeval_local: the harness's own tasks on files written for these tests,
run by the harness's own evaluator and command line on tiny random members."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lm_eval
import nltk
import pytest
from lm_eval.tasks import TaskManager
from lm_eval.tasks._yaml_loader import load_yaml
from lm_eval_offline import evaluate_offline
from lm_eval_specem import TASKS_DIR
from lm_eval_specem.cli import option
from lm_eval_specem.tasks.local import HARNESS_TASKS
from lmeval_data import PROMPTS

from specem_chain.evaluation.punkt import data_dir

IFEVAL_METRICS = {
    "prompt_level_strict_acc,none",
    "inst_level_strict_acc,none",
    "prompt_level_loose_acc,none",
    "inst_level_loose_acc,none",
}


@pytest.fixture(scope="module")
def results(tiny_models, data) -> dict:
    members = f"{tiny_models['llama']};{tiny_models['qwen2']}"
    tasks = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata=data)
    return lm_eval.simple_evaluate(
        model="specem",
        model_args=f"members={members},window=4",
        tasks=["gsm8k_local", "ifeval_local"],
        task_manager=tasks,
        num_fewshot=1,  # the tiny members' context holds 256 tokens
        gen_kwargs="max_gen_toks=6",
        log_samples=True,
    )


def test_both_tasks_report_the_harness_metrics(results):
    gsm8k, ifeval = results["results"]["gsm8k_local"], results["results"]["ifeval_local"]
    assert {"exact_match,strict-match", "exact_match,flexible-extract"} <= set(gsm8k)
    assert set(ifeval) >= IFEVAL_METRICS
    assert all(0.0 <= ifeval[m] <= 1.0 for m in IFEVAL_METRICS)
    for task in ("gsm8k_local", "ifeval_local"):  # (gsm8k logs a sample per filter)
        assert {s["doc_id"] for s in results["samples"][task]} == {0, 1, 2}


def test_gsm8k_local_is_the_harness_gsm8k_on_the_local_files(results, data):
    harness = load_yaml(HARNESS_TASKS / "gsm8k" / "gsm8k.yaml")
    config = results["configs"]["gsm8k_local"]
    assert config["doc_to_text"] == harness["doc_to_text"] == "Question: {{question}}\nAnswer:"
    assert [f["name"] for f in config["filter_list"]] == ["strict-match", "flexible-extract"]
    assert config["generation_kwargs"]["until"] == harness["generation_kwargs"]["until"]
    first = results["samples"]["gsm8k_local"][0]
    context, gen_kwargs = first["arguments"][0]
    test = json.loads(Path(data["gsm8k_test"]).read_text().splitlines()[0])
    shots = [
        json.loads(line)["question"] for line in Path(data["gsm8k_train"]).read_text().splitlines()
    ]
    assert context.endswith(f"Question: {test['question']}\nAnswer:")
    assert sum(f"Question: {q}\n" in context for q in shots) == 1  # one few-shot example
    assert gen_kwargs["max_gen_toks"] == 6 and gen_kwargs["do_sample"] is False
    assert first["target"] == test["answer"]


def test_ifeval_local_scores_each_prompt_with_the_harness_checkers(results):
    samples = results["samples"]["ifeval_local"]
    assert [s["doc"]["key"] for s in samples] == [p["key"] for p in PROMPTS]
    for sample, prompt in zip(samples, PROMPTS):
        assert sample["arguments"][0][0] == prompt["prompt"]
        assert len(sample["inst_level_strict_acc"]) == len(prompt["instruction_id_list"])
    assert str(data_dir()) in nltk.data.path  # the Punkt tables came from specem's cache


def test_a_task_without_its_files_says_how_to_give_them():
    tasks = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
    with pytest.raises(ValueError, match="gsm8k_test"):
        tasks.load(["gsm8k_local"])


def test_gsm8k_local_runs_zero_shot_without_a_train_file(tiny_models, data):
    only_test = {"gsm8k_test": data["gsm8k_test"]}
    tasks = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata=only_test)
    results = lm_eval.simple_evaluate(
        model="specem",
        model_args=f"members={tiny_models['llama']}",
        tasks=["gsm8k_local"],
        task_manager=tasks,
        num_fewshot=0,
        limit=1,
        gen_kwargs="max_gen_toks=3",
        log_samples=True,
    )
    [context, _] = results["samples"]["gsm8k_local"][0]["arguments"][0]
    assert context.startswith("Question: ") and context.count("Question: ") == 1


def test_the_example_runs_both_tasks(tiny_models, data):
    members = f"{tiny_models['llama']};{tiny_models['qwen2']}"
    results = evaluate_offline(members, data, limit=1, num_fewshot=1, max_gen_toks=4)
    assert set(results["results"]) == {"gsm8k_local", "ifeval_local"}


def test_the_command_line_runs_the_harness_with_specem(tiny_models, data, tmp_path):
    members = f"{tiny_models['llama']};{tiny_models['qwen2']}"
    command = [
        sys.executable,
        "-m",
        "lm_eval_specem",
        "--model",
        "specem",
        "--model_args",
        f"members={members},policy=paper,max_tokens=256",
        "--tasks",
        "gsm8k_local,ifeval_local",
        "--num_fewshot",
        "1",
        "--limit",
        "2",
        "--gen_kwargs",
        "max_gen_toks=4",
        "--metadata",
        json.dumps(data),
        "--output_path",
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [written] = tmp_path.rglob("results_*.json")
    saved = json.loads(written.read_text())
    assert set(saved["results"]) == {"gsm8k_local", "ifeval_local"}
    assert saved["config"]["model"] == "specem"


@pytest.mark.parametrize(
    ("args", "values"),
    [
        (["--tasks", "ifeval_local", "--limit", "2"], ["ifeval_local"]),
        (["--tasks=gsm8k,ifeval"], ["gsm8k,ifeval"]),
        (["--model", "specem"], []),
    ],
)
def test_option_reads_both_spellings(args, values):
    assert option(args, "--tasks") == values
