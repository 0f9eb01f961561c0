"""Pure policy of one SpecEM round: scores, rewards, weights and selection.

Everything here works on plain Python numbers so it can be tested without any model.
Matrices are lists of rows. Rows are verifiers, columns are candidates. A policy takes one
round's :class:`Verification` and the members' weights and returns a :class:`Judgement`:
the winning candidate, the score matrix it was chosen on, the rewards and the new weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .types import Scoring


@dataclass(frozen=True)
class Verification:
    """What one round's verifiers said of its candidates: a policy's whole input.

    Columns are candidates, rows are verifiers; ``members`` is K, the request's members
    (seats), which the two index tuples point into.
    """

    members: int
    drafters: tuple[int, ...]
    """The seat that drafted each candidate."""
    verifiers: tuple[int, ...]
    """The seat of each row."""
    means: tuple[tuple[float, ...], ...]
    """Mean per-token score (log-probability, or raw logit with ``mean_logit``)."""
    tokens: tuple[tuple[int, ...], ...]
    """The candidate's length in the verifier's own tokens."""
    units: tuple[int, ...]
    """The candidate's length in UTF-8 bytes, plus one when it ends the turn."""
    scoring: Scoring = "mean_logprob"


@dataclass(frozen=True)
class Judgement:
    """A policy's decision on one round."""

    winner: int
    """The winning candidate (column)."""
    matrix: list[list[float]]
    """The normalised score matrix the winner was chosen on (rows sum to one)."""
    rewards: list[float | None]
    """Each seat's reward this round (None: no evidence)."""
    weights: list[float]
    """Each seat's weight after the round."""


def candidate_score(mean_token_score: float, scoring: Scoring) -> float:
    """Turn a verifier's mean per-token score of one candidate into a positive score.

    ``mean_logprob`` (the default) gives the geometric-mean token probability, in (0, 1].
    ``mean_logit`` keeps the raw mean logit, as the reference code does; it can be negative.
    """
    if scoring == "mean_logprob":
        # A log-prob is <= 0; clamp rounding noise so the result stays a probability.
        return math.exp(min(mean_token_score, 0.0))
    return mean_token_score


def normalise(scores: Sequence[Sequence[float]]) -> list[list[float]]:
    """Normalise each verifier's row of scores to sum to one: the score matrix S.

    A row whose sum is not positive and finite (every probability underflowed to zero, or
    raw logits that cancel out or overflow) carries no usable preference: it becomes uniform.
    """
    matrix = []
    for row in scores:
        # Plain sum: unlike fsum it turns overflow and inf - inf into inf/nan, not errors.
        total = sum(row)
        if total > 0 and math.isfinite(total):
            matrix.append([s / total for s in row])
        else:
            matrix.append([1.0 / len(row)] * len(row))
    return matrix


def rewards(
    matrix: Sequence[Sequence[float]],
    verifiers: Sequence[int],
    drafters: Sequence[int],
    members: int,
) -> list[float | None]:
    """Win-rate reward of every member, from the score matrix.

    ``matrix[j][k]`` is verifier ``verifiers[j]``'s normalised score of the candidate drafted
    by member ``drafters[k]``. A member's wins count the pairs (verifier j, rival candidate k)
    with neither drafted nor verified by itself where its own candidate scores at least as
    high as the rival: ``wins_i = #{(j, k): j != i, k != i, S[j, i] >= S[j, k]}``, floored at
    one and divided by the number of such pairs, so rewards lie in (0, 1].

    A member with no candidate, or with no other verifier and no rival candidate to be
    judged against, has no reward (``None``). The result has one entry per member.
    """
    result: list[float | None] = [None] * members
    for ki, i in enumerate(drafters):
        rows = [j for j, v in enumerate(verifiers) if v != i]
        rivals = [k for k, d in enumerate(drafters) if d != i]
        pairs = len(rows) * len(rivals)
        if pairs == 0:
            continue
        wins = sum(1 for j in rows for k in rivals if matrix[j][ki] >= matrix[j][k])
        result[i] = max(wins, 1) / pairs
    return result


def hedge_update(
    weights: Sequence[float],
    member_rewards: Sequence[float | None],
    learning_rate: float,
    round_index: int,
) -> list[float]:
    """One multiplicative-weights (Hedge) step, renormalised to sum to one.

    ``eta_t = learning_rate * sqrt(1 / K) / t`` for round ``t`` (1-based) and K members;
    ``w <- w * exp(eta_t * r)``. A member without a reward this round (``None``) is treated
    as neutral: it gets the mean of the others' rewards, so only evidence moves weights.
    """
    if round_index < 1:
        raise ValueError(f"round_index is 1-based, got {round_index}")
    known = [r for r in member_rewards if r is not None]
    if learning_rate == 0 or not known:
        return list(weights)
    neutral = math.fsum(known) / len(known)
    eta = learning_rate * math.sqrt(1.0 / len(weights)) / round_index
    # Subtract the largest exponent before exp() so large learning rates cannot overflow.
    exponents = [
        math.log(w) + eta * (neutral if r is None else r) if w > 0 else -math.inf
        for w, r in zip(weights, member_rewards)
    ]
    top = max(exponents)
    raw = [math.exp(e - top) for e in exponents]
    total = math.fsum(raw)
    return [x / total for x in raw]


def select(matrix: Sequence[Sequence[float]], verifier_weights: Sequence[float]) -> int:
    """Index of the winning candidate: ``argmax_k sum_j w_j * S[j, k]``.

    Ties go to the lowest index, so the choice is deterministic.
    """
    totals = [
        math.fsum(w * row[k] for w, row in zip(verifier_weights, matrix))
        for k in range(len(matrix[0]))
    ]
    return max(range(len(totals)), key=lambda k: (totals[k], -k))


@dataclass(frozen=True)
class Paper:
    """The paper's round (SpecEM, Algorithm 1): normalised geometric-mean probabilities
    (:func:`candidate_score`, :func:`normalise`), win-rate rewards floored at one win
    (:func:`rewards`), a Hedge step *before* selection (:func:`hedge_update`), then the
    weighted vote of the verifiers (:func:`select`)."""

    learning_rate: float = 1.0

    def judge(self, v: Verification, weights: Sequence[float], round_index: int) -> Judgement:
        matrix = normalise([[candidate_score(m, v.scoring) for m in row] for row in v.means])
        member_rewards = rewards(matrix, v.verifiers, v.drafters, v.members)
        new = hedge_update(weights, member_rewards, self.learning_rate, round_index)
        winner = select(matrix, [new[j] for j in v.verifiers])
        return Judgement(winner, matrix, member_rewards, new)
