"""Arm statistics of the bandits and their update (docs/design.md#arm-statistics), plus forgetting
and per-domain blending. Pure functions over a small record; no clock, no I/O.

`tick` is the pool's request counter: forgetting discounts an observation by
gamma ** (ticks elapsed), gamma = 2 ** (-1 / half_life_requests), applied lazily when a record is
read or updated, which is exactly discounted UCB / discounted Thompson without touching every arm
on every request."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .numbers import clamp01


# Treated as immutable (every function here returns a new record) but not frozen: a frozen
# dataclass's __init__ goes through object.__setattr__ per field and costs several times more, and
# a record is built per candidate per request.
@dataclass(slots=True)
class ArmStats:
    pulls: float = 0.0  # observations, discounted (seed: pulls)
    total_reward: float = 0.0  # discounted sum of rewards (seed: total_reward)
    alpha: float = 1.0  # Beta posterior (seed: alpha, from 1)
    beta: float = 1.0  # (seed: beta, from 1)
    avg_latency: float = 5.0  # seconds, EMA (seed: avg_latency, 5.0 until measured)
    latency_var: float = 0.0  # EMA of the squared deviation, seconds^2
    failures: float = 0.0  # discounted count of failed calls
    count: int = 0  # undiscounted observations (0 = never measured)
    tick: float = 0.0  # pool tick of the last update

    @property
    def mean_reward(self) -> float:
        return self.total_reward / self.pulls if self.pulls > 0 else 0.0

    @property
    def error_rate(self) -> float:
        return self.failures / self.pulls if self.pulls > 0 else 0.0

    @property
    def latency_stddev(self) -> float:
        return math.sqrt(max(self.latency_var, 0.0))

    @property
    def p95_latency(self) -> float:
        """p95 latency in seconds, estimated from the EMA mean and deviation (normal tail)."""
        return self.avg_latency + 1.645 * self.latency_stddev


def gamma_for(half_life_requests: float | None) -> float:
    return 1.0 if not half_life_requests else 2.0 ** (-1.0 / half_life_requests)


def decayed(s: ArmStats, tick: float, gamma: float) -> ArmStats:
    """The record as seen at `tick`: counts discounted, priors (alpha = beta = 1) kept."""
    if gamma >= 1.0 or tick <= s.tick:
        return s
    f = gamma ** (tick - s.tick)
    # Built directly rather than with dataclasses.replace: this runs per candidate per request.
    return ArmStats(s.pulls * f, s.total_reward * f, 1.0 + (s.alpha - 1.0) * f, 1.0 + (s.beta - 1.0) * f,
                    s.avg_latency, s.latency_var, s.failures * f, s.count, tick)


def update(s: ArmStats, *, reward: float, latency_s: float | None, failed: bool, tick: float,
           gamma: float = 1.0, ema_weight: float = 0.2, success_threshold: float = 0.5) -> ArmStats:
    """The record after one observation (seed: bandit update)."""
    reward = clamp01(reward)
    s = decayed(s, tick, gamma)
    avg, var = s.avg_latency, s.latency_var
    if latency_s is not None and math.isfinite(latency_s) and latency_s >= 0:
        if s.count == 0:
            avg, var = latency_s, 0.0  # the first measurement replaces the 5.0 s assumption
        else:
            delta = latency_s - avg
            avg = avg * (1.0 - ema_weight) + latency_s * ema_weight
            var = (1.0 - ema_weight) * (var + ema_weight * delta * delta)
    success = reward >= success_threshold
    return ArmStats(pulls=s.pulls + 1.0, total_reward=s.total_reward + reward,
                    alpha=s.alpha + (1.0 if success else 0.0), beta=s.beta + (0.0 if success else 1.0),
                    avg_latency=avg, latency_var=var, failures=s.failures + (1.0 if failed else 0.0),
                    count=s.count + 1, tick=max(tick, s.tick))


def blend(global_stats: ArmStats, domain_stats: ArmStats | None, prior_strength: float) -> ArmStats:
    """Per-domain statistics with the deployment's global statistics as prior.

    The global record contributes up to `prior_strength` observations' worth of its mean (and of
    its Beta counts), so a domain with few observations leans on the global estimate and one with
    many is learned on its own. Latency is a property of the deployment: the global one is kept."""
    g = global_stats
    if domain_stats is None:
        domain_stats = ArmStats()
    d = domain_stats
    w = min(prior_strength, g.pulls)
    share = w / g.pulls if g.pulls > 0 else 0.0
    return ArmStats(
        pulls=d.pulls + w,
        total_reward=d.total_reward + share * g.total_reward,
        alpha=d.alpha + share * (g.alpha - 1.0),
        beta=d.beta + share * (g.beta - 1.0),
        avg_latency=g.avg_latency,
        latency_var=g.latency_var,
        failures=d.failures + share * g.failures,
        count=d.count + (g.count if w > 0 else 0),
        tick=max(g.tick, d.tick),
    )


# A record with nothing in it: a view's missing side (no domain record, or no prior).
EMPTY = ArmStats()


def arm_weights(globals_, domains, tick: float, gamma: float, prior_strength: float | None, fresh: ArmStats, *,
                posterior: bool = False) -> tuple[list[tuple[ArmStats, float, ArmStats, float]], list[float], list[float],
                                                  list[float]]:
    """What a decision sees of each arm of a pool at `tick`, as weights: per arm ``(a, fa, b, fb)``
    such that every additive field of the arm's view (pulls, total_reward, failures, alpha - 1,
    beta - 1) is ``a.x * fa + b.x * fb``; returned with the columns a learning strategy reads:
    ``(weights, pulls, total_rewards, avg_latencies)``, or with `posterior`
    ``(weights, alphas, betas, avg_latencies)`` (the views' Beta shapes). The one home of
    forgetting and per-domain blending (``arm_view`` builds a whole record from the same weights).

    Without `prior_strength` (per-domain learning off, or no domain): the global record decayed,
    ``(g, gamma ** elapsed, EMPTY, 0)``. With it: the decayed domain record plus up to
    `prior_strength` observations' worth of the decayed global record, ``(d, fd, g, share)``.
    A missing global record is `fresh`; a missing domain record is EMPTY. Latency is a property of
    the deployment: a view's latency is always the global record's.

    Written as one loop over the pool, because it runs per request over every candidate (its
    appends as list.append calls, which CPython specialises, not through bound methods)."""
    forget = gamma < 1.0
    weights, first, second, latencies = [], [], [], []
    if prior_strength is None:
        for g in globals_:
            if g is None:  # never observed: the fresh record, as is (nothing to forget)
                g, f = fresh, 1.0
            else:
                f = gamma ** (tick - g.tick) if forget and tick > g.tick else 1.0
            weights.append((g, f, EMPTY, 0.0))
            if posterior:
                first.append(1.0 + (g.alpha - 1.0) * f)
                second.append(1.0 + (g.beta - 1.0) * f)
            else:
                first.append(g.pulls * f)
                second.append(g.total_reward * f)
            latencies.append(g.avg_latency)
        return weights, first, second, latencies
    for g, d in zip(globals_, domains):
        if g is None:
            g, share = fresh, 0.0  # never observed: no prior (fresh has no pulls)
        else:
            fg = gamma ** (tick - g.tick) if forget and tick > g.tick else 1.0
            g_pulls = g.pulls
            # The prior's weight w = min(prior, decayed pulls), as a share of the undecayed sums.
            share = (prior_strength / g_pulls if prior_strength < g_pulls * fg else fg) if g_pulls > 0 else 0.0
        if d is None:
            d, fd = EMPTY, 0.0
        else:
            fd = gamma ** (tick - d.tick) if forget and tick > d.tick else 1.0
        weights.append((d, fd, g, share))
        if posterior:
            first.append(1.0 + (d.alpha - 1.0) * fd + (g.alpha - 1.0) * share)
            second.append(1.0 + (d.beta - 1.0) * fd + (g.beta - 1.0) * share)
        else:
            first.append(d.pulls * fd + g.pulls * share)
            second.append(d.total_reward * fd + g.total_reward * share)
        latencies.append(g.avg_latency)
    return weights, first, second, latencies


def arm_view(g: ArmStats | None, d: ArmStats | None, tick: float, gamma: float,
             prior_strength: float | None, fresh: ArmStats) -> ArmStats:
    """One arm's view at `tick` as a whole record (the request path reads the weights of
    ``arm_weights`` instead): the same result as ``blend(decayed(g), decayed(d), prior)``
    (``decayed(g)`` alone without a prior)."""
    ((a, fa, b, fb),), _, _, _ = arm_weights((g,), (d,), tick, gamma, prior_strength, fresh)
    gl = g if g is not None else fresh
    if prior_strength is None:
        if fa == 1.0:
            return gl
        count, at = gl.count, tick
    else:
        count = (d.count if d is not None else 0) + (gl.count if fb > 0.0 else 0)
        g_tick = tick if (g is not None and gamma < 1.0 and tick > g.tick) else gl.tick
        d_tick = 0.0 if d is None else (tick if gamma < 1.0 and tick > d.tick else d.tick)
        at = g_tick if g_tick > d_tick else d_tick
    return ArmStats(a.pulls * fa + b.pulls * fb, a.total_reward * fa + b.total_reward * fb,
                    1.0 + (a.alpha - 1.0) * fa + (b.alpha - 1.0) * fb, 1.0 + (a.beta - 1.0) * fa + (b.beta - 1.0) * fb,
                    gl.avg_latency, gl.latency_var, a.failures * fa + b.failures * fb, count, at)


def pulls_and_rewards(weights) -> tuple[list[float], list[float]]:
    """Each view's pulls and total reward, from ``arm_weights``' weights, in pool order."""
    pulls, rewards = [], []
    for a, fa, b, fb in weights:
        pulls.append(a.pulls * fa + b.pulls * fb)
        rewards.append(a.total_reward * fa + b.total_reward * fb)
    return pulls, rewards


def beta_params(weights) -> tuple[list[float], list[float]]:
    """Each view's Beta posterior (alpha, beta), in pool order."""
    alphas, betas = [], []
    for a, fa, b, fb in weights:
        alphas.append(1.0 + (a.alpha - 1.0) * fa + (b.alpha - 1.0) * fb)
        betas.append(1.0 + (a.beta - 1.0) * fa + (b.beta - 1.0) * fb)
    return alphas, betas


