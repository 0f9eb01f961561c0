"""The loop drops a member whose session is unavailable and goes on with the others."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from specem_chain.backends.base import Draft, Segment
from specem_chain.engine import EngineConfig, Seat, run_rounds
from specem_chain.errors import EnsembleError, MemberUnavailable
from specem_chain.members import Member, Sampling


class FakeSession:
    """Drafts fixed words; fails (unavailable) from call number ``fail_after`` on."""

    prompt_tokens = 3

    def __init__(self, name: str, fail_after: int | None = None) -> None:
        self.name = name
        self.fail_after = fail_after
        self.calls = 0
        self.accepted: list[str] = []

    def _tick(self) -> None:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise MemberUnavailable(self.name, "connection refused")

    async def draft(self, window: int, sampling: Sampling, seed: int) -> Draft:
        self._tick()
        done = len(self.accepted) >= 3
        return Draft(f" {self.name}{len(self.accepted)}", 1, finished=done)

    async def score(self, candidates: Sequence[Segment], scoring: str) -> list[float]:
        self._tick()
        return [-1.0 if self.name in c.text else -2.0 for c in candidates]

    async def accept(self, segment: Segment) -> int:
        self._tick()
        self.accepted.append(segment.text)
        return 1

    async def aclose(self) -> None:
        pass


def seats(*sessions: FakeSession) -> list[Seat]:
    return [Seat(Member(source=s.name), s) for s in sessions]


async def test_a_failing_member_is_dropped_and_the_answer_completes() -> None:
    a, b, c = FakeSession("a"), FakeSession("b", fail_after=3), FakeSession("c")
    events = [e async for e in run_rounds(seats(a, b, c), EngineConfig(seed=0))]
    assert events[-1].finish_reason == "end_of_turn"
    dropped = [e.dropped for e in events if e.dropped]
    assert dropped == [{"b": "connection refused"}]
    after = events[[bool(e.dropped) for e in events].index(True) + 1 :]
    assert after and all("b" not in e.verifiers for e in after)
    assert all(c.member != "b" for e in after for c in e.candidates)
    assert events[-1].weights["b"] == 0.0
    assert sum(events[-1].weights.values()) == pytest.approx(1.0)
    assert b.calls == 4  # it was never called again after failing
    assert a.accepted == c.accepted


async def test_below_min_members_the_request_fails_with_the_reason() -> None:
    a, b = FakeSession("a"), FakeSession("b", fail_after=0)
    with pytest.raises(EnsembleError, match=r"min_members=2.*b: connection refused"):
        async for _ in run_rounds(seats(a, b), EngineConfig(min_members=2)):
            pass


async def test_an_ensemble_smaller_than_min_members_fails_at_once() -> None:
    with pytest.raises(EnsembleError, match="fewer than min_members=3"):
        async for _ in run_rounds(seats(FakeSession("a")), EngineConfig(min_members=3)):
            pass


async def test_other_errors_are_not_swallowed() -> None:
    class Broken(FakeSession):
        async def score(self, candidates: Sequence[Segment], scoring: str) -> list[float]:
            raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        async for _ in run_rounds(seats(FakeSession("a"), Broken("b")), EngineConfig()):
            pass
