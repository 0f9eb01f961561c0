"""Properties of the per-byte policies ("pool", "peer"): per-byte scores, peer rewards that
move for any K >= 2, the constant Hedge step, and selection."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from specem_chain.engine import EngineConfig
from specem_chain.engine.policy import (
    POOL_STEP,
    Peer,
    Pool,
    Verification,
    hedge_step,
    peer_rewards,
    per_unit,
    softmax_rows,
)

logprob = st.floats(min_value=-8.0, max_value=-0.01, allow_nan=False)


@st.composite
def verifications(draw, min_k: int = 2, max_k: int = 5) -> Verification:
    """K members that all draft and verify; random per-token means, lengths and bytes."""
    k = draw(st.integers(min_value=min_k, max_value=max_k))
    units = tuple(draw(st.lists(st.integers(1, 60), min_size=k, max_size=k)))
    return Verification(
        members=k,
        drafters=tuple(range(k)),
        verifiers=tuple(range(k)),
        means=tuple(tuple(draw(st.lists(logprob, min_size=k, max_size=k))) for _ in range(k)),
        tokens=tuple(
            tuple(draw(st.lists(st.integers(1, 20), min_size=k, max_size=k))) for _ in range(k)
        ),
        units=units,
    )


def two(l11: float, l12: float, l21: float, l22: float) -> Verification:
    """Two members, one token and one byte per candidate, so l[j][k] is the mean."""
    return Verification(2, (0, 1), (0, 1), ((l11, l12), (l21, l22)), ((1, 1), (1, 1)), (1, 1))


def test_per_unit_is_total_log_prob_per_byte():
    v = Verification(2, (0, 1), (0, 1), ((-1.0, -2.0), (-0.5, -3.0)), ((4, 2), (2, 6)), (8, 3))
    assert per_unit(v) == [[-0.5, -4 / 3], [-0.125, -6.0]]


@given(st.lists(st.lists(logprob, min_size=1, max_size=5), min_size=1, max_size=4))
@example(rows=[[-0.01, -0.010000000000000002]])
def test_softmax_rows_are_probabilities_ordered_as_the_scores(rows):
    for row, probs in zip(rows, softmax_rows(rows)):
        assert math.fsum(probs) == pytest.approx(1.0)
        assert all(p > 0 for p in probs)
        # softmax keeps the order; scores within rounding of each other may tie (the
        # example above, one ulp apart)
        for a, b in itertools.permutations(range(len(row)), 2):
            assert row[a] < row[b] or probs[a] >= probs[b]


def test_two_members_rewards_go_to_the_draft_both_verifiers_favour_together():
    # member 0's draft: 0 likes it (-0.2), 1 finds it fair (-1.0): total -1.2
    # member 1's draft: 0 finds it poor (-3.0), 1 likes it (-0.1): total -3.1
    assert peer_rewards(per_unit(two(-0.2, -3.0, -1.0, -0.1)), (0, 1), (0, 1), 2) == [1.0, 0.0]
    # the other way round when member 0 concedes more than member 1 does
    assert peer_rewards(per_unit(two(-0.2, -0.3, -3.0, -0.1)), (0, 1), (0, 1), 2) == [0.0, 1.0]
    assert peer_rewards(per_unit(two(-1.0, -2.0, -2.0, -1.0)), (0, 1), (0, 1), 2) == [0.5, 0.5]


@given(verifications(min_k=2, max_k=2))
def test_two_members_rewards_are_not_constant(v):
    """Unlike the paper's floored win rate (always 1 with two members)."""
    ell = per_unit(v)
    rewards = peer_rewards(ell, v.verifiers, v.drafters, 2)
    margin = ell[0][0] + ell[1][0] - ell[0][1] - ell[1][1]
    assume(abs(margin) > 1e-9)  # a tie summed in another order may round either way
    assert rewards == ([1.0, 0.0] if margin > 0 else [0.0, 1.0])


