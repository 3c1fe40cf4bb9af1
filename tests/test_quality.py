"""Quality learned apart from health (aisia_plugin/quality.py, docs/quality.md): a success with no
grade never raises a deployment's quality; evidence (feedback, a judge's grade, a signal) moves
it from the prior its operator declared (tier, specialities)."""

from __future__ import annotations

import math
import random

import pytest

from aisia_plugin.engine import Engine
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy
from aisia_plugin.quality import OTHER_PROMPTS, QualityStats, add_evidence, estimate, prior_quality
from helpers import deployment

POLICY = load_policy()
PRIOR = POLICY.quality.prior
MSGS = [{"role": "user", "content": "what is the capital of France?"}]


# The seed's UCB1, by name (auto itself is contextual); the arithmetic below is written for a
# prior of strength 10 (the shipped one is 3: test_the_prior_comes_from_the_declared_tier_and_specialities).
UCB1 = POLICY.model_copy(update={
    "aliases": {**POLICY.aliases, "auto/ucb1": POLICY.aliases["auto"].model_copy(update={"strategy": "ucb1"})},
    "quality": POLICY.quality.model_copy(update={"prior": PRIOR.model_copy(update={"strength": 10.0})})})


def engine(policy=UCB1, seed: int = 0) -> Engine:
    return Engine(policy, clock=lambda: 1000.0, rng=random.Random(seed))


def test_the_prior_comes_from_the_declared_tier_and_specialities():
    assert PRIOR.by_tier == {"ultra": 0.85, "pro": 0.75, "standard": 0.65, "free": 0.55} and PRIOR.strength == 3
    assert prior_quality(deployment("a", tier="ultra"), None, PRIOR) == 0.85
    assert prior_quality(deployment("a", tier="free"), "coding", PRIOR) == 0.55
    assert prior_quality(deployment("a"), None, PRIOR) == PRIOR.untiered == 0.5
    coder = deployment("a", tier="standard", specialities={"coding": None})
    assert prior_quality(coder, "coding", PRIOR) == pytest.approx(0.75)
    assert prior_quality(coder, "math", PRIOR) == prior_quality(coder, None, PRIOR) == 0.65
    top = deployment("a", tier="ultra", specialities={"coding": None})
    assert prior_quality(top, "coding", PRIOR.model_copy(update={"speciality_bonus": 0.5})) == 1.0  # clamped


def test_the_estimate_weighs_the_prior_as_strength_pseudo_observations():
    q = None
    for v in (0.0, 0.0, 1.0):
        q = add_evidence(q, v, 1.0, "feedback", 0.0, 1.0)
    assert q == QualityStats(weight=3.0, total=1.0, feedback=3.0, tick=0.0)
    assert estimate(q, 0.8, 10.0, 0.0, 1.0) == pytest.approx((8.0 + 1.0) / 13.0)
    assert estimate(None, 0.8, 10.0, 0.0, 1.0) == 0.8
    assert estimate(q, 0.8, 0.0, 0.0, 1.0) == pytest.approx(1.0 / 3.0)  # no prior: the evidence alone
    # forgotten as the bandit forgets: one half-life later the evidence weighs half
    gamma = 2.0 ** (-1.0 / 100.0)
    assert estimate(q, 0.8, 10.0, 100.0, gamma) == pytest.approx((8.0 + 0.5) / 11.5)


def test_quality_evidence_forgets_with_its_own_slower_half_life():
    """Health forgets with bandit.forgetting (1,000 requests), quality evidence with
    quality.half_life_requests (10,000): docs/quality.md#how-long-evidence-counts."""
    e = Engine(POLICY, clock=lambda: 1000.0, rng=random.Random(0))
    assert (POLICY.bandit.forgetting.half_life_requests, POLICY.quality.half_life_requests) == (1000, 10000)
    e.record_quality("a", "auto", None, 1.0, "feedback")
    weight = e.store.quality_of("a").weight
    for _ in range(1000):  # a thousand ticks of the store, on another deployment
        e.record("auto", Outcome("b", True, latency_s=0.2))
    # as the stats read it, and as the store adds the next piece to it: a tenth of its half-life
    assert e.store.stats()["a"]["quality"]["evidence_weight"] == pytest.approx(weight * 0.5 ** 0.1)
    e.record_quality("a", "auto", None, 1.0, "feedback")
    assert e.store.quality_of("a").weight == pytest.approx(weight * 0.5 ** 0.1 + weight)
    assert e.gamma ** 1000 == pytest.approx(0.5)  # the arms': one half-life
    off = POLICY.model_copy(update={"bandit": POLICY.bandit.model_copy(update={
        "forgetting": POLICY.bandit.forgetting.model_copy(update={"enabled": False})})})
    assert Engine(off).quality_gamma == 1.0  # forgetting off turns both off


