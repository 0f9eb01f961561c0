"""benchmarks/warmup.py on the shipped gated run: it counts, per member, when the gate first
left it out of the drafting and how often, from the answers' recorded starting weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
RUN = ROOT / "docs/benchmarks/quality/dev/gsm8k-2-b"
GATED = "specem[policy=pool,gate=0.5,feedback=task]"


def test_the_warm_up_counts_the_answers_each_member_rested_in():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/warmup.py"), GATED, f"stored={RUN}"],
        check=True,
        capture_output=True,
        text=True,
    )
    rows = {r.split(" | ")[3]: r.split(" | ") for r in done.stdout.splitlines()[2:]}
    answers = [json.loads(line) for line in (RUN / "results.jsonl").open()]
    starts = [a["details"]["start_weights"]["smollm2-135m-instruct"] for a in answers]
    below = [i for i, w in enumerate(starts, 1) if w < 0.25]  # gate 0.5 over K = 2
    smol, qwen = rows["smollm2-135m-instruct"], rows["qwen2.5-coder-0.5b-instruct"]
    assert smol[4:6] == [str(below[0]), str(len(below))]
    assert int(smol[5]) + int(smol[6].strip(" |")) <= len(answers)  # a rested member wrote nothing
    assert qwen[4:7] == ["never", "0", f"{len(answers)} |"]
    assert starts[0] == 0.5  # the first answer starts from uniform weights
