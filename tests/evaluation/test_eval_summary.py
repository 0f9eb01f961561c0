"""Bootstrap intervals, the summary table and the chart."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specem_chain.evaluation.run import ResultStore
from specem_chain.evaluation.summary import (
    bootstrap,
    compare_with_best_member,
    costs,
    markdown,
    mcnemar_exact,
    score_answers,
    summarise,
    write,
)
from specem_chain.evaluation.tasks import TASKS, Example


def coin(n: int, p: float = 0.6, seed: int = 1) -> list[float]:
    return list((np.random.default_rng(seed).random(n) < p).astype(float))


def test_interval_contains_the_mean_and_is_a_95_percent_interval():
    values = coin(200)
    result = bootstrap(values, seed=3)
    assert result["score"] == pytest.approx(np.mean(values))
    assert result["ci_low"] < result["score"] < result["ci_high"]
    assert result["n"] == 200
    # The normal approximation of a proportion's 95% interval: mean +- 1.96 * sd / sqrt(n).
    half = 1.96 * np.sqrt(result["score"] * (1 - result["score"]) / 200)
    assert result["ci_high"] - result["ci_low"] == pytest.approx(2 * half, rel=0.15)


def test_interval_narrows_with_more_data():
    small, large = bootstrap(coin(25), seed=0), bootstrap(coin(400), seed=0)
    assert (large["ci_high"] - large["ci_low"]) < (small["ci_high"] - small["ci_low"]) / 2


def test_the_same_seed_gives_the_same_interval():
    values = coin(50)
    assert bootstrap(values, seed=5) == bootstrap(values, seed=5)
    assert bootstrap(values, seed=5) != bootstrap(values, seed=6)


def test_all_equal_values_give_a_zero_width_interval():
    assert bootstrap([0.3] * 10) == {"score": 0.3, "ci_low": 0.3, "ci_high": 0.3, "n": 10}
    assert bootstrap([1.0]) == {"score": 1.0, "ci_low": 1.0, "ci_high": 1.0, "n": 1}


def test_no_values_is_an_error():
    with pytest.raises(ValueError, match="no values"):
        bootstrap([])


def test_a_weighted_mean_pools_what_the_weights_count():
    # Two prompts: 1 of 1 instruction followed, and 1 of 3. Pooled: 2 of 4, not (1 + 1/3) / 2.
    result = bootstrap([1.0, 1 / 3], weights=[1, 3], seed=0)
    assert result["score"] == pytest.approx(0.5)
    assert result["ci_low"] <= 0.5 <= result["ci_high"]
    assert result["n"] == 2
    assert bootstrap([0.2, 0.8], weights=[1, 1], seed=4) == bootstrap([0.2, 0.8], seed=4)


def test_instruction_level_scores_are_pooled_over_instructions(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    store.add({"system": "specem", "id": "1", "text": "no commas here"})
    store.add({"system": "specem", "id": "2", "text": "Commas, Capitals, and more."})
    examples = [
        Example("1", 0, "p", _instructions(1, ["punctuation:no_comma"])),
        Example(
            "2",
            1,
            "p",
            _instructions(
                2,
                [
                    "punctuation:no_comma",
                    "change_case:english_lowercase",
                    "keywords:existence",
                ],
                [{}, {}, {"keywords": ["more"]}],
            ),
        ),
    ]
    task = TASKS["instructions"]
    summary = summarise(task, score_answers(task, store, ["specem"], examples))
    assert list(summary) == list(task.metrics)
    assert summary["prompt_level_strict_acc"]["specem"]["score"] == 0.5
    # 1 of 1 and 1 of 3 instructions followed: 2 of 4 pooled (a mean of shares says 2/3).
    assert summary["inst_level_strict_acc"]["specem"]["score"] == pytest.approx(0.5)


def _instructions(key: int, ids: list[str], kwargs: list[dict] | None = None) -> dict:
    return {
        "key": key,
        "prompt": "p",
        "instruction_id_list": ids,
        "kwargs": kwargs or [{} for _ in ids],
    }


def test_summary_covers_the_run_examples_only_and_writes_every_file(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    for system, hits in (("member:a", [1, 0, 1]), ("specem", [1, 1, 1])):
        for i, hit in enumerate(hits):
            store.add({"system": system, "id": str(i), "text": f"#### {hit}"})
    examples = [Example(str(i), i, "q", "1") for i in range(2)]  # the run's limit is 2
    task = TASKS["gsm8k"]
    summary = summarise(task, score_answers(task, store, ["member:a", "specem", "rank"], examples))
    assert list(summary) == ["exact_match"]
    assert summary["exact_match"]["member:a"]["score"] == 0.5
    assert summary["exact_match"]["member:a"]["n"] == 2
    assert "rank" not in summary["exact_match"]  # nothing finished yet
    write(summary, tmp_path, "gsm8k")
    assert json.loads((tmp_path / "summary.json").read_text()) == summary["exact_match"]
    table = (tmp_path / "summary.md").read_text()
    assert "| specem | 1.000 [1.000, 1.000] | 2 |" in table
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_markdown_has_a_column_per_metric():
    score = {"score": 0.5, "ci_low": 0.25, "ci_high": 0.75, "n": 4}
    table = markdown({"rougeL": {"mbr": score}, "rouge2": {"mbr": score}})
    assert table.splitlines()[0] == "| system | rougeL (95% CI) | rouge2 (95% CI) | n |"
    assert table.splitlines()[2] == "| mbr | 0.500 [0.250, 0.750] | 0.500 [0.250, 0.750] | 4 |"


def test_each_system_is_compared_with_the_best_member_example_by_example(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    answers = {  # the reference is 1 for every example
        "member:weak": [0, 0, 1, 0],
        "member:strong": [1, 1, 0, 0],
        "specem": [1, 0, 1, 1],  # better on 2 (ids 2, 3), worse on 1 (id 1)
        "rank": [1, 1, 0],  # example 3 not finished: compared on 3
    }
    for system, hits in answers.items():
        for i, hit in enumerate(hits):
            store.add({"system": system, "id": str(i), "text": f"#### {hit}"})
    examples = [Example(str(i), i, "q", "1") for i in range(4)]
    task = TASKS["gsm8k"]
    scores = score_answers(task, store, list(answers), examples)
    summary = summarise(task, scores)
    comparison = compare_with_best_member(task, scores, summary, ["member:weak", "member:strong"])
    assert comparison is not None
    best, paired = comparison
    assert best == "member:strong"
    counts = {s: (p["better"], p["worse"], p["n"]) for s, p in paired.items()}
    assert counts == {"member:weak": (1, 2, 4), "specem": (2, 1, 4), "rank": (0, 0, 3)}
    assert paired["specem"]["difference"] == pytest.approx(0.25)  # (+1 +1 -1 +0) / 4
    assert paired["specem"]["ci_low"] <= 0.25 <= paired["specem"]["ci_high"]
    # exact McNemar: 2 against 1 discordant pairs, P(X <= 1 | n=3, 1/2) = 4/8, two-sided 1.0
    assert paired["specem"]["p_value"] == 1.0
    assert paired["rank"]["difference"] == 0.0 and paired["rank"]["p_value"] == 1.0
    write(summary, tmp_path, "gsm8k", comparison)
    lines = (tmp_path / "summary.md").read_text().splitlines()
    assert lines[2].endswith("| n | vs member:strong: better / worse | difference (95% CI) | p |")
    assert "| specem | 0.750 [" in lines[6] and "| 4 | 2 / 1 | +0.250 [" in lines[6]
    assert lines[6].endswith("| 1.000 |")
    assert lines[5].endswith("| 4 | | | |")  # the best member itself
    assert json.loads((tmp_path / "paired.json").read_text())["best_member"] == "member:strong"


def test_the_summary_says_what_each_systems_answers_took(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    answers = {"member:a": [(1, 10.0, True), (0, 30.0, False), (1, 20.0, True)]}
    answers["specem"] = [(1, 40.0, True), (1, 50.0, False), (1, 90.0, False), (0, 5.0, True)]
    for system, made in answers.items():
        for i, (hit, seconds, finished) in enumerate(made):
            text = f"#### {hit}"
            store.add(
                {
                    "system": system,
                    "id": str(i),
                    "text": text,
                    "seconds": seconds,
                    "finished": finished,
                }
            )
    examples = [Example(str(i), i, "q", "1") for i in range(3)]  # the run's limit is 3
    task = TASKS["gsm8k"]
    scores = score_answers(task, store, list(answers), examples)
    cost = costs(store.records, scores)
    assert cost == {
        "member:a": {"median_seconds": 20.0, "at_limit": 1, "n": 3},
        "specem": {"median_seconds": 50.0, "at_limit": 2, "n": 3},
    }
    summary = summarise(task, scores)
    write(summary, tmp_path, "gsm8k", None, cost)
    lines = (tmp_path / "summary.md").read_text().splitlines()
    assert lines[2].endswith("| n | median s | at the token limit |")
    assert lines[4].startswith("| member:a | 0.667 [") and lines[4].endswith("| 3 | 20.0 | 1 |")
    assert json.loads((tmp_path / "cost.json").read_text()) == cost


def test_without_a_finished_member_there_is_no_comparison(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    store.add({"system": "specem", "id": "0", "text": "#### 1"})
    examples = [Example("0", 0, "q", "1")]
    task = TASKS["gsm8k"]
    scores = score_answers(task, store, ["member:a", "specem"], examples)
    summary = summarise(task, scores)
    assert compare_with_best_member(task, scores, summary, ["member:a"]) is None


@pytest.mark.parametrize(
    ("better", "worse", "p"),
    [(0, 0, 1.0), (5, 0, 0.0625), (10, 2, 0.0386), (2, 10, 0.0386), (30, 30, 1.0)],
)
def test_mcnemar_is_the_exact_two_sided_binomial_test(better, worse, p):
    # checked against scipy.stats.binomtest(min, n, 0.5).pvalue
    assert mcnemar_exact(better, worse) == pytest.approx(p, abs=5e-4)
