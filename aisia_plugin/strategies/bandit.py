"""The AISIA bandits as strategies: UCB1 (docs/design.md#ucb1) and Thompson sampling
(docs/design.md#thompson-sampling).

Both read the pool's columns (decision.Pool): the arms' views, costs and latencies, in pool order."""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import add

from ..bandit import ArmStats, beta_draws, bonus_columns, ucb1_scores, ucb1_terms
from ..decision import PLAIN, Decision, Explainer, Facts, Pool, RoutingContext, atoms, explained_decision
from ..quality import prior_quality
from .rules import clamp01, exploration, finite


class UCB1Strategy:
    name = "ucb1"
    description = "UCB1: mean reward + C*sqrt(ln N / n) + cost bonus + latency bonus; untried candidates first"
    # The alias settings it reads (validate warns about the others: they would do nothing).
    # `exploration` is an epsilon floor under the bandit's own exploration.
    settings = frozenset({"exploration", "exploration_c", "cost_weight", "latency_weight"})

    def select(self, pool, context: RoutingContext) -> Decision:
        pool = Pool.of(pool).not_open()
        pulls = pool.pulls
        # Seed: a candidate with no observation is chosen before the formula applies, so that
        # every candidate is tried once: the one of highest declared prior quality first (its
        # tier and specialities, docs/quality.md), ties in pool order (the seed's order).
        if min(pulls) <= 0:
            first, why = first_untried(pool, pulls, context)
            untried = pool.deployments[first]
            facts = Facts(ids=atoms(pool.ids), scores=tuple([math.inf if n <= 0 else None for n in pulls]))
            return explained_decision(self.name, untried, math.inf, PLAIN, facts,
                                      f"{untried.id} has never been tried: explored first{why}", probability=1.0)
        total = context.total_pulls
        if total is None:
            total = sum(pulls)
        rewards, latencies, costs = pool.rewards, pool.latencies, pool.costs
        # The alias's settings read from them, not through the context's four properties of the
        # same names (a call each); the cost weight through its one home, the context's property.
        s = context.settings
        c, cw, lw, cs, ls = (s.exploration_c, context.cost_weight, s.latency_weight, s.cost_scale_per_1m,
                             s.latency_scale_s)
        scores = ucb1_scores(pulls, rewards, latencies, costs, total, c=c, cost_weight=cw, latency_weight=lw,
                             cost_scale=cs, latency_scale=ls)
        # index(max) is the first of equal scores: ties go to pool order, deterministically.
        top = max(scores)
        best = scores.index(top)

        chosen, drew, probability = exploration(pool, best, context)
        facts = UCB1Facts(ids=atoms(pool.ids), scores=tuple(scores), drew=drew, pulls=tuple(pulls),
                          rewards=tuple(rewards), latencies=tuple(latencies), costs=tuple(costs), total=total,
                          c=c, cost_weight=cw, latency_weight=lw, cost_scale=cs, latency_scale=ls, best=best)
        return explained_decision(self.name, pool.deployments[chosen], scores[chosen], _UCB1, facts,
                                  probability=probability)


def first_untried(pool: Pool, pulls, context: RoutingContext) -> tuple[int, str]:
    """The untried member to explore first: the highest declared prior quality in the request's
    domain (``quality.prior_quality``; the policy's, none without one), ties in pool order; and
    what the reason adds when the prior decided it."""
    untried = [i for i, n in enumerate(pulls) if n <= 0]
    policy = getattr(context, "policy", None)
    if policy is None or len(untried) == 1:
        return untried[0], ""
    deps, prior = pool.deployments, policy.quality.prior
    priors = [prior_quality(deps[i], context.domain, prior) for i in untried]
    top = max(priors)
    if top == min(priors):
        return untried[0], ""
    return untried[priors.index(top)], f" (the highest declared prior quality, {top:.2f}, of the untried)"


@dataclass(slots=True, kw_only=True)
class UCB1Facts(Facts):
    """A UCB1 decision's facts: each arm's pulls, rewards, latencies and costs (pool order), the
    formula's N and settings, and the ranking's winner (its index)."""

    pulls: tuple
    rewards: tuple
    latencies: tuple
    costs: tuple
    total: float
    c: float
    cost_weight: float
    latency_weight: float
    cost_scale: float
    latency_scale: float
    best: int


