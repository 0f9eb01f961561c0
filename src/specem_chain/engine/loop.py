"""The SpecEM loop: draft -> clean -> verify -> normalise -> reward -> Hedge -> select -> accept.

The loop knows nothing of torch or HTTP: it talks to :class:`MemberSession` objects, one per
member, created for this request. All request state (weights, answer, round) lives in the
generator's frame, so concurrent requests never share it.

A session that raises :class:`MemberUnavailable` (a remote member that kept failing) is
dropped for the rest of the request: it no longer drafts, verifies or accepts, its weight
becomes zero, and the round's event records the drop. Below ``min_members`` live members,
or without a live drafter or verifier, the request fails.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from ..backends.base import Draft, MemberSession, Segment
from ..errors import AnswerFormatError, EnsembleError, MemberUnavailable
from ..members import Member
from . import policy
from .boundary import clean_boundary
from .config import EngineConfig
from .constraints import AnswerFormat
from .stops import find_stop, unsafe_tail

FinishReason = Literal["end_of_turn", "length", "stop_sequence"]
T = TypeVar("T")


@dataclass(frozen=True)
class Seat:
    """A member and its session for this request."""

    member: Member
    session: MemberSession


@dataclass(frozen=True)
class Candidate:
    """One member's draft after boundary cleaning."""

    member: str
    text: str
    finished: bool
    tokens: int
    """Tokens the member drafted this round (its cost), before cleaning."""


@dataclass(frozen=True)
class RoundTiming:
    draft_s: float
    verify_s: float
    accept_s: float


@dataclass(frozen=True)
class RoundEvent:
    """What happened in one round."""

    round: int
    segment: str
    """The accepted segment (before any stop-sequence cut)."""
    text: str
    """Answer text released to the reader this round; the concatenation over rounds is the
    answer. It lags ``segment`` only while a stop sequence might be starting."""
    winner: str
    candidates: tuple[Candidate, ...]
    verifiers: tuple[str, ...]
    scores: tuple[tuple[float, ...], ...]
    """The normalised score matrix: a row per verifier, a column per candidate."""
    weights: dict[str, float]
    """Every member's weight after this round's Hedge update."""
    finish_reason: FinishReason | None
    timing: RoundTiming
    verified: bool = True
    """False when no verification was needed (one candidate, or a fast finish)."""
    answer_tokens: int = 0
    """Accepted answer length so far, counted in each winner's tokenizer."""
    drafted_tokens: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    """Members dropped in this round, with the reason; they take no further part."""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


REDRAFTS = 3
"""Drafting attempts per round before a round where every draft is empty fails."""


async def _call_all(
    calls: dict[int, Awaitable[T]],
) -> tuple[dict[int, T], dict[int, MemberUnavailable]]:
    """Await every member's call; split the results from the members that are unavailable.
    Any other error propagates."""
    results = await asyncio.gather(*calls.values(), return_exceptions=True)
    done: dict[int, T] = {}
    failed: dict[int, MemberUnavailable] = {}
    for i, result in zip(calls, results):
        if isinstance(result, MemberUnavailable):
            failed[i] = result
        elif isinstance(result, BaseException):
            raise result
        else:
            done[i] = result
    return done, failed


def _round_seed(base: int, member: int, round_index: int, attempt: int) -> int:
    return (base * 1_000_003 + member * 7_919 + round_index + attempt * 104_729) % (2**63)


