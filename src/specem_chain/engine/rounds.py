"""The steps of one round: draft, verify and judge, accept.

Each step is a function over the request's :class:`Roster` (its live members and weights)
and :class:`AnswerText` (the answer so far), so each can be tested with scripted members.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TypeVar

from ..errors import AnswerFormatError, EnsembleError
from .answer_text import AnswerText
from .boundary import clean_boundary
from .config import EngineConfig, RoundPolicy
from .constraints import AnswerFormat
from .events import Candidate, FinishReason
from .policy import Anchor, Judgement, Verification, agreed, per_unit, softmax_rows
from .roster import Roster
from .types import Draft, Score, Scoring, Segment

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
    loop_redraft: bool = False
    """True when the round was drafted again under the loop penalty: its first candidates
    would have made the answer go round a loop."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Each drafter's drafting time, over every attempt."""

    @property
    def segments(self) -> list[Segment]:
        return [c.segment for c in self.candidates]


async def draft_round(
    roster: Roster,
    answer: AnswerText,
    shape: AnswerFormat,
    window: int,
    seed: Callable[[int, int], int],
    round_index: int,
    run_on: bool = False,
    only: Sequence[int] | None = None,
) -> Drafted:
    """Every live drafter drafts its :attr:`~.types.Sampling.drafts` candidates, but those
    resting (given ``only``: those of them that are live drafters, resting or not);
    drafts are cleaned at their last word boundary and shaped by the answer format. A
    round where no candidate could move the answer on is redrafted, up to
    :data:`REDRAFTS` times; so is, once, a round that would make the answer go round a loop
    (:meth:`AnswerText.goes_round`) when a drafter's :attr:`~.types.Sampling.loop_penalty`
    is over 1: every drafter drafts again with new
    seeds and at least its loop penalty as its repetition penalty. In-process members draft
    under the format token by token (:meth:`AnswerFormat.fits`)."""
    seats = roster.seats
    fits = shape.fits(answer.text)

    async def draft(attempt: int, looping: bool, i: int) -> list[Draft]:
        # A seat's drafts come one after another from its one session. The first has the
        # seed a single draft has (seed(seat, attempt)), the others seeds of their own.
        session, sampling = seats[i].session, seats[i].sampling
        if looping:
            penalty = max(sampling.repeat_penalty, sampling.loop_penalty)
            sampling = sampling.model_copy(update={"repeat_penalty": penalty})
        return [
            await session.draft(window, sampling, seed(i, attempt + k * REDRAFTS), run_on, fits)
            for k in range(sampling.drafts)
        ]

    tokens: dict[str, int] = {}
    seconds: dict[str, float] = {}
    looping = False
    for attempt in range(REDRAFTS):
        # asked again each attempt: when every drafter was dropped, a resting one drafts again
        drafting = roster.drafters() if only is None else roster.live_drafters(only)
        for i in drafting:
            tokens.setdefault(seats[i].name, 0)
        drafted = await roster.call(drafting, partial(draft, attempt, looping), seconds)
        resting = tuple(seats[i].name for i in sorted(roster.resting & roster.alive))
        drafts = [(i, d) for i, each in drafted.items() for d in each]
        for i, d in drafts:
            tokens[seats[i].name] += d.tokens
        shaped = _shaped([d for _, d in drafts], shape, answer)
        candidates = [
            Candidate(seats[i].name, s.text if s else "", s.finished if s else False, d.tokens)
            for (i, d), s in zip(drafts, shaped)
        ]
        live = _live([i for i, _ in drafts], candidates)
        watched = any(seats[i].sampling.loop_penalty > 1 for i in drafting)
        breaks_loop = watched and not looping and attempt + 1 < REDRAFTS
        if breaks_loop and live and answer.goes_round([candidates[k].segment for k in live]):
            looping = True
        elif live:
            picked = [candidates[k] for k in live]
            drafters = [drafts[k][0] for k in live]
            return Drafted(picked, drafters, tokens, resting, looping, seconds)
    rejected = [f"{seats[i].name}: {d.text!r}" for (i, d), s in zip(drafts, shaped) if s is None]
    if written := shape.fallback(answer.text):
        # the members went astray (or, drafting under the format, found no way on) where the
        # format knows the ways on: it offers them (the verifiers choose when there are
        # several), credited to the first drafter
        offered = [
            Candidate(seats[drafting[0]].name, w.text, w.finished, 0, source="format")
            for w in written
        ]
        return Drafted(offered, [drafting[0]] * len(offered), tokens, resting, seconds=seconds)
    raise _no_way_on(round_index, rejected, shape, answer.text)


