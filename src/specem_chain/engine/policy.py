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

from .types import Score, Scoring


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
    least: tuple[tuple[float, ...], ...] = ()
    """Each candidate's least likely token's score, per verifier (empty where unknown)."""


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
    one and divided by the number of such pairs, so rewards lie in (0, 1]. A member that
    drafted several candidates counts the pairs of each.

    A member with no candidate, or with no other verifier and no rival candidate to be
    judged against, has no reward (``None``). The result has one entry per member.
    """
    wins = [0] * members
    pairs = [0] * members
    for ki, i in enumerate(drafters):
        rows = [j for j, v in enumerate(verifiers) if v != i]
        rivals = [k for k, d in enumerate(drafters) if d != i]
        pairs[i] += len(rows) * len(rivals)
        wins[i] += sum(1 for j in rows for k in rivals if matrix[j][ki] >= matrix[j][k])
    return [max(w, 1) / p if p else None for w, p in zip(wins, pairs)]


def hedge_step(
    weights: Sequence[float], member_rewards: Sequence[float | None], step: float
) -> list[float]:
    """One multiplicative-weights (Hedge) step, ``w <- w * exp(step * r)``, renormalised to
    sum to one. A member without a reward this round (``None``) is treated as neutral: it
    gets the mean of the others' rewards, so only evidence moves weights; a weight of zero
    (a dropped member) stays zero."""
    known = [r for r in member_rewards if r is not None]
    if step == 0 or not known:
        return list(weights)
    neutral = math.fsum(known) / len(known)
    # Subtract the largest exponent before exp() so large steps cannot overflow.
    exponents = [
        math.log(w) + step * (neutral if r is None else r) if w > 0 else -math.inf
        for w, r in zip(weights, member_rewards)
    ]
    top = max(exponents)
    raw = [math.exp(e - top) for e in exponents]
    total = math.fsum(raw)
    return [x / total for x in raw]


def hedge_update(
    weights: Sequence[float],
    member_rewards: Sequence[float | None],
    learning_rate: float,
    round_index: int,
) -> list[float]:
    """The paper's Hedge step: :func:`hedge_step` with ``eta_t = learning_rate * sqrt(1 / K)
    / t`` for round ``t`` (1-based) and K members."""
    if round_index < 1:
        raise ValueError(f"round_index is 1-based, got {round_index}")
    eta = learning_rate * math.sqrt(1.0 / len(weights)) / round_index
    return hedge_step(weights, member_rewards, eta)


def argmax(values: Sequence[float]) -> int:
    """The index of the largest value; ties go to the lowest index."""
    return max(range(len(values)), key=lambda k: (values[k], -k))


def select(matrix: Sequence[Sequence[float]], verifier_weights: Sequence[float]) -> int:
    """Index of the winning candidate: ``argmax_k sum_j w_j * S[j, k]``.

    Ties go to the lowest index, so the choice is deterministic.
    """
    return argmax(
        [
            math.fsum(w * row[k] for w, row in zip(verifier_weights, matrix))
            for k in range(len(matrix[0]))
        ]
    )


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


# -- per-byte policies -------------------------------------------------------------------


def per_unit(v: Verification) -> list[list[float]]:
    """``l[j][k]``: verifier j's log-probability of candidate k per UTF-8 byte (its mean
    per-token log-prob times its length in j's tokens, over its bytes). Tokenizers cut text
    differently; bytes are the unit in which members' opinions of one text compare."""
    return [
        [mean * tokens / max(units, 1) for mean, tokens, units in zip(row, counts, v.units)]
        for row, counts in zip(v.means, v.tokens)
    ]