async def run_rounds(
    seats: Sequence[Seat], config: EngineConfig, answer_format: AnswerFormat | None = None
) -> AsyncIterator[RoundEvent]:
    """Write one answer with the seated members, yielding an event per round.

    ``answer_format`` may start the answer with a prefix, accepted by every member before the
    first round, and constrain the candidates: a candidate its constraint rejects is left
    out before verification, and a round where every candidate is rejected is redrafted.
    """
    names = [seat.member.label for seat in seats]
    if len(set(names)) != len(names):
        raise EnsembleError(f"member names must be unique, got {names}")
    drafters = [i for i, seat in enumerate(seats) if seat.member.drafts]
    verifiers = [i for i, seat in enumerate(seats) if seat.member.verifies]
    if not drafters or not verifiers:
        raise EnsembleError("an ensemble needs at least one drafter and one verifier")
    if len(seats) < config.min_members:
        raise EnsembleError(
            f"the ensemble has {len(seats)} members, fewer than min_members={config.min_members}"
        )

    answer_format = answer_format or AnswerFormat()
    base_seed = config.seed if config.seed is not None else random.randrange(2**31)
    weights = [1.0 / len(seats)] * len(seats)
    answer, released, answer_tokens = answer_format.prefix, 0, 0
    alive = set(range(len(seats)))
    dropped: dict[str, str] = {}

    def drop(failed: dict[int, MemberUnavailable]) -> None:
        """Take unavailable members out of the request; fail when too few are left."""
        nonlocal weights
        if not failed:
            return
        for i, error in failed.items():
            alive.discard(i)
            dropped[names[i]] = error.reason
            weights[i] = 0.0
        total = math.fsum(weights)
        weights = [w / total for w in weights] if total > 0 else weights
        why = "; ".join(f"{name}: {reason}" for name, reason in dropped.items())
        if len(alive) < config.min_members:
            raise EnsembleError(
                f"only {len(alive)} of {len(seats)} members are left, fewer than "
                f"min_members={config.min_members}; dropped {why}"
            )
        if not alive.intersection(drafters) or not alive.intersection(verifiers):
            raise EnsembleError(f"no drafter or no verifier is left; dropped {why}")

    if answer_format.prefix:
        _, failed = await _call_all(
            {i: seats[i].session.accept(Segment(answer_format.prefix)) for i in sorted(alive)}
        )
        drop(failed)

    for round_index in itertools.count(1):
        window = min(config.window, config.max_tokens - answer_tokens)
        started = time.perf_counter()
        known_drops = len(dropped)
        drafted_tokens = {names[i]: 0 for i in drafters if i in alive}
        for attempt in range(REDRAFTS):
            calls = {
                i: seats[i].session.draft(
                    window,
                    seats[i].member.sampling,
                    _round_seed(base_seed, i, round_index, attempt),
                )
                for i in drafters
                if i in alive
            }
            drafts: dict[int, Draft]
            drafts, failed = await _call_all(calls)
            drop(failed)
            drafting = list(drafts)
            for i, d in drafts.items():
                drafted_tokens[names[i]] += d.tokens
            cleaned = [
                Segment(clean_boundary(d.text, d.finished), d.finished) for d in drafts.values()
            ]
            shaped = [answer_format.shape(answer, segment) for segment in cleaned]
            if all(s is None for s in shaped):  # no whole candidate fits: keep what each can
                shaped = [answer_format.shape_start(answer, segment) for segment in cleaned]
            rejected = [
                f"{names[i]}: {d.text!r}" for (i, d), s in zip(drafts.items(), shaped) if s is None
            ]
            candidates = [
                Candidate(names[i], s.text, s.finished, d.tokens)
                if s is not None
                else Candidate(names[i], "", False, d.tokens)
                for (i, d), s in zip(drafts.items(), shaped)
            ]
            # A candidate with no text that does not end the turn would accept nothing.
            live = [k for k, c in enumerate(candidates) if c.text or c.finished]
            if live:
                break
        else:
            if rejected:
                raise AnswerFormatError(
                    f"round {round_index}: every candidate broke the answer's required format "
                    f"{REDRAFTS} times (last drafts: {'; '.join(rejected)}); the answer so "
                    f"far: {answer!r}"
                )
            raise EnsembleError(
                f"round {round_index}: every member drafted an empty segment {REDRAFTS} times; "
                "the members cannot continue this answer"
            )
        drafted = time.perf_counter()

        finished_live = [k for k in live if candidates[k].finished]
        verified = len(live) > 1 and not (config.fast_finish and finished_live)
        if verified:
            segments = [Segment(candidates[k].text, candidates[k].finished) for k in live]
            raw, failed = await _call_all(
                {
                    j: seats[j].session.score(segments, config.scoring)
                    for j in verifiers
                    if j in alive
                }
            )
            drop(failed)
            verifying = list(raw)
            matrix = policy.normalise(
                [[policy.candidate_score(s, config.scoring) for s in raw[j]] for j in verifying]
            )
            member_rewards = policy.rewards(
                matrix, verifying, [drafting[k] for k in live], len(seats)
            )
            weights = policy.hedge_update(
                weights, member_rewards, config.learning_rate, round_index
            )
            win = live[policy.select(matrix, [weights[j] for j in verifying])]
        else:
            verifying = [j for j in verifiers if j in alive]
            matrix = [[1.0 / len(live)] * len(live) for _ in verifying]
            pool = finished_live if config.fast_finish and finished_live else live
            win = max(pool, key=lambda k: (weights[drafting[k]], -k))
        verified_at = time.perf_counter()

        winner = candidates[win]
        segment = Segment(winner.text, winner.finished)
        start = len(answer)
        answer += winner.text
        finish: FinishReason | None = "end_of_turn" if winner.finished else None
        stop_at = find_stop(answer, config.stop, start)
        if stop_at is not None:
            answer, finish = answer[:stop_at], "stop_sequence"

        winner_tokens = winner.tokens
        if finish is None:
            accepted, failed = await _call_all(
                {i: seats[i].session.accept(segment) for i in sorted(alive)}
            )
            drop(failed)
            winner_tokens = accepted.get(drafting[win], winner.tokens)
        # Every round moves the answer on by at least one token, so the loop must end.
        answer_tokens += max(winner_tokens, 1)
        if finish is None and answer_tokens >= config.max_tokens:
            finish = "length"

        end = len(answer) if finish else len(answer) - unsafe_tail(answer, config.stop)
        text, released = answer[released:end], end
        yield RoundEvent(
            round=round_index,
            segment=winner.text,
            text=text,
            winner=winner.member,
            candidates=tuple(candidates[k] for k in live),
            verifiers=tuple(names[j] for j in verifying),
            scores=tuple(tuple(row) for row in matrix),
            weights=dict(zip(names, weights)),
            finish_reason=finish,
            timing=RoundTiming(
                drafted - started, verified_at - drafted, time.perf_counter() - verified_at
            ),
            verified=verified,
            answer_tokens=answer_tokens,
            drafted_tokens=drafted_tokens,
            dropped=dict(list(dropped.items())[known_drops:]),
        )
        if finish:
            return