_LOG4 = math.log(4.0)
_HUGE_SHAPE = 1e12  # Cheng's constants overflow near 1e154; no real history comes near either
_ONE_PLUS_LOG5 = 1.0 + math.log(5.0)


def beta_sample(rng, a: float, b: float) -> float:
    """One draw from Beta(a, b) using only ``rng.random()``: Thompson sampling's posterior draw
    (see :func:`beta_draws`)."""
    return beta_draws(rng, (a,), (b,))[0]


def beta_draws(rng, alphas, betas) -> list[float]:
    """One draw from each Beta(alphas[i], betas[i]), in order, using only ``rng.random()``.

    ``random.Random.betavariate`` draws two gamma variates, once per candidate per request; this
    is exact and several times cheaper (select:thompson in benchmarks/results/overhead.md). Shapes of 1 use the closed
    forms (Beta(1, 1) is uniform; Beta(a, 1) is U**(1/a)); both shapes above 1 (the usual case:
    posteriors start at (1, 1) and only grow) use Cheng's algorithm BB (Cheng 1978,
    "Generating beta variates with nonintegral shape parameters", Comm. ACM 21(4)), a rejection
    method accepting about 80% or more of the time; a shape below 1 (never produced by our
    updates, possible in a hand-made state) falls back to betavariate, shapes both above 1e12
    (no real history) give the mean, and a shape that is no positive finite number (a corrupted
    state) the prior's uniform draw, never a rejection loop that could not end. One loop over the pool
    (this runs per request): the draws are the same as one ``beta_sample`` call per pair."""
    log, exp, sqrt, random, inf = math.log, math.exp, math.sqrt, rng.random, math.inf
    out = []
    add = out.append
    for a, b in zip(alphas, betas):
        if not (1.0 < a < _HUGE_SHAPE and 1.0 < b < _HUGE_SHAPE):  # the usual case is tested first
            if a == 1.0 and b == 1.0:
                add(random())
            elif b == 1.0 and a > 0.0:
                add(random() ** (1.0 / a))
            elif a == 1.0 and b > 0.0:
                add(1.0 - random() ** (1.0 / b))
            elif 1.0 < a < inf and 1.0 < b < inf:  # counts beyond any real history: the mean (sd < 1e-6)
                add(a / (a + b))
            elif 0.0 < a < inf and 0.0 < b < inf:
                add(rng.betavariate(a, b))
            else:  # no usable posterior (a NaN, infinite or non-positive shape): the prior's draw
                add(random())
            continue
        # Cheng's BB works with a = min shape; swap and mirror otherwise.
        swap = a > b
        if swap:
            a, b = b, a
        alpha = a + b
        beta = sqrt((alpha - 2.0) / (2.0 * a * b - alpha))
        gamma = a + 1.0 / beta
        while True:
            u1 = random()
            if not 0.0 < u1 < 1.0:
                continue
            u2 = random()
            v = beta * log(u1 / (1.0 - u1))
            w = a * exp(v) if v < 700.0 else inf
            z = u1 * u1 * u2
            r = gamma * v - _LOG4
            s = a + r - w
            if s + _ONE_PLUS_LOG5 >= 5.0 * z:
                break
            t = log(z) if z > 0.0 else -inf
            if s > t:
                break
            if w != inf and r + alpha * log(alpha / (b + w)) >= t:
                break
        x = w / (b + w) if w != inf else 1.0
        add(1.0 - x if swap else x)
    return out