def softmax_rows(rows: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each row as probabilities, ``exp(x) / sum(exp(x))``: the score matrix of a per-byte
    policy (its log is the per-byte log-prob less a per-row constant)."""
    matrix = []
    for row in rows:
        top = max(row)
        raw = [math.exp(x - top) for x in row]
        total = math.fsum(raw)
        matrix.append([x / total for x in raw])
    return matrix


def peer_rewards(
    ell: Sequence[Sequence[float]],
    verifiers: Sequence[int],
    drafters: Sequence[int],
    members: int,
) -> list[float | None]:
    """Each drafter's share of the pairwise comparisons its candidates win, judged so that
    no verifier ever compares its own draft (ties count half; no floor).

    Candidates ``a`` and ``b`` (drafted by ``i`` and ``k``) are compared by every verifier
    ``j`` that drafted neither: ``a`` wins if ``l[j][a] > l[j][b]``. When ``i`` and ``k``
    both verify, they give one more comparison between them: ``a`` wins if ``k`` concedes
    less to ``a`` than ``i`` concedes to ``b``, ``l[k][a] - l[k][b] > l[i][b] - l[i][a]``
    (each judges the other's draft against its own, so their self-preference cancels).
    With two members this is the only comparison: the reward is 1 for the draft the two
    verifiers together give the higher per-byte log-prob, 0 for the other. Two candidates
    of one member are not compared (it would win and lose the comparison itself). A member
    with no candidate, or no comparison, has no reward (None).
    """
    row = {seat: j for j, seat in enumerate(verifiers)}
    won = [0.0] * members
    held = [0] * members
    for a, i in enumerate(drafters):
        for b, k in enumerate(drafters):
            if b <= a or i == k:
                continue
            margins = [ell[j][a] - ell[j][b] for seat, j in row.items() if seat not in (i, k)]
            if i in row and k in row:
                margins.append(ell[row[k]][a] - ell[row[k]][b] - ell[row[i]][b] + ell[row[i]][a])
            for margin in margins:
                share = 1.0 if margin > 0 else 0.0 if margin < 0 else 0.5
                won[i] += share
                won[k] += 1.0 - share
                held[i] += 1
                held[k] += 1
    return [w / h if h else None for w, h in zip(won, held)]


def pooled(
    ell: Sequence[Sequence[float]], verifiers: Sequence[int], weights: Sequence[float]
) -> list[float]:
    """Each candidate's weighted sum of the verifiers' per-byte log-probs,
    ``sum_j w_j l[j][k]``."""
    return [
        math.fsum(weights[seat] * ell[j][k] for j, seat in enumerate(verifiers))
        for k in range(len(ell[0]))
    ]


POOL_STEP = 0.25
"""Hedge step per round of the per-byte policies at ``learning_rate=1``: a member that wins
every comparison for 8 rounds ends with e^2 = 7.4 times its rival's weight."""


@dataclass(frozen=True)
class Pool:
    """Log-linear pooling of per-byte log-probs (a weighted product of the members'
    distributions): the winner is ``argmax_k sum_j w_j l[j][k]``, with the weights from
    the rounds before; then :func:`peer_rewards` and a constant :func:`hedge_step`.

    In log space a verifier's preference counts by how sure it is, so a member that finds a
    rival's segment very unlikely outvotes one that mildly prefers its own; each verifier's
    own draft gets its self-preference, but so does every rival's from its drafter.
    """

    learning_rate: float = 1.0

    def judge(self, v: Verification, weights: Sequence[float], round_index: int) -> Judgement:
        ell = per_unit(v)
        member_rewards = peer_rewards(ell, v.verifiers, v.drafters, v.members)
        new = hedge_step(weights, member_rewards, self.learning_rate * POOL_STEP)
        return Judgement(self.winner(v, ell, weights), softmax_rows(ell), member_rewards, new)

    def winner(
        self, v: Verification, ell: Sequence[Sequence[float]], weights: Sequence[float]
    ) -> int:
        """The winning candidate, from the verifiers' per-byte log-probs ``ell``."""
        return argmax(pooled(ell, v.verifiers, weights))


@dataclass(frozen=True)
class Peer(Pool):
    """Like :class:`Pool`, but no verifier's opinion of its own draft is ever used: two
    candidates are compared only by the verifiers that drafted neither, and the winner has
    the largest weighted sum of per-byte margins over its rivals,
    ``sum_b sum_{j not in {d(a), d(b)}} w_j (l[j][a] - l[j][b])``.

    With two members no third verifier exists, and a round is decided as :class:`Pool`
    decides it with equal weights: by the two verifiers' per-byte log-probs added up, in
    which each one's preference for its own draft meets the other's. (Rewards and weights
    are those of :class:`Pool`.)
    """

    def winner(
        self, v: Verification, ell: Sequence[Sequence[float]], weights: Sequence[float]
    ) -> int:
        thirds = any(seat not in v.drafters for seat in v.verifiers) or len(set(v.drafters)) > 2
        if not thirds:
            return Pool.winner(self, v, ell, [1.0] * len(weights))
        scores = [
            math.fsum(
                weights[seat] * (ell[j][a] - ell[j][b])
                for b, rival in enumerate(v.drafters)
                if b != a
                for j, seat in enumerate(v.verifiers)
                if seat not in (drafter, rival)
            )
            for a, drafter in enumerate(v.drafters)
        ]
        return argmax(scores)


# -- the anchored policy -----------------------------------------------------------------

AGREE = -2.5
"""The least token log-prob at which the anchor is sure of its own draft and takes it
without the others (see :class:`Anchor`); chosen on development data (Concepts ->
Policies)."""

MARGIN = 0.02
"""Per-byte log-prob within which the anchor's preference counts as a near tie, which the
weighted vote of every verifier then decides (about one nat over a 50-byte segment)."""


def anchor_seat(names: Sequence[str], weights: Sequence[float], anchor: str | None) -> int:
    """The anchor's seat: the member named ``anchor`` where it is seated, else the heaviest
    (by a task's weights; the first member when they are equal)."""
    if anchor in names:
        return list(names).index(anchor)
    return argmax(list(weights))


def agreed(scores: Sequence[Score], units: Sequence[int], agree: float = AGREE) -> int | None:
    """The candidate of its own the anchor takes without asking the others, from its
    ``scores`` of its candidates: of those whose every token has at least ``agree``
    log-prob under the anchor, the one it finds likeliest per byte; None: it is sure of
    none."""
    taken = [k for k, s in enumerate(scores) if s.least >= agree]
    if not taken:
        return None
    return max(taken, key=lambda k: (scores[k].mean * scores[k].tokens / max(units[k], 1), -k))


@dataclass(frozen=True)
class Anchor(Pool):
    """One member, the anchor (seat :attr:`anchor`), writes the answer; the others are
    asked only where it is unsure, and vote only where it is torn.

    Each round the anchor drafts and scores its own draft: where every token of it has at
    least :attr:`agree` log-prob (:func:`agreed`), it is taken, and the others neither
    draft nor score. Otherwise the others draft too, every verifier scores every
    candidate, and this judgement decides: the candidates the anchor finds within
    :attr:`margin` per byte of its favourite are the near ties, and among them the
    weighted pool of every verifier's per-byte log-probs (as :class:`Pool`) chooses; the
    others together can never carry a candidate the anchor clearly finds less likely.
    Rewards and weights move as under :class:`Pool`. Without the anchor among the
    verifiers (it was dropped), a round is :class:`Pool`'s."""

    anchor: int = 0
    margin: float = MARGIN
    agree: float = AGREE

    def winner(
        self, v: Verification, ell: Sequence[Sequence[float]], weights: Sequence[float]
    ) -> int:
        totals = pooled(ell, v.verifiers, weights)
        if self.anchor not in v.verifiers:
            return argmax(totals)
        mine = ell[v.verifiers.index(self.anchor)]
        near = [k for k, x in enumerate(mine) if x >= max(mine) - self.margin]
        return max(near, key=lambda k: (totals[k], -k))
