"""decision.Pool: the engine's columnar pool against the Candidates it stands for.

Its columns (views through bandit.arm_weights, latencies, error rates) equal the fields of the
Candidates it builds on access (views through arm_view, the reference of decay + blend), and every
strategy decides the same on the Pool as on the plain list of those Candidates."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import helpers
from helpers import arm_history

from aisia_plugin import plugins
from aisia_plugin.bandit import ArmStats, arm_view
from aisia_plugin.decision import Candidate, Deployment, Pool, RoutingContext

FRESH = ArmStats(avg_latency=5.0)
STRATEGIES = sorted({s.name for s in plugins.strategies().values()})


@st.composite
def engine_pools(draw):
    n = draw(st.integers(1, 6))
    gamma = draw(st.sampled_from([1.0, 0.999, 0.95]))
    deps = [Deployment(id=f"d{i}", model_name="g", model=f"p{i % 3}/m{i}", provider=f"p{i % 3}",
                       tier=draw(st.sampled_from([None, "ultra", "pro", "free"])),
                       input_cost_per_1m=draw(st.floats(0, 20)), output_cost_per_1m=draw(st.floats(0, 20)))
            for i in range(n)]
    g = [arm_history(draw(st.integers(0, 999)), draw(st.integers(0, 25)), gamma) if draw(st.booleans()) else None
         for _ in range(n)]
    d = [arm_history(draw(st.integers(0, 999)), draw(st.integers(0, 25)), gamma) if draw(st.booleans()) else None
         for _ in range(n)]
    breakers = [draw(st.sampled_from(["CLOSED", "CLOSED", "HALF_OPEN", "OPEN"])) for _ in range(n)]
    fits = [draw(st.floats(0, 1)) for _ in range(n)]
    tick = draw(st.sampled_from([0.0, 10.0, 400.0]))
    prior = draw(st.sampled_from([None, 1.0, 5.0, 50.0]))
    # The pool and what it was built from (its stored records are not part of its public view).
    return Pool(deps, breakers, fits, g, d, tick, gamma, prior, FRESH), (g, d, tick, gamma, prior)


@settings(max_examples=300, deadline=None)
@given(built=engine_pools(), beta_first=st.booleans())
def test_columns_equal_the_candidates_fields(built, beta_first):
    pool, (globals_, domains, tick, gamma, prior) = built
    fresh = FRESH
    assert (pool.tick, pool.gamma) == (tick, gamma)
    # Read the columns first (a Pool keeps them; the first bandit column read decides which sums
    # the views' pass computes), then build the Candidates.
    if beta_first:
        alphas, betas = pool.beta_params
        pulls, rewards = list(pool.pulls), list(pool.rewards)
    else:
        pulls, rewards = list(pool.pulls), list(pool.rewards)
        alphas, betas = pool.beta_params
    cols = (list(pool.latencies), list(pool.p95_ms), list(pool.stddev_ms), list(pool.error_rates), pool.ids, pool.costs)
    cands = list(pool)
    assert len(cands) == len(pool) and pool[0] is cands[0]
    latencies, p95, sd, err, ids, costs = cols
    for i, (c, g, d) in enumerate(zip(cands, globals_, domains)):
        view = arm_view(g, d, tick, gamma, prior, fresh)
        assert c.stats == view
        assert (pulls[i], rewards[i], latencies[i]) == (view.pulls, view.total_reward, view.avg_latency)
        assert (alphas[i], betas[i]) == pytest.approx((view.alpha, view.beta), rel=1e-12, abs=1e-12)
        assert (p95[i], sd[i], err[i]) == (c.p95_latency_ms, c.latency_stddev_ms, c.error_rate)
        assert ids[i] == c.id and costs[i] == c.cost_per_1m and c.breaker == pool.breakers[i]
        gl = g if g is not None else fresh
        assert c.error_rate == (gl.failures / gl.pulls if gl.pulls > 0 else 0.0)


def context(seed: int, exploration: float, lkg) -> RoutingContext:
    return helpers.context(specificity=0.4, task_type="coding", seed=seed, exploration=exploration,
                           last_known_good=lkg, total_pulls=None)


@pytest.mark.parametrize("name", STRATEGIES)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(built=engine_pools(), seed=st.integers(0, 2**31), exploration=st.sampled_from([0.0, 0.5]),
       lkg=st.sampled_from([None, "d1", "p0"]))
def test_strategies_decide_the_same_on_the_pool_and_on_its_candidates(name, built, seed, exploration, lkg):
    strategy = plugins.get_strategy(name)
    pool, (g, d, tick, gamma, prior) = built
    # The same members as ready-made Candidates, from a second pool (no column shared with the first).
    as_list = list(Pool(pool.deployments, pool.breakers, pool.task_fit, g, d, tick, gamma, prior, FRESH))
    a = strategy.select(pool, context(seed, exploration, lkg))
    b = strategy.select(as_list, context(seed, exploration, lkg))
    assert a.as_dict() == b.as_dict()


def test_pool_of_candidates_and_not_open():
    deps = [Deployment(id=i, model_name="g", model=f"p/{i}", provider="p") for i in ("a", "b", "c")]
    cands = [Candidate(d, ArmStats(pulls=2.0, total_reward=1.0), breaker=br)
             for d, br in zip(deps, ("OPEN", "CLOSED", "HALF_OPEN"))]
    pool = Pool.of(cands)
    assert Pool.of(pool) is pool and list(pool) == cands and pool[1] is cands[1]
    assert pool.pulls == [2.0, 2.0, 2.0] and pool.rewards == [1.0, 1.0, 1.0]
    healthy = pool.not_open()
    assert healthy.ids == ["b", "c"] and healthy[0] is cands[1]
    closed = Pool.of(cands[1:])
    assert closed.not_open() is closed
    all_open = Pool.of([Candidate(d, ArmStats(), breaker="OPEN") for d in deps])
    assert all_open.not_open() is all_open