def bonus_columns(costs_per_1m, latencies_s, cost_weight: float, latency_weight: float, cost_scale: float = 10.0,
                  latency_scale: float = 30.0) -> tuple[list[float], list[float]]:
    """docs/design.md#cost-and-latency-bonuses for every arm of a pool, as two columns in pool order: the cost
    bonuses max(0, 1 - cost / 10) * cost_weight and the latency bonuses
    max(0, 1 - avg_latency / 30) * latency_weight (10 and 30: the policy's scales). The one home
    of both formulas: UCB1's score, Thompson's and the contextual strategy's bonus, and the
    explanation's terms all read them from here. A NaN cost or latency earns no bonus."""
    cw, lw, cs, ls = cost_weight, latency_weight, cost_scale, latency_scale
    return ([(1.0 - c / cs) * cw if c < cs else 0.0 for c in costs_per_1m],
            [(1.0 - t / ls) * lw if t < ls else 0.0 for t in latencies_s])


def cost_bonus(cost_per_1m: float, cost_weight: float, scale: float = 10.0) -> float:
    """The cost bonus of one arm (docs/design.md#cost-and-latency-bonuses; ``bonus_columns``)."""
    return bonus_columns((cost_per_1m,), (), cost_weight, 0.0, scale)[0][0]


def latency_bonus(avg_latency_s: float, latency_weight: float, scale: float = 30.0) -> float:
    """The latency bonus of one arm (docs/design.md#cost-and-latency-bonuses; ``bonus_columns``)."""
    return bonus_columns((), (avg_latency_s,), 0.0, latency_weight, latency_scale=scale)[1][0]


