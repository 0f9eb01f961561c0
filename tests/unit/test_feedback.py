"""Task-level feedback: weights that persist across a task's requests, decay toward
uniform, serialise, stay apart between Feedback objects, and gate a weak drafter; and the
exit, which rests a drafter whose weight falls within one request."""

from __future__ import annotations

import asyncio
import itertools
import math
from pathlib import Path

import pytest
from scripted import ScriptedSession, likes, seat

from specem_chain.engine import EngineConfig, run_rounds
from specem_chain.engine.types import Draft
from specem_chain.feedback import Feedback


def test_a_new_task_starts_uniform():
    assert Feedback().weights(["a", "b"]) == {"a": 0.5, "b": 0.5}


def test_an_answers_final_weights_carry_over_pulled_toward_uniform():
    feedback = Feedback(decay=0.25)
    feedback.record({"a": 0.8, "b": 0.2})
    weights = feedback.weights(["a", "b"])
    # log-odds 0.75 * log(4)
    assert math.log(weights["a"] / weights["b"]) == pytest.approx(0.75 * math.log(4))
    assert feedback.answers == 1


def test_without_new_evidence_the_weights_decay_back_to_uniform():
    feedback = Feedback(decay=0.5)
    feedback.record({"a": 0.9, "b": 0.1})
    gaps = []
    for _ in range(6):
        weights = feedback.weights(["a", "b"])
        gaps.append(weights["a"] - weights["b"])
        feedback.record(weights)  # an answer in which nothing moved them
    assert all(later < earlier for earlier, later in itertools.pairwise(gaps))
    assert gaps[-1] < 0.02


def test_a_member_the_task_has_not_seen_starts_at_the_mean():
    feedback = Feedback(decay=0.0)
    feedback.record({"a": 0.75, "b": 0.25})
    weights = feedback.weights(["a", "b", "c"])
    assert weights["a"] / weights["c"] == pytest.approx(math.sqrt(3))
    assert weights["c"] / weights["b"] == pytest.approx(math.sqrt(3))


def test_a_dropped_member_keeps_its_task_weight():
    feedback = Feedback(decay=0.0)
    feedback.record({"a": 0.6, "b": 0.4})
    feedback.record({"a": 1.0, "b": 0.0}, dropped=["b"])
    assert feedback.weights(["a", "b"]) == pytest.approx({"a": 0.6, "b": 0.4})


def test_feedback_objects_are_isolated():
    one, two = Feedback(), Feedback()
    one.record({"a": 0.9, "b": 0.1})
    assert two.weights(["a", "b"]) == {"a": 0.5, "b": 0.5}


def test_feedback_saves_and_loads(tmp_path):
    feedback = Feedback(decay=0.3)
    feedback.record({"a": 0.7, "b": 0.3})
    path = tmp_path / "task.json"
    feedback.save(path)
    loaded = Feedback.load(path)
    assert loaded.weights(["a", "b"]) == feedback.weights(["a", "b"])
    assert (loaded.decay, loaded.answers) == (0.3, 1)


def test_a_save_cut_short_leaves_the_saved_weights(tmp_path, monkeypatch):
    path = tmp_path / "task.json"
    feedback = Feedback()
    feedback.record({"a": 0.7, "b": 0.3})
    feedback.save(path)
    saved = path.read_text()

    def disk_full(self, text, encoding=None):
        self.open("w", encoding=encoding).write(text[:5])
        raise OSError("No space left on device")

    feedback.record({"a": 0.1, "b": 0.9})
    monkeypatch.setattr(Path, "write_text", disk_full)
    with pytest.raises(OSError, match="No space"):
        feedback.save(path)
    assert path.read_text() == saved
    assert [p.name for p in tmp_path.iterdir()] == ["task.json"]


def test_bad_feedback_files_and_settings_get_clear_errors(tmp_path):
    path = tmp_path / "task.json"
    path.write_text('{"decay": 0.2}')
    with pytest.raises(ValueError, match="not a saved Feedback"):
        Feedback.load(path)
    with pytest.raises(ValueError, match="cannot read feedback"):
        Feedback.load(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="decay must be between 0 and 1"):
        Feedback(decay=1.5)


