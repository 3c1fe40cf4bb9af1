"""The bandit's fast paths against their reference definitions: arm_view against
decayed + blend, ucb1_scores against the seed's terms, beta_sample against Beta's moments and
against random.betavariate's distribution."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import arm_history

from aisia_plugin.bandit import (ArmStats, arm_view, beta_draws, beta_sample, blend, bonus_columns, cost_bonus, decayed,
                                 exploration_term, latency_bonus, ucb1_scores, ucb1_terms)

FRESH = ArmStats(avg_latency=5.0)


@settings(max_examples=300, deadline=None)
@given(g_seed=st.integers(0, 10_000), g_n=st.integers(0, 30), d_seed=st.integers(0, 10_000), d_n=st.integers(0, 30),
       has_g=st.booleans(), has_d=st.booleans(), gamma=st.sampled_from([1.0, 0.999, 0.95]),
       tick=st.sampled_from([0.0, 3.0, 400.0, 5000.0]), prior=st.sampled_from([None, 1.0, 5.0, 50.0]))
def test_arm_view_is_decayed_then_blended(g_seed, g_n, d_seed, d_n, has_g, has_d, gamma, tick, prior):
    g = arm_history(g_seed, g_n, gamma) if has_g else None
    d = arm_history(d_seed, d_n, gamma) if has_d else None
    seen = decayed(g, tick, gamma) if g is not None else FRESH
    want = seen if prior is None else blend(seen, decayed(d, tick, gamma) if d is not None else None, prior)
    got = arm_view(g, d, tick, gamma, prior, FRESH)
    for name in ArmStats.__slots__:
        assert math.isclose(getattr(got, name), getattr(want, name), rel_tol=1e-12, abs_tol=1e-12), name


def test_ucb1_scores_match_the_seed_terms():
    arms = [ArmStats(pulls=10, total_reward=8.5, avg_latency=0.4), ArmStats(pulls=3, total_reward=1.0, avg_latency=12.0),
            ArmStats(pulls=1, total_reward=0.2, avg_latency=45.0)]
    costs = [0.2, 12.0, 5.0]
    scores = ucb1_scores([a.pulls for a in arms], [a.total_reward for a in arms], [a.avg_latency for a in arms], costs,
                         14.0, c=math.sqrt(2), cost_weight=0.1, latency_weight=0.15)
    for s, cost, score in zip(arms, costs, scores):
        t = ucb1_terms(s, 14.0, c=math.sqrt(2), cost_per_1m=cost, cost_weight=0.1, latency_weight=0.15)
        assert t["cost_bonus"] == cost_bonus(cost, 0.1) and t["latency_bonus"] == latency_bonus(s.avg_latency, 0.15)
        assert t["exploration"] == exploration_term(14.0, s.pulls, math.sqrt(2))
        assert t["mean_reward"] == s.mean_reward
        assert score == t["score"] == t["mean_reward"] + t["exploration"] + t["cost_bonus"] + t["latency_bonus"]
    # A cost above the scale earns no bonus, nor a latency above 30 s; an untried arm's terms are infinite.
    assert cost_bonus(12.0, 0.1) == 0.0 and latency_bonus(45.0, 0.15) == 0.0
    assert ucb1_terms(ArmStats(), 14.0, c=1.0, cost_per_1m=1.0, cost_weight=0.1, latency_weight=0.1)["score"] == math.inf


def test_the_seed_bonuses_have_one_home():
    """Issue 11, the house: the cost and latency bonuses are written once (bandit.bonus_columns);
    UCB1's score, Thompson's bonus and the explanation's terms read them from there."""
    from types import SimpleNamespace

    from aisia_plugin.decision import Candidate, Deployment, Pool
    from aisia_plugin.strategies.bandit import bandit_bonuses

    costs, latencies = [0.2, 5.0, 12.0, math.nan, 0.0], [1.0, 10.0, 45.0, math.nan, 30.0]
    cb, lb = bonus_columns(costs, latencies, 0.1, 0.15)
    # docs/design.md#cost-and-latency-bonuses: max(0, 1 - cost / 10) * 0.1 and
    # max(0, 1 - latency / 30) * 0.15; NaN earns nothing.
    assert cb == pytest.approx([0.098, 0.05, 0.0, 0.0, 0.1]) and lb == pytest.approx([0.145, 0.1, 0.0, 0.0, 0.0])
    assert [cost_bonus(c, 0.1) for c in costs] == cb and [latency_bonus(t, 0.15) for t in latencies] == lb
    pool = Pool.of([Candidate(Deployment(id=f"d{i}", model_name="g", model="p/m", provider="p", input_cost_per_1m=c,
                                         output_cost_per_1m=c), ArmStats(pulls=1.0, avg_latency=t))
                    for i, (c, t) in enumerate(zip(costs, latencies))])
    ctx = SimpleNamespace(cost_weight=0.1, latency_weight=0.15, cost_scale_per_1m=10.0, latency_scale_s=30.0)
    assert bandit_bonuses(pool, ctx) == [a + b for a, b in zip(cb, lb)]