def exploration_term(total_pulls: float, pulls: float, c: float) -> float:
    """C * sqrt(ln N / n); infinite for an untried arm. N below 1 (after forgetting) counts as 1."""
    if pulls <= 0:
        return math.inf
    return c * math.sqrt(math.log(max(total_pulls, 1.0)) / pulls)


def ucb1_scores(pulls, rewards, latencies, costs_per_1m, total_pulls: float, *, c: float, cost_weight: float,
                latency_weight: float, cost_scale: float = 10.0, latency_scale: float = 30.0) -> list[float]:
    """The seed's UCB1 score of every arm of a pool with at least one pull, from columns in pool
    order (each arm's pulls, total reward, average latency in seconds, cost per 1M tokens):

        score = mean_reward + C * sqrt(ln N / n) + max(0, 1 - cost / 10) * cost_weight
                + max(0, 1 - avg_latency / 30) * latency_weight

    The same sum as :func:`ucb1_terms` (the explanation, term by term), over the pool's columns
    because this runs per request. The caller serves untried arms first."""
    log_n = math.log(total_pulls) if total_pulls > 1.0 else 0.0
    sqrt = math.sqrt
    cbs, lbs = bonus_columns(costs_per_1m, latencies, cost_weight, latency_weight, cost_scale, latency_scale)
    return [total / n + c * sqrt(log_n / n) + cb + lb for n, total, cb, lb in zip(pulls, rewards, cbs, lbs)]


def ucb1_terms(s: ArmStats, total_pulls: float, *, c: float, cost_per_1m: float, cost_weight: float,
               latency_weight: float, cost_scale: float = 10.0, latency_scale: float = 30.0) -> dict:
    """The four terms of the seed's UCB1 score and their sum, for one arm (infinite exploration
    and score for an untried arm)."""
    n = s.pulls
    mean = s.total_reward / n if n > 0 else 0.0
    ex = exploration_term(total_pulls, n, c)
    (cb,), (lb,) = bonus_columns((cost_per_1m,), (s.avg_latency,), cost_weight, latency_weight, cost_scale,
                                 latency_scale)
    return {"mean_reward": mean, "exploration": ex, "cost_bonus": cb, "latency_bonus": lb, "score": mean + ex + cb + lb}