def _no_way_on(
    round_index: int, rejected: list[str], shape: AnswerFormat, answer: str
) -> EnsembleError:
    """The error for a round that no candidate could move on, after every redraft:
    ``rejected`` names the drafts the answer's format refused."""
    if rejected:
        return AnswerFormatError(
            f"round {round_index}: every candidate broke the answer's required format "
            f"{REDRAFTS} times (last drafts: {'; '.join(rejected)}); the answer so far: "
            f"{answer!r}"
        )
    if shape.constraint is not None:
        return AnswerFormatError(
            f"round {round_index}: drafting under the answer's required format, no member "
            f"found a token that fits it, {REDRAFTS} times; the answer so far: {answer!r}"
        )
    return EnsembleError(
        f"round {round_index}: every member drafted an empty segment {REDRAFTS} times; the "
        "members cannot continue this answer"
    )


def _live(drafters: Sequence[int], candidates: Sequence[Candidate]) -> list[int]:
    """The indices of the candidates that could be accepted. A candidate with no text that
    does not end the turn would accept nothing, and one that repeats an earlier one of the
    same member would be scored twice alike."""
    live, seen = [], set()
    for k, (i, c) in enumerate(zip(drafters, candidates)):
        if (c.text or c.finished) and (i, c.text, c.finished) not in seen:
            seen.add((i, c.text, c.finished))
            live.append(k)
    return live


def _shaped(
    drafts: Sequence[Draft], shape: AnswerFormat, answer: AnswerText
) -> list[Segment | None]:
    """The drafts cleaned at their last word boundary and shaped by the answer format
    (None: the format rejects it); when it rejects every whole draft, what each can keep."""
    cleaned = [
        Segment(clean_boundary(d.text, d.finished or d.at_boundary), d.finished) for d in drafts
    ]
    shaped = [shape.shape(answer.text, segment) for segment in cleaned]
    if all(s is None for s in shaped):
        shaped = [shape.shape_start(answer.text, segment) for segment in cleaned]
    return shaped


async def verify_round(
    roster: Roster,
    drafted: Drafted,
    config: EngineConfig,
    seconds: dict[str, float],
    known: dict[int, list[Score]] | None = None,
) -> Verification:
    """Every live verifier scores every candidate; ``seconds`` takes each one's time.
    ``known``: scores a verifier gave the first candidates already, which it is not asked
    again."""
    segments = drafted.segments
    seats = roster.seats

    async def score(j: int) -> list[Score]:
        given = (known or {}).get(j, [])
        rest = segments[len(given) :]
        return [*given, *(await seats[j].session.score(rest, config.scoring) if rest else [])]

    scores = await roster.call(roster.verifiers(), score, seconds)
    return verification_of(len(seats), drafted, scores, config.scoring)