@pytest.mark.parametrize("a,b", [(1.0, 1.0), (3.0, 1.0), (1.0, 4.0), (1.5, 1.5), (2.0, 5.0), (5.0, 2.0),
                                 (10.0, 990.0), (990.0, 10.0), (1.01, 1.02), (30.5, 70.2), (0.5, 0.7)])
def test_beta_sample_has_the_moments_of_beta(a, b):
    r = random.Random(42)
    xs = [beta_sample(r, a, b) for _ in range(40_000)]
    assert all(0.0 <= x <= 1.0 for x in xs)
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    sd_of_mean = math.sqrt(var / len(xs))
    assert abs(statistics.fmean(xs) - mean) < 5 * sd_of_mean
    assert abs(statistics.pvariance(xs) - var) < 0.05 * var


@pytest.mark.parametrize("a,b", [(2.0, 5.0), (1.3, 7.7), (40.0, 3.0)])
def test_beta_sample_matches_betavariate_in_distribution(a, b):
    # Two-sample Kolmogorov-Smirnov statistic against the standard library's sampler.
    n = 20_000
    r1, r2 = random.Random(1), random.Random(2)
    xs = sorted(beta_sample(r1, a, b) for _ in range(n))
    ys = sorted(r2.betavariate(a, b) for _ in range(n))
    i = j = 0
    d = 0.0
    while i < n and j < n:
        if xs[i] <= ys[j]:
            i += 1
        else:
            j += 1
        d = max(d, abs(i - j) / n)
    # Critical value at alpha = 0.001: 1.95 * sqrt(2 / n).
    assert d < 1.95 * math.sqrt(2 / n)


def test_beta_sample_is_reproducible_with_a_seed():
    assert [beta_sample(random.Random(7), 3.5, 2.5) for _ in range(3)] == [beta_sample(random.Random(7), 3.5, 2.5)] * 3


def test_beta_draws_are_one_beta_sample_per_pair_in_order():
    shapes = [(1.0, 1.0), (3.0, 1.0), (1.0, 4.0), (0.5, 0.7), (30.5, 70.2), (990.0, 10.0), (2.0, 5.0)]
    r1, r2 = random.Random(11), random.Random(11)
    one_by_one = [beta_sample(r1, a, b) for a, b in shapes]
    assert beta_draws(r2, [a for a, _ in shapes], [b for _, b in shapes]) == one_by_one
    assert r1.random() == r2.random()  # the same uniforms consumed


def test_beta_draws_survive_unusable_shapes():
    # A corrupted state (NaN, infinite, zero or negative counts) must never hang or raise.
    r = random.Random(3)
    bad = [math.nan, math.inf, -math.inf, 0.0, -2.0]
    for a in bad + [0.5, 1.0, 3.0, 1e300]:
        for b in bad + [0.5, 1.0, 3.0, 1e300]:
            (x,) = beta_draws(r, [a], [b])
            assert 0.0 <= x <= 1.0, (a, b, x)


def test_reward_is_the_weighted_mean_of_the_known_terms():
    from aisia_plugin.outcome import Outcome, reward
    from aisia_plugin.policy.models import Reward

    cfg = Reward(quality_weight=0.5, latency_weight=0.25, feedback_weight=0.25, failure_reward=0.1)
    # quality 0.8, latency at half the target (its term clamped to 1), no feedback: (0.5*0.8 + 0.25*1) / 0.75
    assert reward(Outcome("a", True, latency_s=0.5, quality=0.8), cfg, 1000.0, 0.3) == pytest.approx(0.65 / 0.75)
    # latency twice the target (0.5), feedback 0; no grade: the plain quality 0.3
    assert reward(Outcome("a", True, latency_s=2.0, feedback=0.0), cfg, 1000.0, 0.3) == pytest.approx(
        (0.5 * 0.3 + 0.25 * 0.5 + 0.0) / 1.0)
    assert reward(Outcome("a", False, latency_s=0.1, quality=1.0), cfg, 1000.0, 0.3) == 0.1  # failure_reward
    none = Reward(quality_weight=0.0, latency_weight=0.0, feedback_weight=0.0, failure_reward=0.0)
    assert reward(Outcome("a", True, quality=0.2), none, 1000.0, 0.3) == 1.0  # no weight at all
    assert reward(Outcome("a", True, quality=7.0, feedback=-3.0), cfg, 1000.0, 0.3) == pytest.approx(0.5 / 0.75)
