"""The contextual strategy's cost-aware choice (docs/quality.md#the-choice): the cheapest
candidate whose sampled quality is within the tolerance of the best one's; the base drawn from
the quality estimate's posterior, which only evidence narrows."""

import random

import pytest

from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.policy.loader import load_policy
from aisia_plugin.quality import OTHER_PROMPTS, QualityStats, posterior
from aisia_plugin.outcome import Outcome
from aisia_plugin.pacing import BY_BUDGET, BY_TARGET
from aisia_plugin.strategies.contextual import cheapest_within, choice_probability, paced_tolerance


def test_the_cheapest_within_the_tolerance_of_the_best_prediction_is_chosen():
    means, costs, none = [0.90, 0.84, 0.70], [30.0, 1.0, 0.1], [0.0, 0.0, 0.0]
    scores = list(means)
    draws = list(means)  # (no spread: each draw is its mean)
    assert cheapest_within(means, none, draws, scores, costs, 0.1) == 1  # 0.84 is within 0.1 of 0.90, and cheaper
    assert cheapest_within(means, none, draws, scores, costs, 0.05) == 0  # 0.84 is not within 0.05
    assert cheapest_within(means, none, draws, scores, costs, 0.25) == 2  # all within: the cheapest
    assert cheapest_within(means, none, draws, [0.9, 0.84, 0.95], costs, 0.0) == 2  # 0: the highest score, bonuses included


def test_a_candidate_with_thin_evidence_may_be_within_and_narrower_evidence_decides():
    # 0.15 below the best: one standard deviation of 0.10 reaches the floor (0.80), 0.02 does not.
    means, costs, scores = [0.90, 0.75], [30.0, 1.0], [0.9, 0.75]
    assert cheapest_within(means, [0.02, 0.10], means, scores, costs, 0.1) == 1
    assert cheapest_within(means, [0.02, 0.02], means, scores, costs, 0.1) == 0
    # The best prediction always qualifies, whatever its spread.
    assert cheapest_within([0.5, 0.2], [0.0, 0.0], [0.5, 0.2], [0.5, 0.2], [1.0, 0.1], 0.1) == 0


def test_a_candidate_below_the_bar_is_within_when_its_draw_reaches_it():
    # The bar: 0.92 + 0.02 - 0.15 = 0.79. The cheap one's optimistic quality (0.50 + 0.20) is below
    # it: in on a draw of 0.80, out on one of 0.60 (a run of bad first answers is not final).
    means, sds, scores, costs = [0.92, 0.50], [0.02, 0.20], [0.92, 0.5], [30.0, 1.0]
    assert cheapest_within(means, sds, [0.92, 0.80], scores, costs, 0.15) == 1
    assert cheapest_within(means, sds, [0.92, 0.60], scores, costs, 0.15) == 0
    # As often as its posterior reaches the bar: P(N(0.5, 0.2) >= 0.79) = 0.074.
    p = choice_probability(means, sds, [0.0, 0.0], costs, 0.15, 1, draws=4000)
    assert 0.055 < p < 0.095
    # Narrower evidence at the same mean: almost never.
    assert choice_probability(means, [0.02, 0.05], [0.0, 0.0], costs, 0.15, 1, draws=4000) < 0.001


def test_equal_prices_go_to_the_higher_score_then_to_pool_order():
    assert cheapest_within([0.8, 0.85], [0.0, 0.0], [0.8, 0.85], [0.8, 0.85], [1.0, 1.0], 0.1) == 1
    assert cheapest_within([0.8, 0.8], [0.0, 0.0], [0.8, 0.8], [0.8, 0.8], [1.0, 1.0], 0.1) == 0


def test_the_choice_probability_is_the_share_of_draws_the_rule_picks():
    # Two candidates far apart in price, 0.05 apart in quality, tolerance 0.1: the cheap one
    # always (the rule reads the predictions); equal prices: each as often as its score is the higher.
    means, sds, bonus, costs = [0.90, 0.85], [0.02, 0.02], [0.0, 0.0], [30.0, 1.0]
    assert choice_probability(means, sds, bonus, costs, 0.1, 1) == 1.0
    assert choice_probability(means, sds, bonus, costs, 0.1, 0) == 0.0
    tied = choice_probability(means, [0.05, 0.05], bonus, [1.0, 1.0], 0.1, 1)
    assert 0.1 < tied < 0.45, tied  # 0.05 behind with a 0.07 spread of the difference: about 0.24
    assert choice_probability(means, sds, bonus, costs, 0.1, 1) == choice_probability(means, sds, bonus, costs, 0.1, 1)


def test_the_posterior_narrows_with_evidence_only():
    m0, v0 = posterior(None, 0.5, 3.0, 0.0, 1.0)
    assert m0 == 0.5 and v0 == pytest.approx(0.25 / 4.0)
    q = QualityStats(weight=20.0, total=18.0)
    m1, v1 = posterior(q, 0.5, 3.0, 0.0, 1.0)
    assert m1 == pytest.approx((1.5 + 18.0) / 23.0) and v1 == pytest.approx(m1 * (1 - m1) / 24.0) and v1 < v0


