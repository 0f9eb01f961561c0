"""The SpecEM loop: draft -> clean -> verify -> judge (policy) -> accept, round after round.

The loop knows nothing of torch or HTTP: it talks to :class:`MemberSession` objects, one per
member, created for this request. All request state (weights, answer, round) lives in this
request's :class:`Roster` and :class:`AnswerText`, so concurrent requests never share it.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import AsyncIterator, Sequence
from functools import partial

from .answer_text import AnswerText
from .config import EngineConfig
from .constraints import AnswerFormat
from .events import RoundEvent, RoundTiming
from .policy import anchor_seat
from .roster import Roster, Seat
from .rounds import Round, accept, anchored_round, plain_round
from .types import Segment


def round_seed(base: int, round_index: int, member: int, attempt: int) -> int:
    """The sampling seed of a member's draft: fixed by the request's seed, the round, the
    member's seat and the drafting attempt."""
    return (base * 1_000_003 + member * 7_919 + round_index + attempt * 104_729) % (2**63)


async def run_rounds(
    seats: Sequence[Seat],
    config: EngineConfig,
    answer_format: AnswerFormat | None = None,
    weights: Sequence[float] | None = None,
) -> AsyncIterator[RoundEvent]:
    """Write one answer with the seated members, yielding an event per round.

    ``answer_format`` may start the answer with a prefix, accepted by every member before the
    first round, and constrain the candidates: a candidate its constraint rejects is left
    out before verification, and a round where every candidate is rejected is redrafted.
    ``weights`` are the members' starting weights (default: uniform).
    """
    roster = Roster(seats, config.min_members, weights, config.gate, config.exit)
    policy = config.round_policy(anchor_seat(roster.names, roster.weights, config.anchor))
    decide = anchored_round if config.policy == "anchor" else plain_round
    shape = answer_format or AnswerFormat()
    answer = AnswerText(config.stop, config.max_tokens, shape.prefix)
    base = config.seed if config.seed is not None else random.randrange(2**31)
    if shape.prefix:
        prefix = Segment(shape.prefix)
        await roster.call(sorted(roster.alive), lambda i: seats[i].session.accept(prefix))
    for index in itertools.count(1):
        known_drops = len(roster.dropped)
        window = answer.window(config.window)
        seed = partial(round_seed, base, index)
        decided = await decide(Round(roster, answer, shape, window, seed, index, config, policy))
        drafted, verdict = decided.drafted, decided.verdict
        judgement, verification = verdict.judgement, verdict.verification
        accepting = time.perf_counter()
        finish = await accept(roster, answer, drafted, judgement.winner)
        names = roster.names
        yield RoundEvent(
            round=index,
            segment=drafted.candidates[judgement.winner].text,
            text=answer.release(final=finish is not None),
            winner=drafted.candidates[judgement.winner].member,
            candidates=tuple(drafted.candidates),
            verifiers=tuple(names[j] for j in verdict.verifiers),
            scores=tuple(tuple(row) for row in judgement.matrix),
            weights=dict(zip(names, roster.weights)),
            finish_reason=finish,
            timing=RoundTiming(
                decided.draft_s,
                decided.verify_s,
                time.perf_counter() - accepting,
                drafted.seconds,
                verdict.seconds,
            ),
            verified=verification is not None,
            answer_tokens=answer.tokens,
            drafted_tokens=drafted.tokens,
            dropped=dict(list(roster.dropped.items())[known_drops:]),
            verification=verification,
            rewards=dict(zip(names, judgement.rewards)) if verification else {},
            resting=drafted.resting,
            loop_redraft=drafted.loop_redraft,
        )
        if finish:
            return
