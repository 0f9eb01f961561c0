"""``specem eval --choose`` end to end on the two smallest built-in members, and its
refusals before any member runs."""

from __future__ import annotations

import json
import shlex
import statistics
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specem_chain.cli import app

runner = CliRunner()
ROOT = Path(__file__).parents[2]
DATA = ROOT / "benchmarks" / "data" / "reference.jsonl"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--members", "smollm2"], "name two or more with --members (got 1)"),
        ([], "name two or more with --members (got 0)"),
        (["--members", "smollm2,gemma3", "--systems", "specem"], "leave out --systems"),
    ],
)
def test_choose_refuses_before_any_member_runs(tmp_path, options, message):
    out = tmp_path / "out"
    args = ["eval", "--task", "reference", "--data", str(DATA), "--choose", "--out", str(out)]
    result = runner.invoke(app, [*args, *options])
    assert result.exit_code == 2
    assert message in result.output
    assert not out.exists()


@pytest.mark.models
def test_choose_names_the_best_member_alone_the_anchor_and_writes_its_evidence(tmp_path):
    out = tmp_path / "choose"
    args = ["eval", "--task", "reference", "--data", str(DATA), "--limit", "4"]
    args += ["--members", "smollm2,gemma3", "--max-tokens", "24", "--out", str(out), "--choose"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output

    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    systems = ["member:smollm2-135m-instruct", "member:gemma-3-270m"]
    assert sorted({r["system"] for r in records}) == sorted(systems)  # the members alone only
    rouge = {
        s: {r["id"]: r["metrics"]["rougeL"] for r in records if r["system"] == s} for s in systems
    }
    seconds = {
        s: statistics.median(r["seconds"] for r in records if r["system"] == s) for s in systems
    }
    assert all(len(by_example) == 4 for by_example in rouge.values())
    mean = {s: statistics.fmean(v.values()) for s, v in rouge.items()}
    anchor = min(systems, key=lambda s: (-mean[s], seconds[s]))  # the best, then the cheaper
    other = next(s for s in systems if s != anchor)

    document = json.loads((out / "choice.json").read_text())
    name, other_name = anchor.removeprefix("member:"), other.removeprefix("member:")
    assert document["anchor"] == name
    assert document["task"] == "reference" and document["metric"] == "rougeL"
    assert document["examples"] == 4
    summary = json.loads((out / "summary.json").read_text())
    cost = json.loads((out / "cost.json").read_text())
    for system in systems:
        member = document["members"][system.removeprefix("member:")]
        assert member["score"] == summary[system]
        assert member["score"]["score"] == pytest.approx(mean[system])
        assert member["median_seconds"] == cost[system]["median_seconds"] == seconds[system]

    theirs = document["members"][other_name]
    share = mean[other] / mean[anchor]
    assert theirs["share_of_anchor"] == pytest.approx(share)
    assert theirs["verdict"] == ("helps" if share >= 0.9 else "leave out")
    paired = theirs["paired_with_anchor"]
    differences = [rouge[other][i] - rouge[anchor][i] for i in rouge[anchor]]
    assert paired["better"] == sum(d > 0 for d in differences)
    assert paired["worse"] == sum(d < 0 for d in differences)
    assert paired["difference"] == pytest.approx(statistics.fmean(differences))
    assert paired["ci_low"] <= paired["difference"] <= paired["ci_high"]
    assert paired["p_value"] is None  # ROUGE-L is not pass/fail
    assert document["members"][name]["verdict"] == "anchor"

    recommendation = document["recommendation"]
    if theirs["verdict"] == "helps":
        assert recommendation["system"] == f"specem[policy=anchor,anchor={name}]"
        assert recommendation["members"] == [name, other_name]
        words = shlex.split(recommendation["command"])
        assert words[words.index("--members") + 1] == ",".join(
            {"smollm2-135m-instruct": "smollm2", "gemma-3-270m": "gemma3"}[m]
            for m in (name, other_name)
        )
        group = typer.main.get_command(app)
        command = group.get_command(group.context_class(group), "eval")
        command.make_context("eval", words[2:])  # a command the eval takes as written
    else:
        assert recommendation["system"] == anchor
        assert recommendation["members"] == [name]
        assert recommendation["command"] is None

    table = (out / "choice.md").read_text()
    assert table.split("\n\n", 1)[1] in result.stdout  # printed as written, below its heading
    assert f"| {name} | anchor |" in table and f"| {other_name} | {theirs['verdict']} |" in table
