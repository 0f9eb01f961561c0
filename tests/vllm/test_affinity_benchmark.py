"""benchmarks/affinity.py's plumbing on the tests' vLLM server, given as both replicas: nginx
started and stopped by the benchmark, each seed answered both ways, the same answer, and
the servers' counters and nginx's access log read for each answer. (What affinity saves
needs two servers: the lead's measurement, docs/guides/multi-machine.md.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "affinity.py"


def test_the_affinity_benchmark_answers_each_seed_both_ways(vllm, tmp_path):
    out = tmp_path / "affinity"
    command = [sys.executable, str(SCRIPT), "--replica", vllm.url, "--replica", vllm.url]
    command += ["--tokens", "400", "--seeds", "2", "--max-tokens", "12", "--out", str(out)]
    subprocess.run(command, check=True, timeout=900)
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [(r["routing"], r["seed"]) for r in rows] == [
        ("round-robin", 0),
        ("session", 0),
        ("session", 1),
        ("round-robin", 1),
    ]
    for seed in (0, 1):
        texts = {r["text"] for r in rows if r["seed"] == seed}
        assert len(texts) == 1 and texts != {""}  # both ways, the same answer
    for row in rows:
        assert row["prompt_tokens"] >= 400 and row["rounds"] >= 1
        assert row["computed"][0] >= row["prompt_tokens"]  # from an empty cache
        assert row["requests"][0] >= 3 * row["rounds"]  # drafts, scorings, accepts
    table = out.with_suffix(".md").read_text()
    assert table.count("| round-robin |") == 3 and table.count("| session |") == 3