async def test_concurrent_records_all_land():
    feedback = Feedback(decay=0.0)

    async def record(share: float) -> None:
        await asyncio.to_thread(feedback.record, {"a": share, "b": 1 - share})

    await asyncio.gather(*(record(0.5 + i / 100) for i in range(20)))
    assert feedback.answers == 20


# -- the gate ------------------------------------------------------------------------------


def members() -> tuple[ScriptedSession, ScriptedSession]:
    """A strong member whose drafts both prefer, and a weak one."""
    strong = ScriptedSession("strong", [" good"] * 5 + [Draft("", 1, True)], likes("good"))
    weak = ScriptedSession("weak", [" bad"] * 9, likes("good"))
    return strong, weak


async def answer(weights, **settings):
    strong, weak = members()
    config = EngineConfig(seed=0, policy="pool", **settings)
    rounds = [e async for e in run_rounds([seat(strong), seat(weak)], config, None, weights)]
    return rounds, weak


async def test_the_gate_rests_a_drafter_whose_starting_weight_is_below_it():
    rounds, weak = await answer([0.8, 0.2], gate=0.5)  # 0.2 < 0.5 / 2
    assert weak.drafted == 0
    assert all(e.resting == ("weak",) for e in rounds)
    assert all(e.verifiers == ("strong", "weak") for e in rounds)  # it still verifies
    rounds, weak = await answer([0.7, 0.3], gate=0.5)
    assert weak.drafted > 0 and not any(e.resting for e in rounds)


async def test_the_default_gate_acts_only_on_a_tasks_weights():
    rounds, weak = await answer(None)  # a request of its own starts uniform: nobody rests
    assert weak.drafted > 0 and not any(e.resting for e in rounds)
    rounds, weak = await answer([0.65, 0.35])  # 0.35 < 0.8 / 2 (gate=0.8, the default)
    assert weak.drafted == 0 and all(e.resting == ("weak",) for e in rounds)
    rounds, weak = await answer([0.65, 0.35], gate=0.0)
    assert weak.drafted > 0


async def test_the_gate_never_rests_every_drafter():
    rounds, weak = await answer([0.1, 0.9], gate=0.99)  # both below 0.99 / 2
    assert weak.drafted > 0 and all(e.resting == ("strong",) for e in rounds)


async def test_a_gated_member_is_readmitted_as_the_task_weights_decay():
    feedback = Feedback(decay=0.5)
    readmitted = []
    for _ in range(8):
        start = feedback.weights(["strong", "weak"])
        rounds, weak = await answer(list(start.values()), gate=0.5, learning_rate=2.0)
        readmitted.append(weak.drafted > 0)
        feedback.record(rounds[-1].weights)
    assert readmitted[0] and not all(readmitted)  # rested at the start of later answers
    rested = readmitted.index(False)
    assert any(readmitted[rested:])  # and drafting again later


async def test_the_exit_rests_a_drafter_once_its_weight_falls_below_it():
    rounds, weak = await answer(None, exit=0.5, learning_rate=4.0)
    out = [e.round for e in rounds if e.resting == ("weak",)]
    assert out and out == list(range(out[0], len(rounds) + 1))  # out for the rest of it
    assert rounds[out[0] - 2].weights["weak"] < 0.25 <= rounds[out[0] - 3].weights["weak"]
    assert weak.drafted == out[0] - 1
    assert all(e.verifiers == ("strong", "weak") for e in rounds)  # it still verifies
    rounds, weak = await answer(None, learning_rate=4.0)  # exit=0: it drafts to the end
    assert weak.drafted == len(rounds) and not any(e.resting for e in rounds)


async def test_same_seed_and_same_starting_weights_give_the_same_answer():
    first, _ = await answer([0.7, 0.3], gate=0.5)
    again, _ = await answer([0.7, 0.3], gate=0.5)
    assert [(e.segment, e.winner, e.weights) for e in first] == [
        (e.segment, e.winner, e.weights) for e in again
    ]
