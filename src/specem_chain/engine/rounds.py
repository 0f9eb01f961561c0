"""The steps of one round: draft, verify and judge, accept.

Each step is a function over the request's :class:`Roster` (its live members and weights)
and :class:`AnswerText` (the answer so far), so each can be tested with scripted members.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

from ..errors import AnswerFormatError, EnsembleError
from .answer_text import AnswerText
from .boundary import clean_boundary
from .config import EngineConfig, RoundPolicy
from .constraints import AnswerFormat
from .events import Candidate, FinishReason
from .policy import Judgement, Verification
from .roster import Roster
from .types import Draft, Segment

REDRAFTS = 3
"""Drafting attempts per round before a round where every draft is empty fails."""


@dataclass(frozen=True)
class Drafted:
    """A round's candidates that could be accepted, and who drafted what."""

    candidates: list[Candidate]
    drafters: list[int]
    """The seat of each candidate."""
    tokens: dict[str, int]
    """Tokens each drafter drafted this round, over every attempt."""
    resting: tuple[str, ...] = ()
    """Live drafters that did not draft: their weight was below the gate at the start, or
    fell below the exit threshold in an earlier round."""

    @property
    def segments(self) -> list[Segment]:
        return [Segment(c.text, c.finished) for c in self.candidates]


async def draft_round(
    roster: Roster,
    answer: AnswerText,
    shape: AnswerFormat,
    window: int,
    seed: Callable[[int, int], int],
    round_index: int,
    run_on: bool = False,
) -> Drafted:
    """Every live drafter drafts (``seed(seat, attempt)``), but those resting; drafts are
    cleaned at their last word boundary and shaped by the answer format. A round where no
    candidate could move the answer on is redrafted, up to :data:`REDRAFTS` times."""
    seats = roster.seats

    def draft(attempt: int, i: int) -> Awaitable[Draft]:
        return seats[i].session.draft(window, seats[i].sampling, seed(i, attempt), run_on)

    tokens: dict[str, int] = {}
    for attempt in range(REDRAFTS):
        # asked again each attempt: when every drafter was dropped, a resting one drafts
        drafting = roster.drafters()
        for i in drafting:
            tokens.setdefault(seats[i].name, 0)
        drafts = await roster.call(drafting, partial(draft, attempt))
        resting = tuple(seats[i].name for i in sorted(roster.resting & roster.alive))
        for i, d in drafts.items():
            tokens[seats[i].name] += d.tokens
        cleaned = [
            Segment(clean_boundary(d.text, d.finished or d.at_boundary), d.finished)
            for d in drafts.values()
        ]
        shaped = [shape.shape(answer.text, segment) for segment in cleaned]
        if all(s is None for s in shaped):  # no whole candidate fits: keep what each can
            shaped = [shape.shape_start(answer.text, segment) for segment in cleaned]
        candidates = [
            Candidate(seats[i].name, s.text if s else "", s.finished if s else False, d.tokens)
            for (i, d), s in zip(drafts.items(), shaped)
        ]
        # A candidate with no text that does not end the turn would accept nothing.
        live = [k for k, c in enumerate(candidates) if c.text or c.finished]
        if live:
            drafters = list(drafts)
            return Drafted(
                [candidates[k] for k in live], [drafters[k] for k in live], tokens, resting
            )
    rejected = [
        f"{seats[i].name}: {d.text!r}" for (i, d), s in zip(drafts.items(), shaped) if s is None
    ]
    if rejected and (written := shape.fallback(answer.text)) is not None:
        # the members went astray where the format leaves one way on: the format writes it
        fallback = Candidate(
            seats[drafting[0]].name, written.text, written.finished, 0, source="format"
        )
        return Drafted([fallback], [drafting[0]], tokens, resting)
    if rejected:
        raise AnswerFormatError(
            f"round {round_index}: every candidate broke the answer's required format "
            f"{REDRAFTS} times (last drafts: {'; '.join(rejected)}); the answer so far: "
            f"{answer.text!r}"
        )
    raise EnsembleError(
        f"round {round_index}: every member drafted an empty segment {REDRAFTS} times; the "
        "members cannot continue this answer"
    )


async def verify_round(roster: Roster, drafted: Drafted, config: EngineConfig) -> Verification:
    """Every live verifier scores every candidate."""
    segments = drafted.segments
    seats = roster.seats
    scores = await roster.call(
        roster.verifiers(), lambda j: seats[j].session.score(segments, config.scoring)
    )
    return Verification(
        members=len(seats),
        drafters=tuple(drafted.drafters),
        verifiers=tuple(scores),
        means=tuple(tuple(s.mean for s in row) for row in scores.values()),
        tokens=tuple(tuple(s.tokens for s in row) for row in scores.values()),
        units=tuple(s.units for s in segments),
        scoring=config.scoring,
    )


def needs_verifying(drafted: Drafted, config: EngineConfig) -> bool:
    """One candidate wins unverified; so does a finished one under ``fast_finish``."""
    finished = any(c.finished for c in drafted.candidates)
    return len(drafted.candidates) > 1 and not (config.fast_finish and finished)


def unverified(
    drafted: Drafted, weights: Sequence[float], verifiers: int, fast_finish: bool
) -> Judgement:
    """The judgement of a round without verification: the candidate (a finished one under
    ``fast_finish``) of the drafter with the highest weight; the earliest on a tie."""
    count = len(drafted.candidates)
    finished = [k for k, c in enumerate(drafted.candidates) if c.finished]
    pool = finished if fast_finish and finished else range(count)
    winner = max(pool, key=lambda k: (weights[drafted.drafters[k]], -k))
    matrix = [[1.0 / count] * count for _ in range(verifiers)]
    return Judgement(winner, matrix, [None] * len(weights), list(weights))


@dataclass(frozen=True)
class Verdict:
    """How a round was decided."""

    verifiers: tuple[int, ...]
    """The seats whose rows the score matrix holds."""
    judgement: Judgement
    verification: Verification | None = None
    """What the verifiers said; None when the round needed no verification."""


async def judge_round(
    roster: Roster, drafted: Drafted, policy: RoundPolicy, config: EngineConfig, round_index: int
) -> Verdict:
    """Verify the candidates (when needed) and let the policy choose; the roster takes the
    policy's new weights."""
    if not needs_verifying(drafted, config):
        verifiers = tuple(roster.verifiers())
        judgement = unverified(drafted, roster.weights, len(verifiers), config.fast_finish)
        return Verdict(verifiers, judgement)
    verification = await verify_round(roster, drafted, config)
    judgement = policy.judge(verification, roster.weights, round_index)
    roster.reweigh(judgement.weights)
    return Verdict(verification.verifiers, judgement, verification)


async def accept(
    roster: Roster, answer: AnswerText, drafted: Drafted, winner: int
) -> FinishReason | None:
    """Append the winning candidate to the answer and to every live member's context;
    return why the answer ends, if it does."""
    candidate = drafted.candidates[winner]
    finish: FinishReason | None = "end_of_turn" if candidate.finished else None
    if answer.append(candidate.text):
        finish = "stop_sequence"
    tokens = candidate.tokens
    if finish is None:
        segment = Segment(candidate.text)
        accepted = await roster.call(
            sorted(roster.alive), lambda i: roster.seats[i].session.accept(segment)
        )
        tokens = accepted.get(drafted.drafters[winner], candidate.tokens)
    if answer.count(tokens) and finish is None:
        finish = "length"
    return finish