def test_a_thousand_plain_successes_keep_the_prior_quality():
    e = engine()
    pro = deployment("pro-a", tier="pro")
    e.quality.know([pro])  # (a decision remembers the deployments it meets: here none is made)
    for _ in range(1000):
        assert e.record("auto", Outcome(pro.id, True, latency_s=0.3, status_code=200)) == pytest.approx(0.75)
    assert e.quality_estimate(pro.id) == 0.75
    row = e.store.stats()[pro.id]
    assert row["count"] == 1000 and row["error_rate"] == 0.0  # the health learned from every call
    assert row["mean_reward"] == pytest.approx(0.75)  # not 1.0: a success is no quality evidence
    assert row["quality"]["estimate"] == 0.75 and row["quality"]["prior"] == 0.75
    assert row["quality"]["evidence"] == {"prior": 10.0, "feedback": 0.0, "judge": 0.0, "signal": 0.0}
    assert e.store.quality_of(pro.id) is None


def test_feedback_moves_the_estimate_and_the_next_successes_reward():
    e = engine()
    pro = deployment("pro-a", tier="pro")
    e.quality.know([pro])
    for _ in range(1000):
        e.record("auto", Outcome(pro.id, True))
    for _ in range(10):
        assert e.record_quality(pro.id, "auto", None, 0.0, "feedback").value == 0.0
    assert e.quality_estimate(pro.id) == pytest.approx(0.75 * 10 / 20)
    assert e.store.arm(pro.id).count == 1000  # evidence is no call: the health is untouched
    assert e.record("auto", Outcome(pro.id, True)) == pytest.approx(0.375)
    for _ in range(30):
        e.record_quality(pro.id, "auto", None, 1.0, "feedback")
    # (the ten zeros were forgotten by one tick's worth: the success in between)
    assert e.quality_estimate(pro.id) == pytest.approx((7.5 + 30.0) / 50.0, rel=1e-3)
    assert e.store.stats()[pro.id]["quality"]["evidence"]["feedback"] == 40.0


def test_evidence_is_kept_per_domain_when_per_domain_learning_is_on():
    e = engine()
    coder = deployment("coder", tier="standard", specialities={"coding": None})
    e.quality.know([coder])
    assert e.quality_estimate(coder.id, "coding") == pytest.approx(0.75)
    for _ in range(10):
        e.record_quality(coder.id, "auto", "coding", 0.15, "judge")
    assert e.quality_estimate(coder.id, "coding") == pytest.approx((7.5 + 1.5) / 20)
    # the global record learns it too, from its own prior (no speciality bonus)
    assert e.quality_estimate(coder.id) == pytest.approx((6.5 + 1.5) / 20)
    assert e.quality_estimate(coder.id, "math") == 0.65  # no evidence in math
    off = UCB1.model_copy(update={"bandit": POLICY.bandit.model_copy(update={
        "per_domain": POLICY.bandit.per_domain.model_copy(update={"enabled": False})})})
    e2 = engine(off)
    e2.quality.know([coder])
    e2.record_quality(coder.id, "auto", "coding", 0.0, "judge")
    assert e2.store.quality_of(coder.id, "coding") is None and e2.store.quality_of(coder.id).judge == 1
    assert e2.quality_estimate(coder.id, "coding") == e2.quality_estimate(coder.id) == pytest.approx(6.5 / 11)


def test_a_graded_success_is_a_judges_evidence_and_a_failure_no_quality_evidence():
    e = engine()
    e.record("auto", Outcome("a", True, quality=0.25))
    assert e.store.quality_of("a").judge == 1 and e.store.quality_of("a").total == 0.25
    e.record("auto", Outcome("b", False, status_code=503))
    e.record("auto", Outcome("b", False, status_code=400))
    assert e.store.quality_of("b") is None and e.quality_estimate("b") == PRIOR.untiered


@pytest.mark.parametrize("value", [float("nan"), math.inf, -0.1, 1.5, "0.5", None, True])
def test_evidence_that_is_no_number_in_the_unit_interval_records_nothing(value):
    e = engine()
    assert e.record_quality("a", "auto", None, value, "feedback") is None
    assert e.record_quality("a", "auto", None, 0.5, "feedback", weight=-1.0) is None
    assert e.record_quality("a", "auto", None, 0.5, "feedback", weight=float("nan")) is None
    assert e.record_quality("", "auto", None, 0.5, "feedback") is None
    assert e.store.quality_of("a") is None
    with pytest.raises(ValueError, match="feedback, judge, signal"):
        e.record_quality("a", "auto", None, 0.5, "thumbs")