def verification_of(
    members: int, drafted: Drafted, scores: dict[int, list[Score]], scoring: Scoring
) -> Verification:
    """What the verifiers (``scores``' seats, in order) said of the candidates."""
    rows = scores.values()
    return Verification(
        members=members,
        drafters=tuple(drafted.drafters),
        verifiers=tuple(scores),
        means=tuple(tuple(s.mean for s in row) for row in rows),
        tokens=tuple(tuple(s.tokens for s in row) for row in rows),
        units=tuple(s.units for s in drafted.segments),
        scoring=scoring,
        least=tuple(tuple(s.least for s in row) for row in rows),
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
    seconds: dict[str, float] = field(default_factory=dict)
    """Each verifier's time to score the candidates (empty when not verified)."""


async def judge_round(
    roster: Roster,
    drafted: Drafted,
    policy: RoundPolicy,
    config: EngineConfig,
    round_index: int,
    known: dict[int, list[Score]] | None = None,
) -> Verdict:
    """Verify the candidates (when needed; ``known`` as :func:`verify_round` takes it) and
    let the policy choose; the roster takes the policy's new weights."""
    if not needs_verifying(drafted, config):
        verifiers = tuple(roster.verifiers())
        judgement = unverified(drafted, roster.weights, len(verifiers), config.fast_finish)
        return Verdict(verifiers, judgement)
    seconds: dict[str, float] = {}
    verification = await verify_round(roster, drafted, config, seconds, known)
    judgement = policy.judge(verification, roster.weights, round_index)
    roster.reweigh(judgement.weights)
    return Verdict(verification.verifiers, judgement, verification, seconds)


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


@dataclass(frozen=True)
class Decided:
    """A round up to its winner: the candidates, how they were judged, and the wall time
    spent drafting and verifying."""

    drafted: Drafted
    verdict: Verdict
    draft_s: float
    verify_s: float


@dataclass(frozen=True)
class Round:
    """What one round works with: the request's roster and answer so far, the answer's
    format, the window, the drafts' seeds, the round's number, the settings and the
    policy."""

    roster: Roster
    answer: AnswerText
    shape: AnswerFormat
    window: int
    seed: Callable[[int, int], int]
    index: int
    config: EngineConfig
    policy: RoundPolicy

    async def draft(self, only: Sequence[int] | None = None) -> Drafted:
        """:func:`draft_round` for this round (``only``: those seats)."""
        return await draft_round(
            self.roster,
            self.answer,
            self.shape,
            self.window,
            self.seed,
            self.index,
            self.config.run_on,
            only,
        )

    async def judge(self, drafted: Drafted, known: dict[int, list[Score]] | None = None) -> Verdict:
        """:func:`judge_round` for this round."""
        return await judge_round(self.roster, drafted, self.policy, self.config, self.index, known)


async def plain_round(r: Round) -> Decided:
    """Every drafter drafts, then the verifiers and the policy judge."""
    started = time.perf_counter()
    drafted = await r.draft()
    drafted_at = time.perf_counter()
    verdict = await r.judge(drafted)
    return Decided(drafted, verdict, drafted_at - started, time.perf_counter() - drafted_at)


async def anchored_round(r: Round) -> Decided:
    """The anchored policy's round (:class:`~.policy.Anchor`): the anchor drafts and scores
    its own candidates; where it is sure of one (:func:`~.policy.agreed`) that one is
    taken, and no other member drafts or scores. Where it is unsure (or finds no way on),
    the other drafters draft too and every verifier judges every candidate (the anchor's
    scores of its own are not asked again). Without another live drafter, or with the
    anchor dropped or not both drafting and verifying, a plain round."""
    policy, roster, config = r.policy, r.roster, r.config
    assert isinstance(policy, Anchor)
    anchor = policy.anchor
    others = [i for i in roster.drafters() if i != anchor]
    seated = roster.live_drafters([anchor]) == [anchor] and roster.seats[anchor].verifies
    if not (seated and others):
        return await plain_round(r)
    started = time.perf_counter()
    try:
        own: Drafted | None = await r.draft([anchor])
    except EnsembleError:  # the anchor found no way on (or was dropped): the others try
        own = None
    drafted_at = time.perf_counter()
    rows: dict[int, list[Score]] = {}
    checking: dict[str, float] = {}
    if own is not None:
        rows = await roster.call(
            [anchor],
            lambda j: roster.seats[j].session.score(own.segments, config.scoring),
            checking,
        )
        units = [s.units for s in own.segments]
        if anchor in rows and (taken := agreed(rows[anchor], units, policy.agree)) is not None:
            verification = verification_of(len(roster.seats), own, rows, config.scoring)
            unmoved = [None] * len(roster.seats)
            judgement = Judgement(
                taken, softmax_rows(per_unit(verification)), unmoved, list(roster.weights)
            )
            verdict = Verdict((anchor,), judgement, verification, checking)
            return Decided(own, verdict, drafted_at - started, time.perf_counter() - drafted_at)
    checked_at = time.perf_counter()
    try:
        more: Drafted | None = await r.draft(others)
    except EnsembleError:  # the others found no way on: the anchor's own candidates stand
        if own is None:
            raise
        more = None
    drafted = joined(own, more) if more is not None else own
    assert drafted is not None
    judged_at = time.perf_counter()
    verdict = await r.judge(drafted, rows)
    verdict = replace(verdict, seconds=summed(checking, verdict.seconds))
    draft_s = drafted_at - started + judged_at - checked_at
    verify_s = checked_at - drafted_at + time.perf_counter() - judged_at
    return Decided(drafted, verdict, draft_s, verify_s)


def joined(first: Drafted | None, second: Drafted) -> Drafted:
    """The candidates of two drafting steps of one round, as one."""
    if first is None:
        return second
    return Drafted(
        first.candidates + second.candidates,
        first.drafters + second.drafters,
        summed(first.tokens, second.tokens),
        first.resting,
        first.loop_redraft or second.loop_redraft,
        summed(first.seconds, second.seconds),
    )


N = TypeVar("N", int, float)


def summed(a: dict[str, N], b: dict[str, N]) -> dict[str, N]:
    """Each member's counts in ``a`` and ``b`` added up."""
    return {name: a.get(name, 0) + b.get(name, 0) for name in {**a, **b}}
