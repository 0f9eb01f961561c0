"""benchmarks/forest.py on the shipped development runs: one row per system and run, paired
with the run's best member exactly as specem eval's own summary pairs them."""

from __future__ import annotations

import json
import shutil
import statistics
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
    records = {}  # the pooled answers' median seconds, the system's and its member's
    for folder in ("gsm8k-2", "gsm8k-2-b"):
        for line in (DEV / folder / "results.jsonl").read_text().splitlines():
            record = json.loads(line)
            records.setdefault(record["system"], {})[record["id"]] = record["seconds"]
    system, member = gated[1].strip("`"), f"member:{gated[3]}"
    seconds = [round(statistics.median(records[s].values())) for s in (system, member)]
    assert gated[-1].strip(" |") == f"{seconds[0]} / {seconds[1]}"


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


def test_a_member_alone_run_with_fewer_members_is_the_rows_yardstick(tmp_path):
    # Qwen2.5-Coder alone, drafting with the default penalty, run by itself: the two-member
    # default is paired with it (the Benchmarks page's strict comparison on instructions)
    row = f"strict={DEV / 'instructions-dev-1-qwen-rp'}+{DEV / 'instructions-dev-2-rp'}"
    out = tmp_path / "forest"
    args = [sys.executable, str(ROOT / "benchmarks/forest.py"), "--out", str(out)]
    subprocess.run([*args, row], check=True, capture_output=True)
    (default,) = [line for line in out.with_suffix(".md").read_text().splitlines()[2:] if line]
    cells = default.split(" | ")
    assert cells[3:6] == ["qwen2.5-coder-0.5b-instruct", "192", "8 / 20"]

    other = tmp_path / "other-member"  # a member alone who is not one of the row's members
    shutil.copytree(DEV / "instructions-dev-1-qwen-rp", other)
    manifest = json.loads((other / "run.json").read_text())
    manifest["members"] = ["gemma-3-270m"]
    manifest["systems"] = {"member:gemma-3-270m": manifest["systems"].popitem()[1]}
    (other / "run.json").write_text(json.dumps(manifest))
    failed = subprocess.run(
        [*args, f"x={other}+{DEV / 'instructions-dev-2-rp'}"], capture_output=True, text=True
    )
    assert failed.returncode != 0 and "only a folder of members alone" in failed.stderr

    ensembles = f"x={DEV / 'gsm8k-2-b'}+{DEV / 'gsm8k-3-rp'}"  # two and three members
    failed = subprocess.run([*args, ensembles], capture_output=True, text=True)
    assert failed.returncode != 0 and "pools ensembles of other members" in failed.stderr


def test_the_shipped_forest_table_is_what_its_runs_file_gives(tmp_path):
    # the Benchmarks page's command, with the runs read from the file (one a line)
    out = tmp_path / "forest"
    args = ["--out", str(out), "--root", str(DEV), f"@{DEV.parent / 'forest-runs.txt'}"]
    subprocess.run([sys.executable, str(ROOT / "benchmarks/forest.py"), *args], check=True)
    shipped = (DEV.parent / "forest.md").read_text(encoding="utf-8")
    assert out.with_suffix(".md").read_text(encoding="utf-8") == shipped