def test_the_declared_tiers_order_the_first_choices_of_ucb1():
    e = engine()
    pool = [deployment("free-a", tier="free"), deployment("std-b", tier="standard"),
            deployment("ultra-c", tier="ultra")]
    chosen = []
    for _ in range(4):
        d = e.decide("auto/ucb1", MSGS, pool)
        chosen.append(d.deployment_id)
        e.record(d, Outcome(d.deployment_id, True, latency_s=0.5))
    # untried first, highest prior first; then the formula, on rewards scored with the priors
    assert chosen == ["ultra-c", "std-b", "free-a", "ultra-c"]
    d = engine().decide("auto/ucb1", MSGS, [pool[0], deployment("pro-d", tier="pro")])
    assert d.deployment_id == "pro-d"
    assert d.reason.endswith("(the highest declared prior quality, 0.75, of the untried)")


def test_without_declared_tiers_untried_deployments_go_in_pool_order_as_in_the_seed():
    e = engine()
    pool = [deployment(i) for i in ("a", "b", "c")]
    chosen = []
    for _ in range(3):
        d = e.decide("auto/ucb1", MSGS, pool)
        chosen.append(d.deployment_id)
        assert d.reason == f"{d.deployment_id} has never been tried: explored first"
        e.record(d, Outcome(d.deployment_id, True))
    assert chosen == ["a", "b", "c"]


def test_the_declared_tiers_order_the_first_choices_of_the_contextual_default():
    assert POLICY.aliases["auto"].strategy == "contextual"
    pool = [deployment("free-a", tier="free"), deployment("std-b", tier="standard"),
            deployment("ultra-c", tier="ultra")]  # the same prices: no cheaper one to prefer
    firsts = [engine(POLICY, seed).decide("auto", MSGS, pool).deployment_id for seed in range(200)]
    # Mostly the highest tier; a lower one explored when its optimistic quality (its prior plus
    # one standard deviation) is within the tolerance of the highest tier's; the free tier's is
    # not while nothing is known of the ultra one (docs/quality.md#the-choice).
    counts = {d.id: firsts.count(d.id) for d in pool}
    assert counts["ultra-c"] > 100 and counts["ultra-c"] > counts["std-b"] > counts["free-a"], counts
    # Once the ultra one's answers are known (its posterior narrows), the free one is tried too.
    later = []
    for seed in range(200):
        e = engine(POLICY, seed)
        for _ in range(30):
            e.record_quality("ultra-c", "auto", OTHER_PROMPTS, 0.8, "signal", 1.0)
        later.append(e.decide("auto", MSGS, pool).deployment_id)
    assert later.count("free-a") > 0, {d.id: later.count(d.id) for d in pool}


def test_the_contextual_decision_states_its_selection_probability():
    from aisia_plugin.strategies.contextual import win_probability

    # the quadrature against a Monte Carlo estimate (a member without spread included)
    means, sds = [0.5, 0.55, 0.4, 0.6], [0.1, 0.05, 0.2, 0.0]
    rng = random.Random(0)
    wins = [0] * 4
    for _ in range(40000):
        draws = [m + s * rng.gauss(0.0, 1.0) for m, s in zip(means, sds)]
        wins[draws.index(max(draws))] += 1
    for k in range(4):
        assert win_probability(means, sds, k) == pytest.approx(wins[k] / 40000, abs=0.01)
    assert sum(win_probability(means, sds, k) for k in range(4)) == pytest.approx(1.0, abs=1e-4)
    assert win_probability([0.5, 0.5], [0.0, 0.0], 0) == 1.0 and win_probability([0.5, 0.5], [0.0, 0.0], 1) == 0.0
    # a decision's: (1 - epsilon) P(its draw wins) + epsilon / n, read when asked for (the decision log)
    eps = POLICY.model_copy(update={"aliases": {**POLICY.aliases, "auto": POLICY.aliases["auto"].model_copy(
        update={"exploration": 0.3})}})
    pool = [deployment("a", tier="pro"), deployment("b", tier="pro"), deployment("c", tier="free")]
    d = engine(eps, 2).decide("auto", MSGS, pool)
    assert 0.1 <= d.probability <= 1.0 and d.as_dict()["probability"] == d.probability


def test_evidence_with_its_decisions_context_teaches_the_contextual_model_that_prompt():
    e = engine(POLICY, 4)
    pool = [deployment("a", tier="pro"), deployment("b", tier="pro")]
    code = [{"role": "user", "content": "write a python function that reverses a linked list"}]
    d = e.decide("auto", code, pool)
    e.record(d, Outcome(d.deployment_id, True))  # a plain success: the same reward for every prompt
    before = e.decide("auto", code, pool).scores
    for _ in range(5):
        e.record_quality(d.deployment_id, "auto", d.domain, 0.0, "signal", context=d.context)
    after = {s.id: s.terms["predicted"] for s in e.decide("auto", code, pool).scores}
    was = {s.id: s.terms["predicted"] for s in before}
    assert after[d.deployment_id] < was[d.deployment_id] - 0.05  # this prompt's prediction fell
    other = next(p.id for p in pool if p.id != d.deployment_id)
    assert after[other] == pytest.approx(was[other], abs=1e-9)
