"""benchmarks/forest.py on the shipped development runs: one row per system and run, paired
with the run's best member exactly as specem eval's own summary pairs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
DEV = ROOT / "docs/benchmarks/quality/dev"


def test_the_forest_plot_pairs_every_system_with_its_runs_best_member(tmp_path):
    runs = [
        f"instructions={DEV / 'instructions-dev-2'}",
        f"gsm8k={DEV / 'gsm8k-2'}+{DEV / 'gsm8k-2-b'}",
    ]
    out = tmp_path / "forest"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/forest.py"), "--out", str(out), *runs],
        check=True,
        capture_output=True,
    )
    assert out.with_suffix(".png").stat().st_size > 0
    rows = [line for line in out.with_suffix(".md").read_text().splitlines()[2:] if line]
    assert [row.split(" | ")[0].strip("| ") for row in rows] == ["instructions"] * 2 + ["gsm8k"]
    gated = rows[-1].split(" | ")
    assert gated[4] == "200" and gated[5] == "19 / 19"  # the pooled folders: 200 shared ids
    assert all("member:" not in row for row in rows)  # members are the yardstick, not rows


def test_folders_pooled_under_one_label_must_agree(tmp_path):
    copy = tmp_path / "gsm8k-2-b"
    shutil.copytree(DEV / "gsm8k-2-b", copy)
    manifest = json.loads((copy / "run.json").read_text())
    (recipe,) = manifest["systems"].values()
    recipe["gate"] = 0.25  # the same name, another recipe: not the same system
    (copy / "run.json").write_text(json.dumps(manifest))
    pooled = f"gsm8k={DEV / 'gsm8k-2-b'}+{copy}"
    args = [sys.executable, str(ROOT / "benchmarks/forest.py"), "--out", str(tmp_path / "f")]
    failed = subprocess.run([*args, pooled], capture_output=True, text=True)
    assert failed.returncode != 0 and "means other settings" in failed.stderr
    manifest["max_tokens"] = 256  # answers cut elsewhere: not pooled either
    (copy / "run.json").write_text(json.dumps(manifest))
    failed = subprocess.run([*args, pooled], capture_output=True, text=True)
    assert failed.returncode != 0 and "other settings than the first" in failed.stderr
