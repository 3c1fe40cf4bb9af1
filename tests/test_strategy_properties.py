"""Properties every registered strategy keeps on random pools, and bandit convergence.

Scores must be finite, except UCB1's untried candidates which score +inf by design (they are
explored first); OPEN candidates that did not compete have no score (None)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import context

from aisia_plugin import plugins
from aisia_plugin.bandit import ArmStats, update
from aisia_plugin.decision import Candidate, Deployment
from aisia_plugin.policy.models import Sla


def _unique_strategies():
    seen, out = set(), []
    for name, s in sorted(plugins.strategies().items()):
        if id(s) not in seen:
            seen.add(id(s))
            out.append(s.name)
    return out


STRATEGY_NAMES = _unique_strategies()
money = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
ms = st.floats(min_value=0.0, max_value=120_000.0, allow_nan=False)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def arm_stats(draw):
    pulls = draw(st.sampled_from([0.0, 0.5, 1.0, 3.0, 50.0, 1000.0]))
    mean = draw(unit)
    return ArmStats(pulls=pulls, total_reward=pulls * mean, alpha=1.0 + draw(st.floats(0, 500)),
                    beta=1.0 + draw(st.floats(0, 500)), avg_latency=draw(st.floats(0, 60)),
                    failures=pulls * draw(unit), count=int(pulls))


@st.composite
def candidates(draw, i):
    provider = draw(st.sampled_from(["p0", "p1", "p2"]))
    d = Deployment(id=f"d{i}", model_name="g", model=f"{provider}/m{i}", provider=provider,
                   tier=draw(st.sampled_from([None, "ultra", "pro", "standard", "free"])),
                   input_cost_per_1m=draw(money), output_cost_per_1m=draw(money))
    return Candidate(deployment=d, stats=draw(arm_stats()), breaker=draw(st.sampled_from(["CLOSED", "HALF_OPEN", "OPEN"])),
                     p95_latency_ms=draw(ms), latency_stddev_ms=draw(ms), error_rate=draw(unit), task_fit=draw(unit),
                     quota=draw(unit), signals=draw(st.sampled_from([{}, {"context_affinity": 0.9, "cache_affinity": 1.0}])))


@st.composite
def pools(draw):
    n = draw(st.integers(1, 5))
    return [draw(candidates(i)) for i in range(n)]


@st.composite
def contexts(draw, pool):
    sla = draw(st.one_of(st.none(), st.builds(
        Sla, target_p95_ms=st.floats(1, 10_000), max_error_rate=st.floats(0, 0.5),
        max_cost_per_1m=st.one_of(st.none(), st.floats(0, 50)), hard_constraints=st.booleans())))
    return context(
        pool, specificity=draw(st.one_of(st.none(), unit)), task_type="coding",
        seed=draw(st.integers(0, 2**32)), exploration=draw(st.sampled_from([0.0, 0.0, 0.3, 1.0])),
        tier_hint=draw(st.sampled_from([None, "ultra", "pro", "standard", "free"])), sla=sla,
        last_known_good=draw(st.sampled_from([None, "d0", "d1", "p0", "p2", "missing"])),
        lkgp_enabled=draw(st.booleans()))


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decision_properties(name, data):
    pool = data.draw(pools())
    context = data.draw(contexts(pool))
    d = plugins.get_strategy(name).select(pool, context)
    ids = {c.id for c in pool}
    assert d.deployment_id in ids
    chosen = next(c for c in pool if c.id == d.deployment_id)
    if any(c.breaker != "OPEN" for c in pool):
        assert chosen.breaker != "OPEN", d.reason
    assert d.reason
    for s in d.scores:
        assert s.id in ids
        if s.score is None:
            continue
        if name == "ucb1" and s.score == math.inf:
            assert next(c for c in pool if c.id == s.id).stats.pulls <= 0
            continue
        assert math.isfinite(s.score), (s, d.reason)


@pytest.mark.parametrize("name", ["ucb1", "thompson"])
def test_bandits_converge_to_the_best_arm(name):
    probs = {"a-low": 0.3, "b-best": 0.8, "c-mid": 0.5}  # the best arm listed second
    rng = random.Random(12345)
    env = random.Random(999)
    deps = {k: Deployment(id=k, model_name="g", model=f"p/{k}", provider=k) for k in probs}
    arms = {k: ArmStats() for k in probs}
    strategy = plugins.get_strategy(name)
    picks = []
    for t in range(2000):
        pool = [Candidate(deployment=deps[k], stats=arms[k]) for k in probs]
        ctx = context(pool, strategy=name, rng=rng, cost_weight=0.0, latency_weight=0.0)
        k = strategy.select(pool, ctx).deployment_id
        r = 1.0 if env.random() < probs[k] else 0.0
        arms[k] = update(arms[k], reward=r, latency_s=None, failed=r == 0.0, tick=t)
        picks.append(k)
    share = picks[-500:].count("b-best") / 500
    assert share > 0.8, (share, {k: a.pulls for k, a in arms.items()})
