"""Arm statistics of the bandits and their update (AISIA seed sections 2 to 5), plus forgetting
and per-domain blending. Pure functions over a small record; no clock, no I/O.

`tick` is the pool's request counter: forgetting discounts an observation by
gamma ** (ticks elapsed), gamma = 2 ** (-1 / half_life_requests), applied lazily when a record is
read or updated, which is exactly discounted UCB / discounted Thompson without touching every arm
on every request."""

from __future__ import annotations

import math
from dataclasses import dataclass


# Treated as immutable (every function here returns a new record) but not frozen: a frozen
# dataclass's __init__ goes through object.__setattr__ per field and costs about five times more,
# and a record is built per candidate per request.
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
    reward = min(1.0, max(0.0, reward))
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
    return ArmStats(
        pulls=s.pulls + 1.0,
        total_reward=s.total_reward + reward,
        alpha=s.alpha + (1.0 if success else 0.0),
        beta=s.beta + (0.0 if success else 1.0),
        avg_latency=avg,
        latency_var=var,
        failures=s.failures + (1.0 if failed else 0.0),
        count=s.count + 1,
        tick=max(tick, s.tick),
    )


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


def arm_view(g: ArmStats | None, d: ArmStats | None, tick: float, gamma: float,
             prior_strength: float | None, fresh: ArmStats) -> ArmStats:
    """What a decision sees of one deployment at `tick`: its global record decayed and, when
    `prior_strength` is given (per-domain learning on and the request has a domain), blended
    with its decayed domain record. Same result as ``blend(decayed(g), decayed(d), prior)``
    (``decayed(g)`` alone without a prior), computed in one pass building one record: this runs
    per candidate per request."""
    forget = gamma < 1.0
    if g is None:  # never observed: the fresh record, as is (nothing to forget)
        g = fresh
        fg, g_tick = 1.0, g.tick
    elif forget and tick > g.tick:
        fg, g_tick = gamma ** (tick - g.tick), tick
    else:
        fg, g_tick = 1.0, g.tick
    if prior_strength is None:
        if g_tick == g.tick:
            return g
        return ArmStats(g.pulls * fg, g.total_reward * fg, 1.0 + (g.alpha - 1.0) * fg, 1.0 + (g.beta - 1.0) * fg,
                        g.avg_latency, g.latency_var, g.failures * fg, g.count, tick)
    g_pulls = g.pulls * fg
    w = prior_strength if prior_strength < g_pulls else g_pulls
    gs = (w / g_pulls if g_pulls > 0 else 0.0) * fg  # the prior's share of the undecayed global sums
    g_count = g.count if w > 0 else 0
    if d is None:
        return ArmStats(w, gs * g.total_reward, 1.0 + gs * (g.alpha - 1.0), 1.0 + gs * (g.beta - 1.0),
                        g.avg_latency, g.latency_var, gs * g.failures, g_count, g_tick if g_tick > 0.0 else 0.0)
    if forget and tick > d.tick:
        fd, d_tick = gamma ** (tick - d.tick), tick
    else:
        fd, d_tick = 1.0, d.tick
    return ArmStats(d.pulls * fd + w, d.total_reward * fd + gs * g.total_reward,
                    1.0 + (d.alpha - 1.0) * fd + gs * (g.alpha - 1.0), 1.0 + (d.beta - 1.0) * fd + gs * (g.beta - 1.0),
                    g.avg_latency, g.latency_var, d.failures * fd + gs * g.failures, d.count + g_count,
                    g_tick if g_tick > d_tick else d_tick)


_LOG4 = math.log(4.0)
_ONE_PLUS_LOG5 = 1.0 + math.log(5.0)


