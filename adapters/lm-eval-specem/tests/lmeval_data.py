"""Data written for these tests, in the layouts of GSM8K and IFEval (not taken from either)."""

from __future__ import annotations

import json
from pathlib import Path

PROBLEMS = [
    ("A shelf holds {a} books and {b} more are added. How many books are on it?", "+"),
    ("Sam had {a} marbles and lost {b} of them. How many marbles are left?", "-"),
]
"""Grade-school problems written for these tests, in GSM8K's layout."""

PROMPTS = [
    {
        "key": 1,
        "prompt": "Describe your favourite season in lowercase letters only.",
        "instruction_id_list": ["change_case:english_lowercase"],
        "kwargs": [{}],
    },
    {
        "key": 2,
        "prompt": "Name three colours in fewer than 12 words, without any commas.",
        "instruction_id_list": ["length_constraints:number_words", "punctuation:no_comma"],
        "kwargs": [{"num_words": 12, "relation": "less than"}, {}],
    },
    {
        "key": 3,
        "prompt": 'Say hello to a friend and end with the phrase "See you soon."',
        "instruction_id_list": ["startend:end_checker"],
        "kwargs": [{"end_phrase": "See you soon."}],
    },
]
"""Prompts written for these tests, in IFEval's layout."""


def problem(index: int) -> dict[str, str]:
    text, sign = PROBLEMS[index % 2]
    a, b = 10 + index, 1 + index % 5
    result = a + b if sign == "+" else a - b
    return {
        "question": text.format(a=a, b=b),
        "answer": f"{a} {sign} {b} = <<{a}{sign}{b}={result}>>{result}.\n#### {result}",
    }


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)