@given(verifications(min_k=3, max_k=5), st.data())
def test_a_verifiers_score_of_its_own_draft_never_enters_a_comparison(v, data):
    """Rewards never compare a verifier's own draft in its own eyes alone: changing how
    a member scores its own draft moves no reward unless its rival's score moves too."""
    ell = per_unit(v)
    i = data.draw(st.integers(0, v.members - 1))
    bumped = [list(row) for row in ell]
    bumped[i][i] += data.draw(st.floats(0.5, 5.0))
    before = peer_rewards(ell, v.verifiers, v.drafters, v.members)
    after = peer_rewards(bumped, v.verifiers, v.drafters, v.members)
    # only the cross comparisons of member i (with each rival) can change, in i's favour
    assert after[i] >= before[i]
    for k in range(v.members):
        if k != i:
            assert after[k] <= before[k]


@given(verifications(), st.data())
def test_rewards_permute_with_the_members(v, data):
    order = data.draw(st.permutations(list(range(v.members))))
    ell = per_unit(v)
    permuted = [[ell[order[j]][order[k]] for k in range(v.members)] for j in range(v.members)]
    original = peer_rewards(ell, v.verifiers, v.drafters, v.members)
    moved = peer_rewards(permuted, v.verifiers, v.drafters, v.members)
    assert moved == [original[order[k]] for k in range(v.members)]


@given(verifications())
def test_rewards_lie_in_the_unit_interval_and_average_one_half(v):
    rewards = peer_rewards(per_unit(v), v.verifiers, v.drafters, v.members)
    assert all(r is not None and 0.0 <= r <= 1.0 for r in rewards)
    assert math.fsum(r for r in rewards if r is not None) / v.members == pytest.approx(0.5)


def test_a_lone_candidate_or_verifier_gives_no_reward():
    alone = Verification(2, (0,), (0, 1), ((-1.0,), (-2.0,)), ((1,), (1,)), (1,))
    assert peer_rewards(per_unit(alone), alone.verifiers, alone.drafters, 2) == [None, None]


@given(
    st.lists(st.floats(0.01, 1.0), min_size=2, max_size=5),
    st.data(),
    st.floats(0.01, 5.0),
)
def test_hedge_step_is_a_constant_multiplicative_step(weights, data, step):
    total = math.fsum(weights)
    weights = [w / total for w in weights]
    rewards = data.draw(st.lists(st.floats(0, 1), min_size=len(weights), max_size=len(weights)))
    new = hedge_step(weights, rewards, step)
    assert math.fsum(new) == pytest.approx(1.0)
    for a in range(len(weights)):
        for b in range(len(weights)):
            ratio = math.log(new[a] / new[b]) - math.log(weights[a] / weights[b])
            assert ratio == pytest.approx(step * (rewards[a] - rewards[b]), abs=1e-9)


def test_hedge_step_keeps_a_dropped_member_at_zero_and_treats_no_reward_as_neutral():
    assert hedge_step([0.0, 0.5, 0.5], [None, 1.0, 0.0], 1.0)[0] == 0.0
    new = hedge_step([0.25, 0.25, 0.5], [None, 1.0, 0.0], 1.0)
    assert new[0] / new[2] == pytest.approx(math.exp(0.5) * 0.5)


def test_pool_picks_the_weighted_per_byte_favourite_with_the_weights_before_the_round():
    v = two(-0.2, -3.0, -1.0, -0.1)
    assert Pool().judge(v, [0.5, 0.5], 1).winner == 0  # -1.2 against -3.1 in total
    heavy_one = Pool().judge(v, [0.05, 0.95], 1)
    assert heavy_one.winner == 1  # member 1 trusted: its view (-1.0 vs -0.1) decides
    assert heavy_one.rewards == [1.0, 0.0]  # rewards do not depend on the weights
    assert heavy_one.weights[0] / heavy_one.weights[1] == pytest.approx(
        0.05 / 0.95 * math.exp(POOL_STEP)
    )
    assert heavy_one.matrix == softmax_rows(per_unit(v))


def test_learning_rate_zero_keeps_the_weights():
    v = two(-0.2, -3.0, -1.0, -0.1)
    assert Pool(learning_rate=0.0).judge(v, [0.3, 0.7], 4).weights == [0.3, 0.7]


