"""The paper's comparison (benchmarks/paper/run.py) against a member on a real vLLM server
and a built-in one in this process: a plumbing run that writes every table and the plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "paper" / "run.py"


def test_the_paper_comparison_runs_end_to_end_and_writes_its_tables(vllm, tmp_path):
    out = tmp_path / "paper"
    command = [sys.executable, str(SCRIPT), "--member", f"vllm+{vllm.url}", "--member", "smollm2"]
    command += ["--gsm8k", "2", "--instructions", "2", "--max-tokens", "24", "--out", str(out)]
    subprocess.run(command, check=True, timeout=1800)
    member = vllm.url.removeprefix("http://")  # the member's name: its server's host:port
    systems = [f"member:{member}", "member:smollm2-135m-instruct", "specem-paper", "specem"]
    for task in ("gsm8k", "instructions"):
        run = json.loads((out / task / "run.json").read_text())
        assert list(run["systems"]) == systems and run["max_tokens"] == 24
        records = (out / task / "results.jsonl").read_text().splitlines()
        assert len(records) == 2 * len(systems)
        assert "specem-paper" in (out / task / "summary.md").read_text()
    forest = (out / "forest.md").read_text()
    assert "`specem-paper`" in forest and "`specem`" in forest
    assert (out / "forest.png").stat().st_size > 1000
    readme = (out / "README.md").read_text()
    assert "## gsm8k" in readme and "## instructions" in readme and "forest.png" in readme
    # a second run resumes: nothing is answered again
    subprocess.run(command, check=True, timeout=600)
    assert len((out / "gsm8k" / "results.jsonl").read_text().splitlines()) == 2 * len(systems)
