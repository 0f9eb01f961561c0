"""Properties of the pure SpecEM round policy: scores, rewards, Hedge weights, selection."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from specem_chain.engine.policy import candidate_score, hedge_update, normalise, rewards, select

# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------

positive = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False)
logprob = st.floats(min_value=-700.0, max_value=0.0, allow_nan=False)


@st.composite
def score_rows(draw, rows: int, cols: int) -> list[list[float]]:
    return [draw(st.lists(positive, min_size=cols, max_size=cols)) for _ in range(rows)]


@st.composite
def square_matrices(draw, min_k: int = 1, max_k: int = 6) -> list[list[float]]:
    """A normalised K x K score matrix: every member drafts and verifies (the paper's setting)."""
    k = draw(st.integers(min_value=min_k, max_value=max_k))
    return normalise(draw(score_rows(k, k)))


@st.composite
def rounds(draw, max_k: int = 6):
    """Members, verifier and drafter indices (non-empty subsets) and a matching matrix."""
    members = draw(st.integers(min_value=1, max_value=max_k))
    indices = st.lists(
        st.integers(min_value=0, max_value=members - 1), min_size=1, max_size=members, unique=True
    )
    verifiers = sorted(draw(indices))
    drafters = sorted(draw(indices))
    matrix = normalise(draw(score_rows(len(verifiers), len(drafters))))
    return members, verifiers, drafters, matrix


def spec_rewards(matrix: list[list[float]]) -> list[float | None]:
    """Brute force, straight from the spec, for K members that all draft and verify:
    ``wins_i = #{(j, k) : j != i, k != i, S[j, i] >= S[j, k]}`` floored at 1,
    ``r_i = wins_i / (K - 1)^2``; no reward when K == 1."""
    k = len(matrix)
    if k == 1:
        return [None]
    out: list[float | None] = []
    for i in range(k):
        wins = 0
        for j in range(k):
            for c in range(k):
                if j != i and c != i and matrix[j][i] >= matrix[j][c]:
                    wins += 1
        out.append(max(wins, 1) / (k - 1) ** 2)
    return out


def exact_totals(matrix, weights) -> list[Fraction]:
    return [
        sum(
            (Fraction(w) * Fraction(row[k]) for w, row in zip(weights, matrix, strict=True)),
            Fraction(0),
        )
        for k in range(len(matrix[0]))
    ]


def clear_winner(totals: list[Fraction]) -> int | None:
    """Index of the maximum when it beats the runner-up by a margin rounding cannot bridge."""
    order = sorted(range(len(totals)), key=lambda k: totals[k], reverse=True)
    if len(order) == 1:
        return order[0]
    best, second = totals[order[0]], totals[order[1]]
    if best - second <= Fraction(1, 10**9) * abs(best):
        return None
    return order[0]


# --------------------------------------------------------------------------------------------
# candidate_score
# --------------------------------------------------------------------------------------------


@given(logprob)
def test_candidate_score_is_a_probability(mean_logprob):
    score = candidate_score(mean_logprob, "mean_logprob")
    assert 0.0 < score <= 1.0


@given(logprob, logprob)
def test_candidate_score_is_monotone(a, b):
    lo, hi = sorted((a, b))
    assert candidate_score(lo, "mean_logprob") <= candidate_score(hi, "mean_logprob")


@given(st.floats(min_value=-50.0, max_value=0.0))
def test_candidate_score_is_geometric_mean_probability(mean_logprob):
    assert candidate_score(mean_logprob, "mean_logprob") == pytest.approx(math.exp(mean_logprob))


@given(st.floats(min_value=0.0, max_value=1e-9))
def test_candidate_score_clamps_positive_rounding_noise(noise):
    assert candidate_score(noise, "mean_logprob") == 1.0


@given(st.floats(min_value=-1e6, max_value=1e6))
def test_mean_logit_scoring_keeps_the_raw_logit(logit):
    assert candidate_score(logit, "mean_logit") == logit


def test_candidate_score_underflows_to_zero_for_absurd_logprobs():
    # Documented limitation: exp() underflows below about -745; normalise() then treats an
    # all-zero row as "no preference".
    assert candidate_score(-1e4, "mean_logprob") == 0.0
    assert normalise([[0.0, 0.0]]) == [[0.5, 0.5]]


# --------------------------------------------------------------------------------------------
# normalise
# --------------------------------------------------------------------------------------------

rows_of_scores = st.lists(
    st.lists(st.floats(min_value=0.0, max_value=1e6), min_size=1, max_size=8),
    min_size=1,
    max_size=8,
)


@given(rows_of_scores)
def test_normalise_rows_sum_to_one_and_are_non_negative(scores):
    matrix = normalise(scores)
    assert len(matrix) == len(scores)
    for row, original in zip(matrix, scores, strict=True):
        assert len(row) == len(original)
        assert all(x >= 0.0 for x in row)
        assert math.fsum(row) == pytest.approx(1.0)


@given(st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=2, max_size=8))
def test_normalise_keeps_the_ratios(row):
    (normed,) = normalise([row])
    for k in range(len(row) - 1):
        assert normed[k] * row[k + 1] == pytest.approx(normed[k + 1] * row[k])


