"""The loop drops a member whose session is unavailable and goes on with the others."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from scripted import ScriptedSession, events, likes

from specem_chain.engine.types import Draft, Score, Segment
from specem_chain.errors import EnsembleError


def member(name: str, fail_after: int | None = None) -> ScriptedSession:
    """Drafts its name and the answer's length so far; ends its turn after three rounds;
    scores a candidate with its name highest."""
    session = ScriptedSession(name, scorer=likes(name, -1.0, -2.0), fail_after=fail_after)
    session.drafts = [Draft(f" {name}{n}", 1, finished=n >= 3) for n in range(4)]
    return session


async def test_a_failing_member_is_dropped_and_the_answer_completes() -> None:
    a, b, c = member("a"), member("b", fail_after=3), member("c")
    rounds = await events(a, b, c)
    assert rounds[-1].finish_reason == "end_of_turn"
    dropped = [e.dropped for e in rounds if e.dropped]
    assert dropped == [{"b": "connection refused"}]
    after = rounds[[bool(e.dropped) for e in rounds].index(True) + 1 :]
    assert after and all("b" not in e.verifiers for e in after)
    assert all(c.member != "b" for e in after for c in e.candidates)
    assert rounds[-1].weights["b"] == 0.0
    assert sum(rounds[-1].weights.values()) == pytest.approx(1.0)
    assert b.calls == 4  # it was never called again after failing
    assert a.accepted == c.accepted


async def test_below_min_members_the_request_fails_with_the_reason() -> None:
    a, b = member("a"), member("b", fail_after=0)
    with pytest.raises(EnsembleError, match=r"min_members=2.*b: connection refused"):
        await events(a, b, min_members=2)


async def test_an_ensemble_smaller_than_min_members_fails_at_once() -> None:
    with pytest.raises(EnsembleError, match="fewer than min_members=3"):
        await events(member("a"), min_members=3)


async def test_other_errors_are_not_swallowed() -> None:
    class Broken(ScriptedSession):
        async def score(self, candidates: Sequence[Segment], scoring: str) -> list[Score]:
            raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        await events(member("a"), Broken("b"))


async def test_a_resting_drafter_drafts_again_when_the_only_drafter_is_dropped() -> None:
    # b is gated out (0.2 < 0.5 / 2); once a is dropped, the heaviest live drafter drafts
    a, b = member("a", fail_after=2), member("b")
    rounds = await events(a, b, weights=[0.8, 0.2], gate=0.5)
    drop = [bool(e.dropped) for e in rounds].index(True)
    assert all(e.resting == ("b",) for e in rounds[:drop])
    assert all(c.member == "a" for e in rounds[:drop] for c in e.candidates)
    assert b.drafted > 0 and rounds[-1].finish_reason == "end_of_turn"
    assert all(c.member == "b" for e in rounds[drop + 1 :] for c in e.candidates)
    assert not any(e.resting for e in rounds[drop + 1 :])
