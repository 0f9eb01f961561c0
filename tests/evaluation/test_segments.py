"""benchmarks/segments.py on shipped development runs: who wrote each ensemble's answers,
checked against the answers' own records (results.jsonl) and the policies' rules."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).parents[2]
DEV = ROOT / "docs/benchmarks/quality/dev"


def rows(*runs: str) -> dict[str, list[str]]:
    printed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/segments.py"), "--root", str(DEV), *runs],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    cells = [line.strip("| ").split(" | ") for line in printed.splitlines()[2:]]
    return {f"{c[0]} {c[1].strip('`')}": c[2:] for c in cells}


def records(folder: str) -> dict[tuple[str, str], dict]:
    lines = (DEV / folder / "results.jsonl").read_text().splitlines()
    return {(r["system"], r["id"]): r for r in map(json.loads, lines)}


def test_every_round_is_a_segment_of_a_stored_answer_and_identical_answers_are_counted():
    found = rows("dev2=instructions-dev-2", "anchor=instructions-anchor-a")
    stored = records("instructions-dev-2")
    answers, rounds, several, written, identical = found["dev2 specem"]
    wins = Counter()
    for (system, _), record in stored.items():
        if system == "specem":
            wins.update(record["details"]["wins"])
    assert int(rounds) == sum(wins.values()) and int(answers) == 192
    assert several.startswith(f"{rounds} (100.0%)")  # the default policy: everyone drafts
    segments = dict(part.split(" ", 1) for part in written.split(", "))
    for member, count in segments.items():
        assert count == f"{wins[member]} ({wins[member] / int(rounds):.1%})"
    same = {
        m: sum(
            r["text"] == stored[(f"member:{m}", i)]["text"]
            for (s, i), r in stored.items()
            if s == "specem"
        )
        for m in ("qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct")
    }
    assert dict(part.rsplit(" ", 1) for part in identical.split(", ")) == {
        m: str(n) for m, n in same.items()
    }

    anchored = "anchor specem[policy=anchor,anchor=qwen2.5-coder-1.5b-instruct]"
    _, rounds, several, written, _ = found[anchored]
    segments = dict(part.split(" ", 2)[:2] for part in written.split(", "))
    assert int(segments["qwen2.5-coder-0.5b-instruct"]) <= int(several.split()[0])  # where asked


def test_a_run_without_recorded_rounds_is_named():
    failed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/segments.py"), f"x={DEV / 'gsm8k-2-gate'}"],
        capture_output=True,
        text=True,
    )
    assert failed.returncode != 0 and "gsm8k-2-gate/rounds.jsonl does not exist" in failed.stderr
