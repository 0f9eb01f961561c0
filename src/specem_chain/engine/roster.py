"""The members of one request: their sessions, who is still live, and their weights.

A session that raises :class:`MemberUnavailable` (a remote member that kept failing) is
dropped for the rest of the request: it no longer drafts, verifies or accepts, its weight
becomes zero, and the round's event records the drop. Below ``min_members`` live members,
or without a live drafter or verifier, the request fails.

A drafter whose weight is below the gate at the start, or falls below the exit threshold
after a round, rests: it keeps verifying and accepting, but no longer drafts. The heaviest
live drafter never rests: when every other drafter is dropped, a resting one drafts again.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ..errors import EnsembleError, MemberUnavailable
from .types import MemberSession, Sampling

T = TypeVar("T")


@dataclass(frozen=True)
class Seat:
    """A member and its session for this request."""

    name: str
    session: MemberSession
    sampling: Sampling = field(default_factory=Sampling)
    drafts: bool = True
    verifies: bool = True


class Roster:
    """The request's seats, which of them are live, their weights, and the drops so far."""

    def __init__(
        self,
        seats: Sequence[Seat],
        min_members: int,
        weights: Sequence[float] | None = None,
        gate: float = 0.0,
        exit: float = 0.0,
    ) -> None:
        names = [seat.name for seat in seats]
        if len(set(names)) != len(names):
            raise EnsembleError(f"member names must be unique, got {names}")
        if not any(s.drafts for s in seats) or not any(s.verifies for s in seats):
            raise EnsembleError("an ensemble needs at least one drafter and one verifier")
        if len(seats) < min_members:
            raise EnsembleError(
                f"the ensemble has {len(seats)} members, fewer than min_members={min_members}"
            )
        if weights is not None and (
            len(weights) != len(seats) or min(weights) < 0 or math.fsum(weights) <= 0
        ):
            raise EnsembleError(
                f"give one non-negative weight per member, not all zero; got {list(weights)}"
            )
        self.seats = list(seats)
        self.min_members = min_members
        self.weights = (
            normalised(weights) if weights is not None else [1.0 / len(seats)] * len(seats)
        )
        self.alive = set(range(len(seats)))
        self.dropped: dict[str, str] = {}
        self.exit = exit
        self.resting: frozenset[int] = frozenset()
        """Drafters that do not draft: their starting weight was below the gate, or their
        weight fell below the exit threshold after a round."""
        self._rest(gate)

    @property
    def names(self) -> list[str]:
        return [seat.name for seat in self.seats]

    def reweigh(self, weights: Sequence[float]) -> None:
        """Take a round's new weights; a drafter whose weight fell below the exit
        threshold rests for the rest of the request."""
        self.weights = list(weights)
        self._rest(self.exit)

    def _rest(self, threshold: float) -> None:
        """Rest the live drafters whose weight is below ``threshold`` / K, besides those
        resting already; never every drafter: the heaviest always drafts."""
        drafters = self._live_drafters()
        low = self.resting | {i for i in drafters if self.weights[i] < threshold / len(self.seats)}
        if drafters and low.issuperset(drafters):
            low -= {max(drafters, key=lambda i: (self.weights[i], -i))}
        self.resting = frozenset(low)

    def drafters(self) -> list[int]:
        """The live drafters, but those resting."""
        return [i for i in self._live_drafters() if i not in self.resting]

    def live_drafters(self, seats: Iterable[int]) -> list[int]:
        """Those of ``seats`` that are live drafters, resting or not."""
        return [i for i in sorted(set(seats)) if i in self._live_drafters()]

    def _live_drafters(self) -> list[int]:
        return [i for i in sorted(self.alive) if self.seats[i].drafts]

    def verifiers(self) -> list[int]:
        return [i for i in sorted(self.alive) if self.seats[i].verifies]

    async def call(
        self,
        indices: Iterable[int],
        call: Callable[[int], Awaitable[T]],
        seconds: dict[str, float] | None = None,
    ) -> dict[int, T]:
        """``call(i)`` for every listed live seat at once; drop the seats whose member is
        unavailable. Any other error propagates. With ``seconds``, each seat's time in its
        call is added to its member's entry (a failed call's too)."""
        calls = [i for i in indices if i in self.alive]

        async def timed(i: int) -> T:
            started = time.perf_counter()
            try:
                return await call(i)
            finally:
                if seconds is not None:
                    name = self.seats[i].name
                    seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started

        results = await asyncio.gather(*(timed(i) for i in calls), return_exceptions=True)
        done: dict[int, T] = {}
        failed: dict[int, MemberUnavailable] = {}
        for i, result in zip(calls, results):
            if isinstance(result, MemberUnavailable):
                failed[i] = result
            elif isinstance(result, BaseException):
                raise result
            else:
                done[i] = result
        self.drop(failed)
        return done

    def drop(self, failed: dict[int, MemberUnavailable]) -> None:
        """Take unavailable members out of the request (a resting drafter drafts again if
        no other is left); fail when too few are left."""
        if not failed:
            return
        for i, error in failed.items():
            self.alive.discard(i)
            self.dropped[self.seats[i].name] = error.reason
            self.weights[i] = 0.0
        if math.fsum(self.weights) > 0:
            self.weights = normalised(self.weights)
        self._rest(0.0)
        why = "; ".join(f"{name}: {reason}" for name, reason in self.dropped.items())
        if len(self.alive) < self.min_members:
            raise EnsembleError(
                f"only {len(self.alive)} of {len(self.seats)} members are left, fewer than "
                f"min_members={self.min_members}; dropped {why}"
            )
        if not self.drafters() or not self.verifiers():
            raise EnsembleError(f"no drafter or no verifier is left; dropped {why}")


def normalised(weights: Sequence[float]) -> list[float]:
    total = math.fsum(weights)
    return [w / total for w in weights]
