"""The SpecEM loop: draft -> clean -> verify -> normalise -> reward -> Hedge -> select -> accept.

The loop knows nothing of torch or HTTP: it talks to :class:`MemberSession` objects, one per
member, created for this request. All request state (weights, answer, round) lives in the
generator's frame, so concurrent requests never share it.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..backends.base import Draft, MemberSession, Segment
from ..errors import EnsembleError
from ..members import Member
from . import policy
from .boundary import clean_boundary
from .config import EngineConfig
from .stops import find_stop, unsafe_tail

FinishReason = Literal["end_of_turn", "length", "stop_sequence"]


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

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


REDRAFTS = 3
"""Drafting attempts per round before a round where every draft is empty fails."""


def _round_seed(base: int, member: int, round_index: int, attempt: int) -> int:
    return (base * 1_000_003 + member * 7_919 + round_index + attempt * 104_729) % (2**63)


async def run_rounds(seats: Sequence[Seat], config: EngineConfig) -> AsyncIterator[RoundEvent]:
    """Write one answer with the seated members, yielding an event per round."""
    names = [seat.member.label for seat in seats]
    if len(set(names)) != len(names):
        raise EnsembleError(f"member names must be unique, got {names}")
    drafters = [i for i, seat in enumerate(seats) if seat.member.drafts]
    verifiers = [i for i, seat in enumerate(seats) if seat.member.verifies]
    if not drafters or not verifiers:
        raise EnsembleError("an ensemble needs at least one drafter and one verifier")

    base_seed = config.seed if config.seed is not None else random.randrange(2**31)
    weights = [1.0 / len(seats)] * len(seats)
    answer, released, answer_tokens = "", 0, 0

    for round_index in itertools.count(1):
        window = min(config.window, config.max_tokens - answer_tokens)
        started = time.perf_counter()
        drafted_tokens = dict.fromkeys((names[i] for i in drafters), 0)
        for attempt in range(REDRAFTS):
            drafts: list[Draft] = await asyncio.gather(
                *(
                    seats[i].session.draft(
                        window,
                        seats[i].member.sampling,
                        _round_seed(base_seed, i, round_index, attempt),
                    )
                    for i in drafters
                )
            )
            for i, d in zip(drafters, drafts):
                drafted_tokens[names[i]] += d.tokens
            candidates = [
                Candidate(names[i], clean_boundary(d.text, d.finished), d.finished, d.tokens)
                for i, d in zip(drafters, drafts)
            ]
            # A candidate with no text that does not end the turn would accept nothing.
            live = [k for k, c in enumerate(candidates) if c.text or c.finished]
            if live:
                break
        else:
            raise EnsembleError(
                f"round {round_index}: every member drafted an empty segment {REDRAFTS} times; "
                "the members cannot continue this answer"
            )
        drafted = time.perf_counter()

        finished_live = [k for k in live if candidates[k].finished]
        verified = len(live) > 1 and not (config.fast_finish and finished_live)
        if verified:
            segments = [Segment(candidates[k].text, candidates[k].finished) for k in live]
            raw = await asyncio.gather(
                *(seats[j].session.score(segments, config.scoring) for j in verifiers)
            )
            matrix = policy.normalise(
                [[policy.candidate_score(s, config.scoring) for s in row] for row in raw]
            )
            member_rewards = policy.rewards(
                matrix, verifiers, [drafters[k] for k in live], len(seats)
            )
            weights = policy.hedge_update(
                weights, member_rewards, config.learning_rate, round_index
            )
            win = live[policy.select(matrix, [weights[j] for j in verifiers])]
        else:
            matrix = [[1.0 / len(live)] * len(live) for _ in verifiers]
            pool = finished_live if config.fast_finish and finished_live else live
            win = max(pool, key=lambda k: (weights[drafters[k]], -k))
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
            accepted = await asyncio.gather(*(seat.session.accept(segment) for seat in seats))
            winner_tokens = accepted[drafters[win]]
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
            verifiers=tuple(names[j] for j in verifiers),
            scores=tuple(tuple(row) for row in matrix),
            weights=dict(zip(names, weights)),
            finish_reason=finish,
            timing=RoundTiming(
                drafted - started, verified_at - drafted, time.perf_counter() - verified_at
            ),
            verified=verified,
            answer_tokens=answer_tokens,
            drafted_tokens=drafted_tokens,
        )
        if finish:
            return
