"""``specem eval`` end to end on tiny random models: results, summary, chart, resume."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from specem_chain.cli import app

runner = CliRunner()
ROOT = Path(__file__).parents[2]


def test_eval_runs_end_to_end_and_resumes(tiny_models, tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    rows = [{"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"} for i in range(3)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out"
    args = [
        "eval",
        "--task",
        "gsm8k",
        "--data",
        str(data),
        "--members",
        f"{tiny_models['llama']},{tiny_models['qwen2']}",
        "--limit",
        "2",
        "--systems",
        "member:llama,mbr,vote",
        "--max-tokens",
        "6",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["member:llama", "mbr", "vote"]
    for score in summary.values():
        assert set(score) == {"score", "ci_low", "ci_high", "n"}
        assert score["n"] == 2
        assert score["ci_low"] <= score["score"] <= score["ci_high"]
    assert (out / "chart.png").stat().st_size > 1000
    assert "| member:llama |" in (out / "summary.md").read_text()
    cost = json.loads((out / "cost.json").read_text())
    assert list(cost) == list(summary) and all(c["n"] == 2 for c in cost.values())
    assert cost["member:llama"]["at_limit"] <= 2 and cost["member:llama"]["median_seconds"] > 0
    # The baselines needed member:qwen2's answers, which are stored too.
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted({r["system"] for r in records}) == ["mbr", "member:llama", "member:qwen2", "vote"]
    assert len(records) == 8

    again = runner.invoke(app, args)  # everything is stored: nothing runs again
    assert again.exit_code == 0, again.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 8

    other_seed = runner.invoke(app, [*args, "--seed", "1"])
    assert other_seed.exit_code == 2
    assert "seed differ" in other_seed.output

    # The members' sampling is in each system's recipe: another penalty is another recipe.
    recipe = json.loads((out / "run.json").read_text())["systems"]["member:llama"]
    assert recipe["sampling"]["llama"]["repeat_penalty"] == 1.1  # the default
    unpenalised = runner.invoke(app, [*args, "--repeat-penalty", "1"])
    assert unpenalised.exit_code == 2
    assert "answers of member:llama made with other settings (sampling" in unpenalised.output
    fresh = runner.invoke(app, [*args, "--repeat-penalty", "1", "--out", str(tmp_path / "rp1")])
    assert fresh.exit_code == 0, fresh.output
    recipes = json.loads((tmp_path / "rp1" / "run.json").read_text())["systems"]
    assert {
        r["sampling"][m]["repeat_penalty"]
        for r in (recipes["member:llama"], recipes["member:qwen2"])
        for m in r["sampling"]
    } == {1.0}
    wrong = runner.invoke(app, [*args, "--repeat-penalty", "0.5"])
    assert wrong.exit_code == 2 and "--repeat-penalty: Input should be" in wrong.output


def test_a_run_split_with_skip_gives_the_answers_of_the_whole_run(tiny_models, tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    rows = [{"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"} for i in range(3)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    args = ["eval", "--task", "gsm8k", "--data", str(data), "--members", str(tiny_models["llama"])]
    args += ["--systems", "member:llama", "--max-tokens", "6"]

    def answers(*options: str) -> dict[str, str]:
        out = tmp_path / "-".join(options)
        result = runner.invoke(app, [*args, *options, "--out", str(out)])
        assert result.exit_code == 0, result.output
        records = map(json.loads, (out / "results.jsonl").read_text().splitlines())
        return {r["id"]: r["text"] for r in records}

    whole = answers("--limit", "3")
    first, rest = answers("--limit", "1"), answers("--skip", "1", "--limit", "3")
    assert sorted(rest) == ["1", "2"]
    assert {**first, **rest} == whole

    too_far = runner.invoke(app, [*args, "--skip", "3", "--out", str(tmp_path / "none")])
    assert too_far.exit_code == 2
    assert "--skip 3 leaves none of the 3 examples" in too_far.output


def test_eval_rejects_an_unknown_system(tiny_models, tmp_path):
    data = tmp_path / "r.jsonl"
    data.write_text(json.dumps({"id": "a", "prompt": "p", "reference": "r"}) + "\n")
    member, out = str(tiny_models["llama"]), str(tmp_path / "o")
    args = ["eval", "--task", "reference", "--data", str(data), "--members", member]
    result = runner.invoke(app, [*args, "--systems", "vote", "--out", out])
    assert result.exit_code == 2
    assert "unknown systems ['vote']" in result.output


def test_eval_scores_the_instruction_development_set_with_ifevals_checkers(tiny_models, tmp_path):
    out = tmp_path / "out"
    args = [
        "eval",
        "--task",
        "instructions",
        "--data",
        str(ROOT / "benchmarks" / "data" / "instructions-dev.jsonl"),
        "--members",
        f"{tiny_models['llama']},{tiny_models['qwen2']}",
        "--limit",
        "3",
        "--systems",
        "member:llama,specem",
        "--max-tokens",
        "6",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics) == [
        "prompt_level_strict_acc",
        "inst_level_strict_acc",
        "prompt_level_loose_acc",
        "inst_level_loose_acc",
    ]
    for by_system in metrics.values():
        assert set(by_system) == {"member:llama", "specem"}
        assert all(s["n"] == 3 and 0 <= s["score"] <= 1 for s in by_system.values())
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records if r["system"] == "specem") == ["1000", "1001", "1002"]