@given(verifications(min_k=2, max_k=2), st.floats(0.01, 0.99))
def test_peer_with_two_members_is_the_equal_weight_pool_whatever_the_weights(v, weight):
    ell = per_unit(v)
    assume(abs(ell[0][0] + ell[1][0] - ell[0][1] - ell[1][1]) > 1e-9)
    assert Peer().judge(v, [weight, 1 - weight], 1).winner == Pool().judge(v, [0.5, 0.5], 1).winner


@given(verifications(min_k=3, max_k=5), st.data())
def test_peer_never_uses_a_verifiers_opinion_of_its_own_draft(v, data):
    """With three members or more, any change to the scores members give their own drafts
    leaves the winner as it was."""
    self_scores = data.draw(st.lists(logprob, min_size=v.members, max_size=v.members))
    means = [list(row) for row in v.means]
    for k in range(v.members):
        means[k][k] = self_scores[k]
    changed = replace(v, means=tuple(map(tuple, means)))
    weights = data.draw(st.lists(st.floats(0.05, 1.0), min_size=v.members, max_size=v.members))
    assert Peer().judge(changed, weights, 1).winner == Peer().judge(v, weights, 1).winner


def test_peer_lets_third_parties_decide():
    """Member 0 loves its own draft; the two others prefer member 1's: 1 wins under peer,
    0 under an equal-weight pool."""
    v = Verification(
        3,
        (0, 1, 2),
        (0, 1, 2),
        ((-0.01, -6.0, -6.0), (-2.0, -1.0, -3.0), (-2.0, -1.0, -0.5)),
        ((1, 1, 1),) * 3,
        (1, 1, 1),
    )
    assert Pool().judge(v, [1 / 3] * 3, 1).winner == 0
    assert Peer().judge(v, [1 / 3] * 3, 1).winner == 1


def test_per_byte_policies_refuse_raw_logit_scoring():
    with pytest.raises(ValueError, match="needs scoring='mean_logprob'"):
        EngineConfig(policy="pool", scoring="mean_logit")
    assert EngineConfig(policy="paper", scoring="mean_logit").round_policy() is not None


def test_a_members_two_candidates_are_each_compared_with_its_rivals_never_with_each_other():
    # member 0 drafted candidates 0 and 1, member 1 candidate 2; one token and byte each
    def case(l1_of_second: float) -> Verification:
        means = ((-0.2, -0.4, -3.0), (-1.0, l1_of_second, -0.1))
        return Verification(2, (0, 0, 1), (0, 1), means, ((1, 1, 1), (1, 1, 1)), (1, 1, 1))

    # first vs rival: 1 concedes 0.9 to it, 0 concedes 2.8 to the rival's: the first wins;
    # second vs rival: 1 concedes 4.9, 0 concedes 2.6: the rival wins
    split = case(-5.0)
    assert peer_rewards(per_unit(split), split.verifiers, split.drafters, 2) == [0.5, 0.5]
    both = case(-1.0)
    assert peer_rewards(per_unit(both), both.verifiers, both.drafters, 2) == [1.0, 0.0]


@given(verifications(min_k=2, max_k=4), st.data())
def test_a_repeated_candidate_of_one_member_leaves_the_rewards_as_they_were(v, data):
    """A member's second candidate that equals its first (the same scores from every
    verifier) gives it the same comparisons twice: the same share of wins."""
    i = data.draw(st.integers(0, v.members - 1))
    twice = Verification(
        v.members,
        (*v.drafters, i),
        v.verifiers,
        tuple((*row, row[i]) for row in v.means),
        tuple((*row, row[i]) for row in v.tokens),
        (*v.units, v.units[i]),
    )
    once = peer_rewards(per_unit(v), v.verifiers, v.drafters, v.members)
    again = peer_rewards(per_unit(twice), twice.verifiers, twice.drafters, twice.members)
    assert again[i] == pytest.approx(once[i])


@pytest.mark.parametrize("policy", [Pool(), Peer()])
def test_one_member_with_two_drafts_takes_the_one_it_finds_likelier_per_byte(policy):
    # 3 tokens of -0.5 over 4 bytes against 2 tokens of -1.0 over 4 bytes
    v = Verification(1, (0, 0), (0,), ((-0.5, -1.0),), ((3, 2),), (4, 4))
    judged = policy.judge(v, [1.0], 1)
    assert judged.winner == 0 and judged.rewards == [None] and judged.weights == [1.0]