@given(st.integers(min_value=1, max_value=8))
def test_normalise_all_zero_row_is_uniform(n):
    assert normalise([[0.0] * n]) == [[1.0 / n] * n]


@pytest.mark.parametrize(
    "row",
    [
        [math.inf, 1.0],
        [math.nan, 1.0],
        [1.0, math.nan, 2.0],
        [-1.0, -2.0],  # raw logits whose sum is not positive
        [1.0, -1.0],
    ],
)
def test_normalise_row_without_usable_sum_is_uniform(row):
    (normed,) = normalise([row])
    assert normed == [1.0 / len(row)] * len(row)


def test_normalise_rows_are_independent():
    assert normalise([[1.0, 3.0], [0.0, 0.0]]) == [[0.25, 0.75], [0.5, 0.5]]


@pytest.mark.parametrize("row", [[1e308, 1e308], [math.inf, -math.inf]])
def test_normalise_overflowing_row_is_uniform(row):
    assert normalise([row]) == [[0.5, 0.5]]


# --------------------------------------------------------------------------------------------
# rewards
# --------------------------------------------------------------------------------------------


def test_rewards_worked_example():
    matrix = [
        [0.5, 0.3, 0.2],
        [0.2, 0.5, 0.3],
        [0.4, 0.4, 0.2],
    ]
    # member 0: row 1 loses to both rivals, row 2 ties 0.4 >= 0.4 and beats 0.2 -> 2/4
    # member 1: row 0 beats 0.2 only, row 2 ties and beats -> 3/4
    # member 2: row 0 none, row 1 beats 0.2 only -> 1/4
    assert rewards(matrix, [0, 1, 2], [0, 1, 2], 3) == [0.5, 0.75, 0.25]


def test_rewards_floor_at_one_win():
    # member 2 never wins in the others' eyes but is floored at one win: 1 / (K - 1)^2
    matrix = [
        [0.6, 0.3, 0.1],
        [0.3, 0.6, 0.1],
        [0.1, 0.1, 0.8],
    ]
    assert rewards(matrix, [0, 1, 2], [0, 1, 2], 3)[2] == 0.25


@given(rounds())
def test_rewards_in_unit_interval_iff_member_has_rivals_and_other_verifiers(case):
    members, verifiers, drafters, matrix = case
    result = rewards(matrix, verifiers, drafters, members)
    assert len(result) == members
    for i, r in enumerate(result):
        judged = i in drafters and any(v != i for v in verifiers) and any(d != i for d in drafters)
        if judged:
            assert r is not None
            assert 0.0 < r <= 1.0
        else:
            assert r is None