def _engine(seed: int) -> Engine:
    return Engine(load_policy([]), clock=lambda: 0.0, rng=random.Random(seed))


DEPS = [Deployment("frontier", "frontier", "x/frontier", "x", tier="ultra", input_cost_per_1m=10.0,
                   output_cost_per_1m=30.0),
        Deployment("cheap", "cheap", "x/cheap", "x", tier="free", input_cost_per_1m=0.3, output_cost_per_1m=0.9)]
MSGS = [{"role": "user", "content": "Who was Ada Lovelace and why is she remembered?"}]


def _share_cheap(evidence_cheap: float, value: float = 0.95, seeds=range(60)) -> float:
    got = 0
    for seed in seeds:
        e = _engine(seed)
        # Recorded where the proxy records what is said of answers to prompts of no declared
        # domain, such as MSGS: their own record (quality.OTHER_PROMPTS). The frontier's answers
        # read as conversation signals read a good deployment's (about 0.85).
        for _ in range(int(evidence_cheap)):
            e.record_quality("cheap", "auto", OTHER_PROMPTS, value, "signal", 1.0)
        for _ in range(40):
            e.record_quality("frontier", "auto", OTHER_PROMPTS, 0.85, "signal", 1.0)
        d = e.decide("auto", MSGS, DEPS)
        got += d.deployment_id == "cheap"
    return got / len(seeds)


def test_a_cheap_deployment_is_tried_then_kept_or_dropped_by_its_evidence():
    # Unknown, the cheap one's wide posterior reaches the tolerance (optimism): it is tried. Its
    # answers judged poor, it is left out; judged good, it keeps the traffic its price justifies.
    unknown, poor, good = _share_cheap(0), _share_cheap(60, 0.3), _share_cheap(60, 0.9)
    assert unknown > 0.9 and poor < 0.05 and good > 0.9, (unknown, poor, good)


def test_the_reason_says_when_a_cheaper_candidate_was_chosen_within_the_tolerance():
    e = _engine(1)
    for _ in range(60):
        e.record_quality("cheap", "auto", OTHER_PROMPTS, 1.0, "signal", 1.0)
        e.record_quality("frontier", "auto", OTHER_PROMPTS, 1.0, "signal", 1.0)
    reasons = [e.decide("auto", MSGS, DEPS) for _ in range(20)]
    within = [d for d in reasons if "within the quality tolerance 0.1" in d.reason]
    assert within and all(d.deployment_id == "cheap" for d in within)


def test_a_paced_decision_scales_the_tolerance_by_the_pacing_multiplier():
    assert paced_tolerance(0.18, 1.0, BY_TARGET) == 0.18  # the alias's own
    assert paced_tolerance(0.18, 3.0, BY_TARGET) == pytest.approx(0.54)  # a target to keep under: wider, cheaper
    # At 0 or below: the highest score.
    assert paced_tolerance(0.18, 0.0, BY_TARGET) == 0.0 and paced_tolerance(0.18, -2.0, BY_TARGET) == 0.0
    # A budget's ramp acts through the cost bonus alone: the highest score at any multiplier.
    assert paced_tolerance(0.18, 3.0, BY_BUDGET) == 0.0


def _paced_engine(tmp_path, seed: int, cost_usd: float) -> Engine:
    # `auto` (contextual, tolerance 0.18) with a spend target of $2 per 1k; the frontier's answers
    # read 0.9, the cheap one's 0.6: 0.3 apart, outside the alias's own tolerance. One call at
    # `cost_usd` moves the multiplier from 1: at twice the target to 2, free to 0.
    (tmp_path / "paced.yaml").write_text("version: 1\naliases:\n  auto: {budget: {target_usd_per_1k_requests: 2}}\n")
    e = Engine(load_policy([tmp_path / "paced.yaml"]), clock=lambda: 0.0, rng=random.Random(seed))
    for _ in range(200):
        e.record_quality("cheap", "auto", OTHER_PROMPTS, 0.6, "signal", 1.0)
        e.record_quality("frontier", "auto", OTHER_PROMPTS, 0.9, "signal", 1.0)
    e.record("auto", Outcome("frontier", success=True, latency_s=0.5, cost_usd=cost_usd))
    return e


def test_a_spend_target_overspent_sends_the_contextual_choice_to_the_cheaper_deployment(tmp_path):
    over = [_paced_engine(tmp_path, s, 0.004) for s in range(20)]
    under = [_paced_engine(tmp_path, s, 0.0) for s in range(20)]
    assert all(e.store.pace("auto").multiplier == 2.0 for e in over)
    assert all(e.store.pace("auto").multiplier == 0.0 for e in under)
    cheap_over = sum(e.decide("auto", MSGS, DEPS).deployment_id == "cheap" for e in over)
    cheap_under = sum(e.decide("auto", MSGS, DEPS).deployment_id == "cheap" for e in under)
    # Unpaced, 0.3 apart is outside the tolerance: the frontier. At a multiplier of 2 the tolerance
    # is 0.36: the cheap one (its cost bonus, 2 x the weight, could not bridge 0.3 alone); at 0 the
    # highest score: the frontier.
    assert cheap_over == 20 and cheap_under == 0, (cheap_over, cheap_under)
