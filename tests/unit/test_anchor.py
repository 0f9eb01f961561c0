"""The anchored policy: its pure rules with plain numbers, and its rounds with scripted
members (no model runs)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from scripted import ScriptedSession, events, likes

from specem_chain import Member, RequestSettings, open_request
from specem_chain.engine import EngineConfig
from specem_chain.engine.policy import (
    AGREE,
    Anchor,
    Pool,
    Verification,
    agreed,
    anchor_seat,
)
from specem_chain.engine.types import Draft, Score
from specem_chain.errors import RequestError


def test_the_anchor_takes_the_likeliest_of_its_drafts_whose_every_token_it_finds_likely():
    units = [10, 10, 20]
    scores = [
        Score(-0.2, 5, AGREE - 0.1),  # likely on the whole, one unlikely token: not taken
        Score(-0.5, 5, -1.0),  # -0.25 a byte
        Score(-0.5, 8, -1.0),  # -0.2 a byte: the likeliest taken
    ]
    assert agreed(scores, units) == 2
    assert agreed(scores[:2], units[:2]) == 1
    assert agreed(scores[:1], units[:1]) is None
    assert agreed([Score(-0.1, 2, AGREE)], [4]) == 0  # the threshold itself is agreement
    assert agreed([Score(-0.1, 2, -1.0)], [4], agree=-0.5) is None


def test_the_anchor_is_the_named_member_else_the_heaviest_else_the_first():
    names = ["a", "b", "c"]
    assert anchor_seat(names, [0.2, 0.5, 0.3], "c") == 2
    assert anchor_seat(names, [0.2, 0.5, 0.3], None) == 1
    assert anchor_seat(names, [1 / 3] * 3, None) == 0
    assert anchor_seat(names, [0.2, 0.5, 0.3], "gone") == 1  # named, but not seated


def verification(means: list[list[float]]) -> Verification:
    """Three seats, each drafted one candidate of 10 bytes and one token a byte."""
    return Verification(
        members=3,
        drafters=(0, 1, 2),
        verifiers=(0, 1, 2),
        means=tuple(tuple(row) for row in means),
        tokens=((10, 10, 10),) * 3,
        units=(10, 10, 10),
    )


def test_the_others_together_never_carry_a_candidate_the_anchor_finds_clearly_less_likely():
    # the anchor (seat 0) prefers its own by 0.1 a byte; the other two strongly prefer 1
    v = verification([[-1.0, -1.1, -3.0], [-5.0, -0.2, -3.0], [-5.0, -0.2, -3.0]])
    weights = [0.2, 0.4, 0.4]
    assert Pool().judge(v, weights, 1).winner == 1
    assert Anchor(anchor=0).judge(v, weights, 1).winner == 0
    # within the margin it is a near tie, and the pool of every verifier decides
    assert Anchor(anchor=0, margin=0.2).judge(v, weights, 1).winner == 1
    # rewards and weights are the pool's
    assert Anchor(anchor=0).judge(v, weights, 1).weights == Pool().judge(v, weights, 1).weights


def test_without_the_anchor_among_the_verifiers_a_round_is_the_pools():
    v = verification([[-1.0, -1.1, -3.0], [-5.0, -0.2, -3.0], [-5.0, -0.2, -3.0]])
    weights = [0.2, 0.4, 0.4]
    dropped = Verification(3, (1, 2), (1, 2), ((-0.2, -3.0),) * 2, ((10, 10),) * 2, (10, 10))
    assert Anchor(anchor=0).judge(dropped, weights, 1) == Pool().judge(dropped, weights, 1)
    assert Anchor(anchor=1).judge(v, weights, 1).winner == 1


def members(sure: bool) -> tuple[ScriptedSession, ScriptedSession]:
    """The anchor drafts "sure" segments and finds them likely (-0.5 a token) or not (-3,
    below AGREE), and the cheap member's "fast" ones far less likely (-6); the cheap
    member likes only its own."""
    mine = -0.5 if sure else -3.0
    big = ScriptedSession(
        "big", [" sure", " sure", Draft(" sure.", 1, True)], likes("sure", mine, -6.0)
    )
    cheap = ScriptedSession(
        "cheap", [" fast", " fast", Draft(" fast.", 1, True)], likes("fast", -0.3, -4.0)
    )
    return big, cheap


async def test_where_the_anchor_is_sure_of_its_draft_no_other_member_drafts_or_scores():
    big, cheap = members(sure=True)
    rounds = await events(big, cheap, policy="anchor")
    assert rounds[-1].finish_reason == "end_of_turn" and len(rounds) == 3
    assert cheap.drafted == 0 and not cheap.scored  # asked nothing: it only reads along
    for e in rounds:
        assert e.winner == "big" and e.verifiers == ("big",) and e.verified
        assert [c.member for c in e.candidates] == ["big"]
        assert set(e.timing.drafting) == {"big"} and set(e.timing.scoring) == {"big"}
        assert e.weights == {"big": 0.5, "cheap": 0.5}  # no votes, no rewards
        assert e.rewards == {"big": None, "cheap": None}
    assert big.accepted == cheap.accepted == [" sure", " sure"]


async def test_where_the_anchor_is_unsure_the_others_draft_and_every_verifier_judges():
    big, cheap = members(sure=False)
    rounds = await events(big, cheap, policy="anchor")
    assert big.drafted == cheap.drafted == len(rounds) == 3
    for e in rounds:
        # the cheap member prefers its own by far, but cannot outvote the anchor
        assert e.winner == "big" and e.verifiers == ("big", "cheap")
        assert [c.member for c in e.candidates] == ["big", "cheap"]
        assert set(e.timing.scoring) == {"big", "cheap"}
    # the anchor scored its own draft, then only the cheap one: never one twice
    assert [[c.text for c in s] for s in big.scored] == [[" sure"], [" fast"]] * 2 + [
        [" sure."],
        [" fast."],
    ]
    assert all(e.scores[0][0] > e.scores[0][1] for e in rounds)  # its row holds both
    assert rounds[0].weights["big"] < 0.5  # the pool's peer rewards moved the weights


async def test_on_a_near_tie_the_weighted_vote_of_every_verifier_decides():
    big = ScriptedSession("big", [Draft(" sure.", 1, True)], lambda c: -3.0)  # torn
    cheap = ScriptedSession("cheap", [Draft(" fast.", 1, True)], likes("fast", -0.3, -4.0))
    [e] = await events(big, cheap, policy="anchor")
    assert e.verifiers == ("big", "cheap") and e.winner == "cheap"


async def test_a_named_anchor_in_any_seat_and_without_another_drafter_a_plain_round():
    big, cheap = members(sure=True)
    rounds = await events(cheap, big, policy="anchor", anchor="big")
    assert cheap.drafted == 0 and all(e.verifiers == ("big",) for e in rounds)
    alone = ScriptedSession("alone", [Draft(" one.", 1, True)])
    [only] = await events(alone, policy="anchor")
    assert only.winner == "alone" and not only.verified


async def test_an_anchor_that_is_dropped_leaves_plain_rounds_to_the_others():
    big, cheap = members(sure=False)
    big.fail_after = 2  # a draft and a score, then unavailable
    rounds = await events(big, cheap, policy="anchor")
    assert rounds[-1].finish_reason == "end_of_turn"
    assert rounds[0].dropped == {"big": "connection refused"}
    assert all(e.winner == "cheap" for e in rounds)


def test_an_anchor_needs_its_policy_and_must_be_a_member_before_any_member_runs():
    with pytest.raises(ValidationError, match="needs policy='anchor'"):
        EngineConfig(anchor="big")
    with pytest.raises(ValidationError, match="anchor"):
        RequestSettings(policy="anchor", anchor="")
    settings = RequestSettings(policy="anchor", anchor="nobody")
    messages = [{"role": "user", "content": "Hi"}]
    with pytest.raises(RequestError, match=r"anchor='nobody' is not a member.*smollm2"):
        open_request([Member(source="smollm2")], messages, settings)
