"""Arm statistics of the bandits and their update (AISIA seed sections 2 to 5), plus forgetting
and per-domain blending. Pure functions over a small record; no clock, no I/O.

`tick` is the pool's request counter: forgetting discounts an observation by
gamma ** (ticks elapsed), gamma = 2 ** (-1 / half_life_requests), applied lazily when a record is
read or updated, which is exactly discounted UCB / discounted Thompson without touching every arm
on every request."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
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


def ucb1_terms(s: ArmStats, total_pulls: float, *, c: float, cost_per_1m: float, cost_weight: float,
               latency_weight: float, cost_scale: float = 10.0, latency_scale: float = 30.0) -> dict:
    """The four terms of the seed's UCB1 score and their sum."""
    terms = {
        "mean_reward": s.mean_reward,
        "exploration": exploration_term(total_pulls, s.pulls, c),
        "cost_bonus": cost_bonus(cost_per_1m, cost_weight, cost_scale),
        "latency_bonus": latency_bonus(s.avg_latency, latency_weight, latency_scale),
    }
    terms["score"] = sum(terms.values())
    return terms