class _UCB1Explained(Explainer):
    """Explains a UCB1 decision from its ``UCB1Facts``."""

    __slots__ = ()

    def _terms(self, facts: UCB1Facts, i: int) -> dict:
        pulls, total = facts.pulls, facts.total
        arm = ArmStats(pulls=pulls[i], total_reward=facts.rewards[i], avg_latency=facts.latencies[i])
        # n and N as the formula used them: discounted by age when forgetting is on.
        return {**ucb1_terms(arm, total, c=facts.c, cost_per_1m=facts.costs[i], cost_weight=facts.cost_weight,
                             latency_weight=facts.latency_weight, cost_scale=facts.cost_scale,
                             latency_scale=facts.latency_scale), "n": pulls[i], "N": total}

    def terms(self, facts: UCB1Facts):
        return {i: self._terms(facts, k) for k, i in enumerate(facts.ids)}

    def why(self, facts: UCB1Facts) -> str:
        ids, scores, best = facts.ids, facts.scores, facts.best
        top = scores[best]
        t = self._terms(facts, best)
        runner = max(scores[:best] + scores[best + 1:], default=None)
        margin = f", {top - runner:.3f} ahead of the next" if runner is not None else ""
        return (f"UCB1 picked {ids[best]}: score {top:.3f} = reward {t['mean_reward']:.3f}"
                f" + exploration {t['exploration']:.3f} + cost {t['cost_bonus']:.3f}"
                f" + latency {t['latency_bonus']:.3f}{margin}")


_UCB1 = _UCB1Explained()


def bandit_bonuses(pool: Pool, context: RoutingContext) -> list[float]:
    """Each member's seed cost bonus plus latency bonus (``bandit.bonus_columns``)."""
    cbs, lbs = bonus_columns(pool.costs, pool.latencies, context.cost_weight, context.latency_weight,
                             context.cost_scale_per_1m, context.latency_scale_s)
    return list(map(add, cbs, lbs))


@dataclass(slots=True, kw_only=True)
class ThompsonFacts(Facts):
    """A Thompson decision's facts: each arm's posterior draw, Beta parameters and cost and
    latency bonus (pool order), and the ranking's winner (its index)."""

    draws: tuple
    alphas: tuple
    betas: tuple
    bonuses: tuple
    best: int


class _ThompsonExplained(Explainer):
    """Explains a Thompson decision from its ``ThompsonFacts``."""

    __slots__ = ()

    def why(self, facts: ThompsonFacts) -> str:
        ids, best = facts.ids, facts.best
        return (f"Thompson picked {ids[best]}: sample {facts.draws[best]:.3f} from "
                f"Beta({facts.alphas[best]:.1f}, {facts.betas[best]:.1f}) + bonus {facts.bonuses[best]:.3f}")

    def terms(self, facts: ThompsonFacts):
        return {i: {"sample": round(d, 6), "alpha": round(a, 4), "beta": round(b, 4), "bonus": round(x, 6)}
                for i, d, a, b, x in zip(facts.ids, facts.draws, facts.alphas, facts.betas, facts.bonuses)}


_THOMPSON = _ThompsonExplained()


class ThompsonStrategy:
    name = "thompson"
    description = "Thompson sampling: a draw from each candidate's Beta(alpha, beta), plus cost and latency bonuses"
    settings = frozenset({"exploration", "cost_weight", "latency_weight"})
    # Draws used to estimate the selection probability when the context asks for it.
    probability_draws = 200

    def select(self, pool, context: RoutingContext) -> Decision:
        pool = Pool.of(pool).not_open()
        rng = context.rng
        alphas, betas = pool.beta_params
        policy = getattr(context, "policy", None)
        if policy is None or policy.bandit.thompson_bonuses:  # bandit.thompson_bonuses: the seed's reading
            bonus = bandit_bonuses(pool, context)
        else:
            bonus = [0.0] * len(alphas)
        # One posterior draw per candidate, in pool order (a seeded test replays them exactly).
        draws = beta_draws(rng, alphas, betas)
        scores = [d + b for d, b in zip(draws, bonus)]
        best = scores.index(max(scores))

        i, drew, _ = exploration(pool, best, context)
        probability = None
        if getattr(context.features, "estimate_probability", False):
            # (1 - epsilon) P(the posterior draws choose it) + epsilon / n
            eps = clamp01(finite(getattr(context, "exploration", 0.0)))
            probability = (1.0 - eps) * self._probability(alphas, betas, bonus, i, rng) + eps / len(pool)
        facts = ThompsonFacts(ids=atoms(pool.ids), scores=tuple(scores), drew=drew, draws=tuple(draws),
                              alphas=atoms(alphas), betas=atoms(betas), bonuses=tuple(bonus), best=best)
        return explained_decision(self.name, pool.deployments[i], scores[i], _THOMPSON, facts, probability=probability)

    def _probability(self, alphas, betas, bonus, best: int, rng) -> float:
        # Monte-Carlo estimate of P(best wins), for offline evaluation; off the request path.
        wins = 0
        for _ in range(self.probability_draws):
            scores = [d + x for d, x in zip(beta_draws(rng, alphas, betas), bonus)]
            wins += scores.index(max(scores)) == best
        return wins / self.probability_draws