@given(square_matrices())
def test_rewards_match_the_spec_formula(matrix):
    k = len(matrix)
    assert rewards(matrix, list(range(k)), list(range(k)), k) == spec_rewards(matrix)


@given(rounds())
def test_rewards_match_brute_force_for_any_roles(case):
    members, verifiers, drafters, matrix = case
    score = {(v, d): matrix[j][c] for j, v in enumerate(verifiers) for c, d in enumerate(drafters)}
    expected: list[float | None] = [None] * members
    for i in drafters:
        pairs = [(v, d) for v in verifiers for d in drafters if v != i and d != i]
        if pairs:
            wins = sum(score[v, i] >= score[v, d] for v, d in pairs)
            expected[i] = max(wins, 1) / len(pairs)
    assert rewards(matrix, verifiers, drafters, members) == expected


def test_single_member_has_no_reward_and_keeps_full_weight():
    assert rewards([[1.0]], [0], [0], 1) == [None]
    assert hedge_update([1.0], [None], learning_rate=1.0, round_index=1) == [1.0]
    assert select([[1.0]], [1.0]) == 0


@given(square_matrices(min_k=2, max_k=2), st.floats(0.01, 0.99), st.integers(1, 50))
def test_two_members_always_get_reward_one_spec_quirk(matrix, w0, t):
    """Spec quirk: with K = 2 each member has exactly one (verifier, rival) pair, and the
    win count is floored at 1, so both rewards are always 1 and Hedge never moves weights."""
    assert rewards(matrix, [0, 1], [0, 1], 2) == [1.0, 1.0]
    updated = hedge_update([w0, 1.0 - w0], [1.0, 1.0], learning_rate=5.0, round_index=t)
    assert updated == pytest.approx([w0, 1.0 - w0])


def test_two_members_quirk_even_for_unanimous_loser():
    # Both verifiers prefer candidate 0, yet member 1 gets the same reward as member 0.
    assert rewards([[0.9, 0.1], [0.9, 0.1]], [0, 1], [0, 1], 2) == [1.0, 1.0]


# --------------------------------------------------------------------------------------------
# Permutation equivariance
# --------------------------------------------------------------------------------------------


@given(rounds(), st.data())
def test_permuting_members_permutes_rewards_weights_and_selection(case, data):
    members, verifiers, drafters, matrix = case
    perm = data.draw(st.permutations(range(members)))  # old member m -> new member perm[m]
    weights = data.draw(st.lists(positive, min_size=members, max_size=members))
    row_weights = data.draw(st.lists(positive, min_size=len(verifiers), max_size=len(verifiers)))

    # Rows and columns reordered so the permuted role lists stay sorted.
    row_order = sorted(range(len(verifiers)), key=lambda j: perm[verifiers[j]])
    col_order = sorted(range(len(drafters)), key=lambda c: perm[drafters[c]])
    p_verifiers = [perm[verifiers[j]] for j in row_order]
    p_drafters = [perm[drafters[c]] for c in col_order]
    p_matrix = [[matrix[j][c] for c in col_order] for j in row_order]
    p_row_weights = [row_weights[j] for j in row_order]

    base = rewards(matrix, verifiers, drafters, members)
    permuted = rewards(p_matrix, p_verifiers, p_drafters, members)
    for m in range(members):
        assert permuted[perm[m]] == base[m]

    p_weights = [0.0] * members
    p_base = [None] * members
    for m in range(members):
        p_weights[perm[m]] = weights[m]
        p_base[perm[m]] = base[m]
    new = hedge_update(weights, base, learning_rate=2.0, round_index=3)
    p_new = hedge_update(p_weights, p_base, learning_rate=2.0, round_index=3)
    for m in range(members):
        assert p_new[perm[m]] == pytest.approx(new[m], rel=1e-12)

    winner = clear_winner(exact_totals(matrix, row_weights))
    assume(winner is not None)
    assert select(matrix, row_weights) == winner
    assert col_order[select(p_matrix, p_row_weights)] == winner


