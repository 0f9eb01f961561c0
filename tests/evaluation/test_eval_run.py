"""The resumable runner: finished (system, example) results are never computed again."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from rich.console import Console

from specem_chain.evaluation.run import ResultStore, ResumeError, open_store, ordered, run
from specem_chain.evaluation.systems import (
    MBR,
    Ensemble,
    Output,
    Settings,
    Solos,
    Vote,
    build_systems,
    recipes,
    split_names,
    variant,
)
from specem_chain.evaluation.tasks import TASKS, Example
from specem_chain.members import Member, Sampling

TASK = TASKS["gsm8k"]
EXAMPLES = [Example(str(i), i, f"question {i}", str(i)) for i in range(3)]


class Recording:
    """A system that answers "#### <example index>" (+ ``offset``) and records its calls."""

    def __init__(self, name: str, *, needs_solos: bool = False, offset: int = 0) -> None:
        self.name = name
        self.needs_solos = needs_solos
        self.offset = offset
        self.calls: list[tuple[str, dict[str, str]]] = []

    async def answer(self, example: Example, solos: Solos) -> Output:
        self.calls.append((example.id, {k: o.text for k, o in solos.items()}))
        return Output(f"#### {example.index + self.offset}", details={"by": self.name})


def go(store, systems, members=()) -> None:
    quiet = Console(file=io.StringIO())
    asyncio.run(run(TASK, EXAMPLES, systems, members, store, quiet))


def test_a_fresh_run_answers_and_scores_everything(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    right, wrong = Recording("right"), Recording("wrong", offset=1)
    go(store, [right, wrong])
    assert [c[0] for c in right.calls] == ["0", "1", "2"]
    lines = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 6
    assert {(r["system"], r["id"]) for r in lines} == {
        (s, e.id) for s in ("right", "wrong") for e in EXAMPLES
    }
    assert all(r["metrics"] == {"exact_match": 1.0} for r in lines if r["system"] == "right")
    assert all(r["metrics"] == {"exact_match": 0.0} for r in lines if r["system"] == "wrong")
    assert lines[0]["details"] == {"by": "right"} and lines[0]["finished"] is True


def test_a_restart_skips_finished_results(tmp_path):
    path = tmp_path / "results.jsonl"
    first = ResultStore(path)
    for record in (("a", "0"), ("b", "0"), ("a", "1")):
        first.add({"system": record[0], "id": record[1], "text": "old", "metrics": {}})
    a, b = Recording("a"), Recording("b")
    go(ResultStore(path), [a, b])
    assert [c[0] for c in a.calls] == ["2"]
    assert [c[0] for c in b.calls] == ["1", "2"]
    again = Recording("a")
    go(ResultStore(path), [again, Recording("b")])
    assert again.calls == []
    assert len(path.read_text().splitlines()) == 6


def test_a_line_cut_off_by_a_kill_is_dropped_and_redone(tmp_path):
    path = tmp_path / "results.jsonl"
    whole = json.dumps({"system": "a", "id": "0", "text": "x", "metrics": {}})
    path.write_text(whole + "\n" + '{"system": "a", "id": "1", "te')
    a = Recording("a")
    go(ResultStore(path), [a])
    assert [c[0] for c in a.calls] == ["1", "2"]
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["0", "1", "2"]


def test_baselines_get_the_solo_answers_which_run_first_once(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    store.add({"system": "member:x", "id": "0", "text": "#### 5", "finished": True})
    x, y = Recording("member:x"), Recording("member:y", offset=1)
    chooser = Recording("chooser", needs_solos=True)
    go(store, [chooser, y], members=[x, y])  # member:x is not requested but needed
    assert [c[0] for c in x.calls] == ["1", "2"]
    assert [c[0] for c in y.calls] == ["0", "1", "2"]  # not twice, though requested too
    assert chooser.calls[0] == ("0", {"x": "#### 5", "y": "#### 1"})
    assert chooser.calls[2] == ("2", {"x": "#### 2", "y": "#### 3"})


def test_the_manifest_guards_against_mixing_settings(tmp_path):
    open_store(tmp_path, {"task": "gsm8k", "seed": 0}, {})
    assert open_store(tmp_path, {"task": "gsm8k", "seed": 0}, {}).records == {}
    with pytest.raises(ResumeError, match="seed differ"):
        open_store(tmp_path, {"task": "gsm8k", "seed": 1}, {})


def test_a_system_resumes_only_with_the_recipe_its_answers_were_made_with(tmp_path):
    manifest = {"task": "gsm8k", "seed": 0}
    store = open_store(tmp_path, manifest, {"specem": {"policy": "paper"}})
    store.add({"system": "specem", "id": "0", "text": "x", "metrics": {}})
    # same recipe: resumes; a new system adds its own recipe beside it
    open_store(tmp_path, manifest, {"specem": {"policy": "paper"}, "rank": {}})
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved == {**manifest, "systems": {"specem": {"policy": "paper"}, "rank": {}}}
    # a default that changed under the same name is refused, and run.json is untouched
    with pytest.raises(ResumeError, match=r"answers of specem made with other settings \(policy"):
        open_store(tmp_path, manifest, {"specem": {"policy": "pool"}})
    assert json.loads((tmp_path / "run.json").read_text()) == saved
    # a system not named now keeps its recipe
    open_store(tmp_path, manifest, {"rank": {}})
    assert json.loads((tmp_path / "run.json").read_text()) == saved


def test_answers_without_a_recorded_recipe_are_not_resumed(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"task": "gsm8k"}))  # made before recipes
    ResultStore(tmp_path / "results.jsonl").add(
        {"system": "specem", "id": "0", "text": "x", "metrics": {}}
    )
    with pytest.raises(ResumeError, match="not the settings they were made with"):
        open_store(tmp_path, {"task": "gsm8k"}, {"specem": {"policy": "pool"}})
    open_store(tmp_path, {"task": "gsm8k"}, {"rank": {}})  # a system with no answers starts


def test_recipes_name_what_changes_an_answer():
    a, b = Member(source="a.gguf"), Member(source="b.gguf")
    settings = Settings()
    pair = Ensemble("specem[policy=pool]", [a, b], settings, policy="pool")
    assert pair.recipe["policy"] == "pool" and pair.recipe["feedback"] is False
    assert set(pair.recipe["sampling"]) == {a.label, b.label}
    assert "seed" not in pair.recipe and "window" not in pair.recipe
    tuned = Ensemble("t", [a, b], settings, repeat_penalty=1.3)
    assert {s["repeat_penalty"] for s in tuned.recipe["sampling"].values()} == {1.3}
    # a member alone: the loop's rules between members do not change its answer
    alone, other = Ensemble("member:a", [a], settings), Ensemble("x", [a], settings, policy="peer")
    assert (
        alone.recipe
        == other.recipe
        == {"sampling": {a.label: a.sampling.model_dump()}, "run_on": False}
    )
    assert Ensemble("x", [a], settings, run_on=True).recipe["run_on"] is True
    # a loop redraft changes a member's answer alone: its rounds may not accept their draft
    guarded = Ensemble("specem[loop_penalty=1.1]", [a], settings, loop_penalty=1.1)
    assert not guarded.alone and guarded.recipe["sampling"][a.label]["loop_penalty"] == 1.1
    # one member drafting twice a round is an ensemble of its drafts: the rules count
    twice = Ensemble("specem[drafts=2]", [a], settings, drafts=2)
    assert twice.recipe["policy"] == "pool" and twice.recipe["sampling"][a.label]["drafts"] == 2
    assert MBR().recipe == Vote(TASK).recipe == {}


def test_a_member_alone_drafts_once_a_round_whatever_its_ensemble_does():
    qwen = Member(source="q.gguf", sampling=Sampling(drafts=2))
    alone, default = build_systems(["member:q", "specem"], [qwen], TASK, Settings())
    assert alone.recipe["sampling"]["q"]["drafts"] == 1
    assert default.recipe["sampling"]["q"]["drafts"] == 2
    assert alone.alone and not default.alone  # only an ensemble's answers record rounds


def solos(*texts: str) -> dict[str, Output]:
    return {f"m{i}": Output(t) for i, t in enumerate(texts)}


def test_vote_takes_the_majority_and_breaks_ties_by_member_order():
    vote = Vote(TASK)
    example = EXAMPLES[0]
    three = asyncio.run(vote.answer(example, solos("#### 4", "so 7", "The answer is 7.")))
    assert three.text == "so 7" and three.details["chosen"] == "m1"
    tie = asyncio.run(vote.answer(example, solos("no number", "#### 3", "#### 4")))
    assert tie.details["chosen"] == "m1"
    none = asyncio.run(vote.answer(example, solos("none", "nothing")))
    assert none.details["chosen"] == "m0"


def test_mbr_picks_the_answer_closest_to_the_others():
    texts = ("the sky is blue today", "the sky was grey", "the sky is blue")
    result = asyncio.run(MBR().answer(EXAMPLES[0], solos(*texts)))
    assert result.details["chosen"] == "m2"
    # mean ROUGE-L F1 to the others: m0 (8/9 + 4/9) / 2, m1 (4/9 + 1/2) / 2, m2 (8/9 + 1/2) / 2
    assert result.details["scores"] == pytest.approx([2 / 3, 17 / 36, 25 / 36])


def test_variant_names_carry_their_settings():
    assert split_names("member:a, specem[policy=pool,gate=0.5], rank") == [
        "member:a",
        "specem[policy=pool,gate=0.5]",
        "rank",
    ]
    assert variant("specem[policy=pool, gate=0.5, feedback=task, run_on=true]") == {
        "policy": "pool",
        "gate": 0.5,
        "run_on": True,
        "feedback": True,
    }
    assert variant("specem-no-feedback") == {"learning_rate": 0.0}
    assert variant("rank") is None
    with pytest.raises(ValueError, match="window"):
        variant("specem[window=0]")
    with pytest.raises(ValueError, match=r"unknown settings \['colour'\]"):
        variant("specem[colour=red]")
    with pytest.raises(ValueError, match="feedback is 'task' or 'none'"):
        variant("specem[feedback=forever]")


def test_the_run_order_is_the_files_or_a_seeded_shuffle():
    examples = [Example(str(i), i, "q", "1") for i in range(10)]
    assert ordered(examples, "stored") == examples
    shuffled = ordered(examples, "shuffle:1")
    assert shuffled == ordered(examples, "shuffle:1") != examples
    assert sorted(e.index for e in shuffled) == list(range(10))
    with pytest.raises(ValueError, match="'stored' or 'shuffle:N'"):
        ordered(examples, "random")


def test_task_feedback_carries_over_examples_and_resumes_from_the_store(tmp_path, tiny_models):
    members = [Member(source=str(tiny_models[n])) for n in ("llama", "qwen2")]
    settings = Settings(seed=0, max_tokens=12)
    name = "specem[policy=pool,feedback=task,learning_rate=4]"

    def system() -> Ensemble:
        [built] = build_systems([name], members, TASK, settings)
        assert isinstance(built, Ensemble) and built.feedback is not None
        return built

    store = ResultStore(tmp_path / "results.jsonl")
    whole = system()
    go(store, [whole])
    records = [store.get(name, e.id) for e in EXAMPLES]
    assert records[1]["details"]["start_weights"] != records[0]["details"]["start_weights"]
    rounds = [json.loads(x) for x in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rounds] == ["0", "1", "2"] and "rounds" not in records[0]["details"]

    # a run stopped after two examples takes the task's weights back when resumed
    partial = ResultStore(tmp_path / "partial" / "results.jsonl")
    (tmp_path / "partial").mkdir()
    for record in records[:2]:
        partial.add(json.loads(json.dumps(record)))
    resumed = system()
    go(partial, [resumed])
    last = partial.get(name, "2")
    assert last["details"]["start_weights"] == records[2]["details"]["start_weights"]
    assert last["text"] == records[2]["text"]


def test_run_json_records_the_members_alone_only_when_they_answer():
    a, b = Member(source="a.gguf"), Member(source="b.gguf")
    solo = build_systems(["member:a", "member:b"], [a, b], TASK, Settings())
    pair = build_systems(["specem"], [a, b], TASK, Settings())
    assert list(recipes(pair, solo)) == ["specem"]
    with_vote = build_systems(["specem", "vote"], [a, b], TASK, Settings())
    assert list(recipes(with_vote, solo)) == ["member:a", "member:b", "specem", "vote"]
