"""Scoring: gsm8k number extraction, ROUGE wiring, and loading each task's data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specem_chain.evaluation import ifeval
from specem_chain.evaluation.tasks import TASKS, DataError, extract_number, rouge

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("answer", "number"),
    [
        ("#### 72", "72"),
        ("Natalia sold 48 + 24 = 72 clips.\n#### 72", "72"),
        ("The answer is 72.", "72"),
        ("So the answer is: $1,080.", "1080"),
        ("She earned $1,080 in total", "1080"),
        ("72 clips", "72"),
        ("The temperature fell to -5 degrees.", "-5"),
        ("The temperature fell to \u22125 degrees.", "-5"),
        ("Each costs 2.50 dollars", "2.5"),
        ("It costs $10.00", "10"),
        ("3 + 4 = 7, then 7 * 2 = 14", "14"),
        ("First 5-3 = 2", "2"),
        ("\\boxed{72}", "72"),
        ("We get $\\boxed{1,234}$ apples, checked with 5 others", "1234"),
        ("The answer is 18. Check: 9 * 2 = 18, and 3 more", "18"),
        ("The answer is 96 + 2 = 130.\n\nI used 2 steps", "130"),
        ("The answer is $1,080.50. Done in 3 steps", "1080.5"),
        ("#### 12\nThat used 4 steps", "12"),
        ("1,2,3", "3"),
        ("0.0", "0"),
        ("I do not know", None),
        ("", None),
    ],
)
def test_extract_number(answer, number):
    assert extract_number(answer) == number


def test_gsm8k_parses_the_reference_and_scores_exact_match(tmp_path):
    data = tmp_path / "g.jsonl"
    rows = [
        {"question": "How many?", "answer": "2 + 2 = <<2+2=4>>4\n#### 1,000"},
        {"question": "And now?", "answer": "#### -3"},
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = TASKS["gsm8k"]
    first, second = task.load(data)
    assert (first.id, first.reference, second.reference) == ("0", "1000", "-3")
    assert first.prompt.startswith("How many?")
    assert task.score(first, "so 1000 in all") == {"exact_match": 1.0}
    assert task.score(first, "#### 999") == {"exact_match": 0.0}
    assert task.score(second, "The answer is -3.") == {"exact_match": 1.0}
    assert task.score(second, "The answer is 3.") == {"exact_match": 0.0}
    assert [e.id for e in task.load(data, limit=1)] == ["0"]


def test_gsm8k_without_a_final_number_is_a_data_error(tmp_path):
    data = tmp_path / "g.jsonl"
    data.write_text(json.dumps({"question": "q", "answer": "no marker 4"}) + "\n")
    with pytest.raises(DataError, match=r"g.jsonl:1: not a gsm8k example"):
        TASKS["gsm8k"].load(data)


def test_rouge_known_pairs():
    same = rouge("the cat sat on the mat", "the cat sat on the mat")
    assert same == pytest.approx({"rougeL": 1.0, "rouge2": 1.0})
    disjoint = rouge("the cat sat on the mat", "dogs bark loudly")
    assert disjoint == {"rougeL": 0.0, "rouge2": 0.0}
    # LCS "the cat the mat" (4 of 6 and 4 of 5 words); bigrams "the cat", "the mat" (2 of 5/4).
    partial = rouge("the cat sat on the mat", "the cat lay near the mat")
    assert partial["rougeL"] == pytest.approx(2 * (4 / 6) * (4 / 6) / (4 / 6 + 4 / 6))
    assert partial["rouge2"] == pytest.approx(2 * (2 / 5) * (2 / 5) / (2 / 5 + 2 / 5))
    # Porter stemming: "cats" and "cat" match.
    assert rouge("cats", "cat")["rougeL"] == 1.0


def test_reference_task_scores_rouge_against_the_reference(tmp_path):
    data = tmp_path / "r.jsonl"
    data.write_text(json.dumps({"id": "a", "prompt": "p", "reference": "blue sky"}) + "\n")
    [example] = TASKS["reference"].load(data)
    assert TASKS["reference"].score(example, "blue sky") == pytest.approx(
        {"rougeL": 1.0, "rouge2": 1.0}
    )
    assert TASKS["reference"].score(example, "red sea") == {"rougeL": 0.0, "rouge2": 0.0}


def test_instructions_score_as_ifeval_does(tmp_path):
    data = tmp_path / "i.jsonl"
    record = {
        "key": 7,
        "prompt": "Answer in lowercase with no commas.",
        "instruction_id_list": ["change_case:english_lowercase", "punctuation:no_comma"],
        "kwargs": [{}, {}],
    }
    data.write_text(json.dumps(record) + "\n")
    [example] = TASKS["instructions"].load(data)
    assert example.id == "7"
    score = TASKS["instructions"].score
    assert score(example, "all is fine here in the small town") == {
        "prompt_level_strict_acc": 1.0,
        "inst_level_strict_acc": 1.0,
        "prompt_level_loose_acc": 1.0,
        "inst_level_loose_acc": 1.0,
        "instructions": 2.0,
    }
    half = score(example, "all is fine here, in the small town")
    assert (half["prompt_level_strict_acc"], half["inst_level_strict_acc"]) == (0.0, 0.5)


def test_unknown_instruction_is_a_data_error(tmp_path):
    data = tmp_path / "i.jsonl"
    record = {"key": 1, "prompt": "p", "instruction_id_list": ["made:up"], "kwargs": [{}]}
    data.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError, match=r"i.jsonl:1: .*made:up"):
        TASKS["instructions"].load(data)


def test_an_instruction_with_wrong_arguments_is_a_data_error(tmp_path):
    data = tmp_path / "i.jsonl"
    record = {
        "key": 1,
        "prompt": "p",
        "instruction_id_list": ["keywords:existence"],
        "kwargs": [{"keyword": ["a"]}],  # the argument is "keywords"
    }
    data.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError, match="keywords:existence"):
        TASKS["instructions"].load(data)


def test_every_line_of_the_development_set_builds_with_ifevals_checkers():
    path = ROOT / "benchmarks" / "data" / "instructions-dev.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    examples = TASKS["instructions"].load(path)
    assert len(examples) == len(lines) == 192
    types = {i for line in lines for i in line["instruction_id_list"]}
    assert types == set(ifeval.harness().instructions_registry.INSTRUCTION_DICT)
    # Each example scores: the checkers run on an answer without raising.
    for example in examples:
        scores = TASKS["instructions"].score(example, "A short answer. It has two sentences.")
        assert scores["instructions"] == len(example.reference["instruction_id_list"])


@pytest.mark.parametrize(
    ("task", "name", "count"),
    [
        ("instructions", "instructions", 32),
        ("instructions", "instructions-dev", 192),
        ("reference", "reference", 32),
        ("reference", "reference-dev", 187),
        ("reference", "reference-confirm", 200),
    ],
)
def test_the_shipped_sets_load(task, name, count):
    examples = TASKS[task].load(ROOT / "benchmarks" / "data" / f"{name}.jsonl")
    assert len(examples) == count