# --------------------------------------------------------------------------------------------
# hedge_update
# --------------------------------------------------------------------------------------------


@st.composite
def hedge_cases(draw, max_k: int = 6):
    k = draw(st.integers(min_value=1, max_value=max_k))
    weights = draw(st.lists(st.floats(1e-3, 1.0), min_size=k, max_size=k))
    total = math.fsum(weights)
    weights = [w / total for w in weights]
    member_rewards = draw(
        st.lists(st.one_of(st.none(), st.floats(0.0, 1.0)), min_size=k, max_size=k)
    )
    return weights, member_rewards


@given(hedge_cases(), st.floats(0.0, 100.0), st.integers(1, 1000))
def test_hedge_weights_sum_to_one_and_stay_positive(case, lr, t):
    weights, member_rewards = case
    new = hedge_update(weights, member_rewards, lr, t)
    assert len(new) == len(weights)
    assert all(w > 0.0 for w in new)
    assert math.fsum(new) == pytest.approx(1.0)


@given(hedge_cases(), st.integers(1, 1000))
def test_hedge_learning_rate_zero_is_identity(case, t):
    weights, member_rewards = case
    assert hedge_update(weights, member_rewards, 0.0, t) == weights


@given(hedge_cases(), st.floats(0.01, 100.0), st.integers(1, 100))
def test_hedge_matches_the_spec_formula(case, lr, t):
    weights, member_rewards = case
    known = [r for r in member_rewards if r is not None]
    assume(known)
    neutral = sum(known) / len(known)
    eta = lr * math.sqrt(1.0 / len(weights)) / t
    # Exponents here stay below 100, so the plain formula cannot overflow.
    raw = [
        w * math.exp(eta * (neutral if r is None else r))
        for w, r in zip(weights, member_rewards, strict=True)
    ]
    expected = [x / sum(raw) for x in raw]
    assert hedge_update(weights, member_rewards, lr, t) == pytest.approx(expected, rel=1e-9)


@given(
    st.floats(1e-3, 1.0),
    st.floats(1e-3, 1.0),
    st.floats(0.0, 1.0),
    st.floats(1e-3, 1.0),
    st.floats(0.01, 10.0),
    st.integers(1, 1000),
    st.integers(2, 8),
)
def test_higher_reward_gains_weight_relative_to_lower(wa, wb, r_low, gap, lr, t, k):
    r_high = min(r_low + gap, 1.0)
    assume(r_high - r_low >= 1e-3)
    others = k - 2
    weights = [wa, wb] + [0.5] * others
    member_rewards = [r_high, r_low] + [0.5] * others
    new = hedge_update(weights, member_rewards, lr, t)
    assert new[0] / new[1] > wa / wb


@given(hedge_cases(), st.floats(0.1, 10.0), st.integers(2, 1000))
def test_hedge_step_size_shrinks_as_one_over_round(case, lr, t):
    weights, member_rewards = case
    known = [r for r in member_rewards if r is not None]
    assume(len(known) >= 2 and max(known) - min(known) >= 1e-2)
    a = member_rewards.index(max(known))
    b = member_rewards.index(min(known))

    def shift(round_index: int) -> float:
        new = hedge_update(weights, member_rewards, lr, round_index)
        return math.log(new[a] / new[b]) - math.log(weights[a] / weights[b])

    first, later = shift(1), shift(t)
    assert 0.0 < later < first
    assert later * t == pytest.approx(first, rel=1e-6)


@given(hedge_cases(), st.floats(1e3, 1e300), st.integers(1, 10))
def test_hedge_large_learning_rate_does_not_overflow(case, lr, t):
    weights, member_rewards = case
    new = hedge_update(weights, member_rewards, lr, t)
    assert all(math.isfinite(w) and w >= 0.0 for w in new)
    assert math.fsum(new) == pytest.approx(1.0)


