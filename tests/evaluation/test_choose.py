"""``specem eval --choose``'s rule on plain numbers: the anchor, who helps it, the
recommendation, and the document and table it writes."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specem_chain.evaluation.choose import (
    MemberAlone,
    choice,
    command,
    decide,
    markdown,
)
from specem_chain.evaluation.choose import reason as choice_reason
from specem_chain.evaluation.cli import rerun_options
from specem_chain.evaluation.summary import Cost, Paired, Score
from specem_chain.request import RequestSettings


def test_the_anchor_scores_best_and_a_member_within_90_percent_of_it_helps():
    decision = decide(
        [MemberAlone("a", 0.5, 2.0), MemberAlone("b", 0.46, 1.0), MemberAlone("c", 0.3, 0.5)]
    )
    assert decision.anchor == "a"
    assert decision.helpers == ("b",)
    assert decision.left_out == ("c",)
    assert decision.shares == {"a": 1.0, "b": pytest.approx(0.92), "c": pytest.approx(0.6)}
    assert decision.members == ("a", "b")
    assert decision.system == "specem[policy=anchor,anchor=a]"


def test_a_tie_goes_to_the_cheaper_member_then_to_the_one_named_first():
    cheaper = decide([MemberAlone("a", 0.5, 3.0), MemberAlone("b", 0.5, 1.0)])
    assert (cheaper.anchor, cheaper.helpers) == ("b", ("a",))
    same = decide([MemberAlone("a", 0.5, 1.0), MemberAlone("b", 0.5, 1.0)])
    assert (same.anchor, same.helpers) == ("a", ("b",))


def test_with_no_member_close_enough_nor_cheap_enough_the_anchor_runs_alone():
    decision = decide(
        [MemberAlone("a", 0.7, 1.5), MemberAlone("b", 0.8, 2.0), MemberAlone("c", 0.1, 3)]
    )
    assert decision.anchor == "b"
    assert decision.helpers == () and decision.drafter is None
    assert decision.left_out == ("a", "c")  # 0.7 is 87.5% of 0.8; 1.5 s is 75% of 2 s
    assert decision.members == ("b",)
    assert decision.system == "member:b"
    assert command(["--task", "gsm8k"], {"a": "a", "b": "b", "c": "c"}, decision) is None


def test_a_member_left_out_at_half_the_anchors_time_or_less_drafts_for_it():
    candidates = [
        MemberAlone("a", 0.3, 1.0),
        MemberAlone("b", 0.8, 2.0),
        MemberAlone("c", 0.1, 0.5),
        MemberAlone("d", 0.6, 1.5),
    ]
    decision = decide(candidates)
    assert decision.anchor == "b" and decision.helpers == ()
    assert decision.drafter == "a"  # the best of those at 2/3 of the time or less (a, c)
    assert decision.left_out == ("c", "d")
    assert decision.members == ("b", "a")
    assert decision.system == "specem[policy=anchor,anchor=b]"
    assert "a answers in at most 67% of b's time" in choice_reason(decision)
    # a helper as cheap drafts itself: no drafter beside it
    helped = decide(
        [MemberAlone("a", 0.75, 0.9), MemberAlone("b", 0.8, 2.0), MemberAlone("c", 0.1, 0.5)]
    )
    assert helped.helpers == ("a",) and helped.drafter is None
    assert helped.left_out == ("c",)


def test_when_every_member_helps_the_cheapest_helper_comes_first():
    decision = decide(
        [MemberAlone("a", 0.5, 5.0), MemberAlone("b", 0.48, 3.0), MemberAlone("c", 0.47, 1)]
    )
    assert decision.anchor == "a"
    assert decision.helpers == ("c", "b")
    assert decision.left_out == ()
    assert decision.members == ("a", "c", "b")


def test_an_anchor_that_scores_0_leaves_every_other_member_out():
    decision = decide([MemberAlone("a", 0.0, 2.0), MemberAlone("b", 0.0, 1.0)])
    assert decision.anchor == "b"  # the cheaper
    assert decision.helpers == ()
    assert decision.left_out == ("a",)
    assert decision.shares == {"a": None, "b": None}
    assert decision.system == "member:b"


@pytest.mark.parametrize(
    ("anchor", "member", "helps"),
    [
        (10 / 32, 9 / 32, True),  # exactly 90%, in floating point
        (0.9, 0.81, True),  # exactly 90% again
        (0.5, 0.449, False),  # just under
        (0.2, 0.15, False),  # 5 points apart, but 75%: the rule is relative
        (0.9, 0.82, True),  # 8 points apart, 91%
    ],
)
def test_the_90_percent_edge_is_relative_to_the_anchors_score(anchor, member, helps):
    decision = decide([MemberAlone("anchor", anchor, 1.0), MemberAlone("member", member, 1.0)])
    assert decision.anchor == "anchor"
    assert (decision.helpers == ("member",)) is helps


def test_choosing_needs_two_members():
    with pytest.raises(ValueError, match="at least two"):
        decide([MemberAlone("a", 0.5, 1.0)])


candidates = st.lists(
    st.tuples(st.integers(0, 32), st.sampled_from([0.5, 1.0, 2.0, 4.0])), min_size=2, max_size=5
).map(lambda rows: [MemberAlone(f"m{i}", k / 32, s) for i, (k, s) in enumerate(rows)])


@given(candidates)
def test_the_rule_against_the_spec_written_out(members):
    decision = decide(members)
    by_name = {m.name: m for m in members}
    anchor = by_name[decision.anchor]
    best = max(m.score for m in members)
    assert anchor.score == best
    assert anchor.seconds == min(m.seconds for m in members if m.score == best)
    assert anchor == next(m for m in members if m.score == best and m.seconds == anchor.seconds)
    others = [m for m in members if m is not anchor]
    # in whole 32nds, so the edge needs no floating point: k >= 90% of the anchor's k
    k = {m.name: round(32 * m.score) for m in members}
    close = [m.name for m in others if best > 0 and 10 * k[m.name] >= 9 * k[anchor.name]]
    assert sorted(decision.helpers) == sorted(close)
    cheap = [m for m in others if m.name not in close and 3 * m.seconds <= 2 * anchor.seconds]
    cheap_helper = any(3 * by_name[h].seconds <= 2 * anchor.seconds for h in close)
    best = min(cheap, key=lambda m: (-m.score, m.seconds)) if cheap else None
    drafter = None if cheap_helper or best is None else best.name
    assert decision.drafter == drafter
    assert list(decision.left_out) == [
        m.name for m in others if m.name not in close and m.name != drafter
    ]
    seconds = [by_name[h].seconds for h in decision.helpers]
    assert seconds == sorted(seconds)
    assert decision.members[0] == anchor.name
    assert decision.system == (
        f"specem[policy=anchor,anchor={anchor.name}]"
        if close or drafter
        else f"member:{anchor.name}"
    )


def test_the_command_runs_the_ensemble_beside_the_anchor_alone_with_the_members_as_spelled():
    decision = decide([MemberAlone("big-model", 0.5, 2.0), MemberAlone("small", 0.47, 1.0)])
    options = ["--task", "gsm8k", "--data", "my data.jsonl", "--limit", "32", "--out", "o-ens"]
    spelled = {"big-model": "/models/big-model", "small": "smollm2"}
    words = shlex.split(command(options, spelled, decision))
    assert words[:2] == ["specem", "eval"]
    assert words[2:10] == options
    assert words[10:] == [
        "--members",
        "/models/big-model,smollm2",
        "--systems",
        "member:big-model,specem[policy=anchor,anchor=big-model]",
    ]


def score(mean: float, n: int = 4) -> Score:
    return Score(score=mean, ci_low=max(mean - 0.2, 0), ci_high=min(mean + 0.2, 1), n=n)


def test_the_document_and_table_give_every_members_verdict_and_evidence():
    # neither a nor c answers in two thirds of b's time: no drafter
    decision = decide(
        [MemberAlone("a", 0.5, 3.0), MemberAlone("b", 0.75, 4.0), MemberAlone("c", 0, 3)]
    )
    summary = {
        "exact_match": {"member:a": score(0.5), "member:b": score(0.75), "member:c": score(0)}
    }
    paired = {
        "member:a": Paired(
            better=0, worse=1, n=4, difference=-0.25, ci_low=-0.75, ci_high=0.0, p_value=1.0
        ),
        "member:c": Paired(
            better=0, worse=3, n=4, difference=-0.75, ci_low=-1.0, ci_high=-0.5, p_value=0.25
        ),
    }
    cost = {
        name: Cost(median_seconds=seconds, at_limit=0, n=4)
        for name, seconds in (("member:a", 3.0), ("member:b", 4.0), ("member:c", 3.0))
    }
    document = choice(decision, "exact_match", summary, paired, cost, None)
    assert json.loads(json.dumps(document)) == document
    assert document["anchor"] == "b"
    members = document["members"]
    assert [m["verdict"] for m in members.values()] == ["leave out", "anchor", "leave out"]
    assert members["a"]["share_of_anchor"] == pytest.approx(2 / 3)
    assert members["a"]["paired_with_anchor"] == paired["member:a"]
    assert members["b"]["paired_with_anchor"] is None
    assert [m["seconds_ratio"] for m in members.values()] == [0.75, 1.0, 0.75]
    assert document["recommendation"]["system"] == "member:b"
    assert document["recommendation"]["members"] == ["b"]
    assert "run b alone" in document["recommendation"]["reason"]

    table = markdown(document)
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()[2:5]}
    assert list(rows) == ["a", "b", "c"]
    assert (
        "| leave out | 0.500 [0.300, 0.700] | 66.7% | 0 / 1 | -0.250 [-0.750, +0.000] |"
        in rows["a"]
    )
    assert rows["b"].endswith("| 4.0 | 1.00x |")
    assert "Recommended: `member:b` with `b`" in table
    assert "```bash" not in table
    assert "2410.03777" in table


def test_a_recommended_ensemble_comes_with_its_command():
    decision = decide([MemberAlone("a", 0.5, 2.0), MemberAlone("b", 0.45, 1.0)])
    summary = {"rougeL": {"member:a": score(0.5), "member:b": score(0.45)}}
    paired = {
        "member:b": Paired(
            better=1, worse=2, n=4, difference=-0.05, ci_low=-0.2, ci_high=0.1, p_value=None
        )
    }
    cost = {s: Cost(median_seconds=1.0, at_limit=0, n=4) for s in ("member:a", "member:b")}
    rerun = command(["--task", "reference"], {"a": "a", "b": "b"}, decision)
    document = choice(decision, "rougeL", summary, paired, cost, rerun)
    assert [m["verdict"] for m in document["members"].values()] == ["anchor", "helps"]
    assert document["recommendation"]["members"] == ["a", "b"]
    table = markdown(document)
    assert (
        "Recommended: `specem[policy=anchor,anchor=a]` with `a`, `b`: b scored at least 90%"
        in table
    )
    assert f"```bash\n{rerun}\n```" in table
    assert (
        "| b | helps | 0.450 [0.250, 0.650] | 90.0% | 1 / 2 | -0.050 [-0.200, +0.100] | |" in table
    )


def test_the_command_repeats_the_runs_examples_and_every_setting_not_left_at_its_default():
    settings = RequestSettings(max_tokens=24, temperature=0.0)
    options = rerun_options("gsm8k", Path("d.jsonl"), 32, 0, 0, "stored", "auto", settings)
    assert options[:6] == ["--task", "gsm8k", "--data", "d.jsonl", "--limit", "32"]
    assert options[6:] == ["--max-tokens", "24", "--temperature", "0.0"]
    more = rerun_options("gsm8k", Path("d"), None, 5, 3, "shuffle:1", "llamacpp", RequestSettings())
    assert more[4:] == [
        "--skip",
        "5",
        "--seed",
        "3",
        "--order",
        "shuffle:1",
        "--backend",
        "llamacpp",
    ]
