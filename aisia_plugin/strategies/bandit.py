"""The AISIA bandits as strategies: UCB1 (docs/design.md#ucb1) and Thompson sampling
(docs/design.md#thompson-sampling).

Both read the pool's columns (decision.Pool): the arms' views, costs and latencies, in pool order."""

from __future__ import annotations

import math

from ..bandit import ArmStats, beta_draws, bonus_columns, ucb1_scores, ucb1_terms
from ..decision import PLAIN, Decision, Explainer, Pool, RoutingContext, atoms, explained_decision
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
            return explained_decision(self.name, untried, math.inf, PLAIN,
                                      (atoms(pool.ids), tuple([math.inf if n <= 0 else None for n in pulls]), (), None),
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
        facts = (atoms(pool.ids), tuple(scores), (), drew, tuple(pulls), tuple(rewards), tuple(latencies), tuple(costs),
                 total, c, cw, lw, cs, ls, best)
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


class _UCB1Explained(Explainer):
    """facts: (ids, scores, (), drew, pulls, rewards, latencies, costs, N, c, cost_weight,
    latency_weight, cost_scale, latency_scale, the ranking's winner)."""

    __slots__ = ()

    def _terms(self, facts, i: int) -> dict:
        pulls, rewards, latencies, costs, total, c, cw, lw, cs, ls = facts[4:14]
        arm = ArmStats(pulls=pulls[i], total_reward=rewards[i], avg_latency=latencies[i])
        # n and N as the formula used them: discounted by age when forgetting is on.
        return {**ucb1_terms(arm, total, c=c, cost_per_1m=costs[i], cost_weight=cw, latency_weight=lw,
                             cost_scale=cs, latency_scale=ls), "n": pulls[i], "N": total}

    def terms(self, facts):
        return {i: self._terms(facts, k) for k, i in enumerate(facts[0])}

    def why(self, facts) -> str:
        ids, scores, best = facts[0], facts[1], facts[14]
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
    return [cb + lb for cb, lb in zip(cbs, lbs)]


class _ThompsonExplained(Explainer):
    """facts: (ids, scores, (), drew, draws, alphas, betas, bonuses, the ranking's winner)."""

    __slots__ = ()

    def why(self, facts) -> str:
        ids, draws, alphas, betas, bonus, best = facts[0], *facts[4:]
        return (f"Thompson picked {ids[best]}: sample {draws[best]:.3f} from "
                f"Beta({alphas[best]:.1f}, {betas[best]:.1f}) + bonus {bonus[best]:.3f}")

    def terms(self, facts):
        return {i: {"sample": round(d, 6), "alpha": round(a, 4), "beta": round(b, 4), "bonus": round(x, 6)}
                for i, d, a, b, x in zip(facts[0], *facts[4:8])}


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
        facts = (atoms(pool.ids), tuple(scores), (), drew, tuple(draws), atoms(alphas), atoms(betas), tuple(bonus), best)
        return explained_decision(self.name, pool.deployments[i], scores[i], _THOMPSON, facts, probability=probability)

    def _probability(self, alphas, betas, bonus, best: int, rng) -> float:
        # Monte-Carlo estimate of P(best wins), for offline evaluation; off the request path.
        wins = 0
        for _ in range(self.probability_draws):
            scores = [d + x for d, x in zip(beta_draws(rng, alphas, betas), bonus)]
            wins += scores.index(max(scores)) == best
        return wins / self.probability_draws