@given(st.lists(st.floats(0.1, 1.0), min_size=2, max_size=6, unique=True), st.floats(1e4, 1e12))
def test_hedge_large_learning_rate_concentrates_on_best(member_rewards, lr):
    ordered = sorted(member_rewards)
    assume(ordered[-1] - ordered[-2] >= 0.01)
    k = len(member_rewards)
    new = hedge_update([1.0 / k] * k, member_rewards, lr, 1)
    best = member_rewards.index(ordered[-1])
    assert new[best] == pytest.approx(1.0)


def test_hedge_large_learning_rate_example():
    assert hedge_update([0.5, 0.5], [1.0, 0.0], 1e6, 1) == [1.0, 0.0]


def test_hedge_member_without_reward_is_neutral():
    # The only known reward is also the neutral one, so nothing moves.
    assert hedge_update([0.25, 0.75], [0.3, None], 10.0, 1) == pytest.approx([0.25, 0.75])
    # With rewards 0 and 1, the neutral member (0.5) ends between them.
    new = hedge_update([1 / 3] * 3, [0.0, None, 1.0], 5.0, 1)
    assert new[0] < new[1] < new[2]


@pytest.mark.parametrize("t", [0, -1])
def test_hedge_rejects_non_positive_round_index(t):
    with pytest.raises(ValueError, match="round_index"):
        hedge_update([0.5, 0.5], [1.0, 0.5], 1.0, t)


# --------------------------------------------------------------------------------------------
# select
# --------------------------------------------------------------------------------------------


def test_select_worked_example():
    matrix = [
        [0.5, 0.3, 0.2],
        [0.2, 0.5, 0.3],
        [0.4, 0.4, 0.2],
    ]
    assert select(matrix, [1 / 3] * 3) == 1  # column sums 1.1, 1.2, 0.7
    assert select(matrix, [0.8, 0.1, 0.1]) == 0  # verifier 0 dominates


@given(st.integers(1, 6), st.integers(1, 6), st.data())
def test_select_is_argmax_of_weighted_column_sums(rows, cols, data):
    matrix = normalise(data.draw(score_rows(rows, cols)))
    weights = data.draw(st.lists(positive, min_size=rows, max_size=rows))
    winner = clear_winner(exact_totals(matrix, weights))
    assume(winner is not None)
    assert select(matrix, weights) == winner


@given(st.integers(1, 5), st.integers(1, 6), st.data())
def test_select_ties_go_to_lowest_index(rows, cols, data):
    # Small integers keep every product and sum exact, so ties are real ties.
    small = st.integers(0, 3).map(float)
    matrix = [data.draw(st.lists(small, min_size=cols, max_size=cols)) for _ in range(rows)]
    weights = data.draw(st.lists(small, min_size=rows, max_size=rows))
    totals = [sum(w * row[k] for w, row in zip(weights, matrix, strict=True)) for k in range(cols)]
    assert select(matrix, weights) == totals.index(max(totals))


def test_select_all_equal_picks_first():
    assert select([[0.25] * 4, [0.25] * 4], [0.5, 0.5]) == 0


@given(st.lists(positive, min_size=1, max_size=8), positive)
def test_select_single_verifier_picks_its_best(row, weight):
    (normed,) = normalise([row])
    weighted = [weight * x for x in normed]  # as select sees them, rounding included
    assert select([normed], [weight]) == weighted.index(max(weighted))


def test_rewards_count_the_pairs_of_each_of_a_members_candidates():
    # member 0 drafted candidates 0 and 1, member 1 candidate 2
    matrix = [[0.5, 0.1, 0.4], [0.35, 0.35, 0.3]]
    # member 0, in verifier 1's eyes: both its candidates >= the rival's (2 of 2 pairs);
    # member 1, in verifier 0's eyes: its candidate >= the second, not the first (1 of 2)
    assert rewards(matrix, verifiers=(0, 1), drafters=(0, 0, 1), members=2) == [1.0, 0.5]