def beta_sample(rng, a: float, b: float) -> float:
    """One draw from Beta(a, b) using only ``rng.random()``: Thompson sampling's posterior draw.

    ``random.Random.betavariate`` draws two gamma variates, about 2.5 us in CPython, once per
    candidate per request; this is exact and several times cheaper. Shapes of 1 use the closed
    forms (Beta(1, 1) is uniform; Beta(a, 1) is U**(1/a)); both shapes above 1 (the usual case:
    posteriors start at (1, 1) and only grow) use Cheng's algorithm BB (Cheng 1978,
    "Generating beta variates with nonintegral shape parameters", Comm. ACM 21(4)), a rejection
    method accepting about 80% or more of the time; a shape below 1 (never produced by our
    updates, possible in a hand-made state) falls back to betavariate."""
    if a == 1.0 and b == 1.0:
        return rng.random()
    if b == 1.0 and a > 0.0:
        return rng.random() ** (1.0 / a)
    if a == 1.0 and b > 0.0:
        return 1.0 - rng.random() ** (1.0 / b)
    if a <= 1.0 or b <= 1.0:
        return rng.betavariate(a, b)
    # Cheng's BB works with a = min shape; swap and mirror otherwise.
    swap = a > b
    if swap:
        a, b = b, a
    alpha = a + b
    beta = math.sqrt((alpha - 2.0) / (2.0 * a * b - alpha))
    gamma = a + 1.0 / beta
    log, exp, random = math.log, math.exp, rng.random
    while True:
        u1 = random()
        if not 0.0 < u1 < 1.0:
            continue
        u2 = random()
        v = beta * log(u1 / (1.0 - u1))
        w = a * exp(v) if v < 700.0 else math.inf
        z = u1 * u1 * u2
        r = gamma * v - _LOG4
        s = a + r - w
        if s + _ONE_PLUS_LOG5 >= 5.0 * z:
            break
        t = log(z) if z > 0.0 else -math.inf
        if s > t:
            break
        if w != math.inf and r + alpha * log(alpha / (b + w)) >= t:
            break
    x = w / (b + w) if w != math.inf else 1.0
    return 1.0 - x if swap else x


def cost_bonus(cost_per_1m: float, cost_weight: float, scale: float = 10.0) -> float:
    """Seed section 4: max(0, 1 - cost / 10) * cost_weight."""
    return max(0.0, 1.0 - cost_per_1m / scale) * cost_weight


def latency_bonus(avg_latency_s: float, latency_weight: float, scale: float = 30.0) -> float:
    """Seed section 5: max(0, 1 - avg_latency / 30) * latency_weight."""
    return max(0.0, 1.0 - avg_latency_s / scale) * latency_weight


def exploration_term(total_pulls: float, pulls: float, c: float) -> float:
    """C * sqrt(ln N / n); infinite for an untried arm. N below 1 (after forgetting) counts as 1."""
    if pulls <= 0:
        return math.inf
    return c * math.sqrt(math.log(max(total_pulls, 1.0)) / pulls)


def ucb1_pool(stats, costs_per_1m, total_pulls: float, *, c: float, cost_weight: float, latency_weight: float,
              cost_scale: float = 10.0, latency_scale: float = 30.0) -> list[tuple[float, float, float, float, float]]:
    """The seed's UCB1 score for every arm of a pool, as ``(score, mean_reward, exploration,
    cost_bonus, latency_bonus)`` tuples in pool order:

        score = mean_reward + C * sqrt(ln N / n) + max(0, 1 - cost / 10) * cost_weight
                + max(0, 1 - avg_latency / 30) * latency_weight

    (the same terms as :func:`exploration_term`, :func:`cost_bonus` and :func:`latency_bonus`,
    written out in one loop because this runs per request over the whole pool). An untried arm
    (n = 0) has an infinite exploration term and score."""
    log_n = math.log(total_pulls) if total_pulls > 1.0 else 0.0
    sqrt, inf = math.sqrt, math.inf
    out = []
    for s, cost in zip(stats, costs_per_1m):
        n = s.pulls
        cb = 1.0 - cost / cost_scale
        cb = cb * cost_weight if cb > 0.0 else 0.0
        lb = 1.0 - s.avg_latency / latency_scale
        lb = lb * latency_weight if lb > 0.0 else 0.0
        if n > 0:
            mean = s.total_reward / n
            ex = c * sqrt(log_n / n)
            out.append((mean + ex + cb + lb, mean, ex, cb, lb))
        else:
            out.append((inf, 0.0, inf, cb, lb))
    return out


def ucb1_terms(s: ArmStats, total_pulls: float, *, c: float, cost_per_1m: float, cost_weight: float,
               latency_weight: float, cost_scale: float = 10.0, latency_scale: float = 30.0) -> dict:
    """The four terms of the seed's UCB1 score and their sum, for one arm."""
    (score, mean, ex, cb, lb), = ucb1_pool((s,), (cost_per_1m,), total_pulls, c=c, cost_weight=cost_weight,
                                           latency_weight=latency_weight, cost_scale=cost_scale,
                                           latency_scale=latency_scale)
    return {"mean_reward": mean, "exploration": ex, "cost_bonus": cb, "latency_bonus": lb, "score": score}
