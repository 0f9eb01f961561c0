"""Replaying policies on recorded rounds: the recorded policy reproduces its run exactly."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from specem_chain.cli import app
from specem_chain.engine import EngineConfig
from specem_chain.evaluation import replay
from specem_chain.evaluation.run import ResultStore, run
from specem_chain.evaluation.systems import Settings, build_systems
from specem_chain.evaluation.tasks import TASKS, Example
from specem_chain.members import Member

TASK = TASKS["gsm8k"]
EXAMPLES = [Example(str(i), i, f"What is {i} plus {i}?", str(2 * i)) for i in range(3)]


@pytest.fixture(scope="module")
def recorded(tiny_models, tmp_path_factory):
    """A run of three tiny members under two policies, and with two drafts a member a
    round, rounds recorded."""
    folder = tmp_path_factory.mktemp("run")
    members = [Member(source=str(tiny_models[n])) for n in ("llama", "qwen2", "plain")]
    names = ["specem-paper", "specem[learning_rate=3]", "specem[drafts=2]"]
    systems = build_systems(names, members, TASK, Settings(seed=1, max_tokens=24, window=4))
    store = ResultStore(folder / "results.jsonl")
    asyncio.run(run(TASK, EXAMPLES, systems, [], store, Console(file=io.StringIO())))
    return folder


@pytest.mark.parametrize(
    ("system", "policy"),
    [("specem-paper", "paper"), ("specem[learning_rate=3]", "pool"), ("specem[drafts=2]", "pool")],
)
def test_the_recorded_policy_reproduces_every_choice_and_weight(recorded, system, policy):
    answers = replay.load(recorded, system)
    assert len(answers) == 3 and all(a.rounds for a in answers)
    learning_rate = 3.0 if "learning_rate" in system else 1.0
    again = replay.replay(
        answers, EngineConfig(policy=policy, learning_rate=learning_rate).round_policy()
    )
    assert again.rounds > 5
    assert again.agreed == again.weights_agreed == again.rounds


def test_another_policy_is_scored_on_the_same_rounds(recorded):
    answers = replay.load(recorded, "specem-paper")
    other = replay.replay(answers, EngineConfig(policy="peer").round_policy())
    assert other.rounds == replay.replay(answers, EngineConfig().round_policy()).rounds
    assert sum(other.picks.values()) == other.rounds
    assert other.agreed < other.rounds or other.weights_agreed < other.rounds


def test_the_replay_command_prints_a_row_per_policy(recorded):
    result = CliRunner().invoke(
        app,
        [
            "replay",
            str(recorded),
            "--system",
            "specem-paper",
            "--policy",
            "paper",
            "--policy",
            "pool",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("| p")]
    assert [r.split(" | ")[0] for r in rows] == ["| policy", "| paper", "| pool"]
    assert "| 100% |" in rows[1]


def test_replaying_what_was_not_recorded_is_a_clear_error(recorded, tmp_path):
    result = CliRunner().invoke(app, ["replay", str(recorded), "--system", "mbr"])
    assert result.exit_code == 2 and "has no rounds of 'mbr'" in result.output
    result = CliRunner().invoke(app, ["replay", str(tmp_path)])
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())


def test_a_member_that_drafts_twice_offers_two_candidates_a_round(recorded):
    answers = replay.load(recorded, "specem[drafts=2]")
    sizes = [len(r.drafters) for a in answers for r in a.rounds]
    assert max(sizes) > 3  # more candidates than members: some member offered two
    assert all(len(r.drafters) <= 6 for a in answers for r in a.rounds)
