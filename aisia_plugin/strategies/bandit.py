"""The AISIA bandits as strategies: UCB1 (seed section 2) and Thompson sampling (section 3).

Both read the pool's columns (decision.Pool): the arms' views, costs and latencies, in pool order."""

from __future__ import annotations

import math

from ..bandit import ArmStats, beta_draws, bonus_columns, ucb1_scores, ucb1_terms
from ..decision import Decision, Pool, RoutingContext, pool_decision, ranked_decision
from .rules import clamp01, explored, finite


class UCB1Strategy:
    name = "ucb1"
    description = "UCB1: mean reward + C*sqrt(ln N / n) + cost bonus + latency bonus; untried candidates first"
    # The alias settings it reads (validate warns about the others: they would do nothing).
    # `exploration` is an epsilon floor under the bandit's own exploration.
    settings = frozenset({"exploration", "exploration_c", "cost_weight", "latency_weight"})

    def select(self, pool, context: RoutingContext) -> Decision:
        pool = Pool.of(pool).not_open()
        pulls = pool.pulls
        # Seed: a candidate with no observation is chosen before the formula applies, in pool
        # order, so that every candidate is tried once.
        if min(pulls) <= 0:
            first = next(i for i, n in enumerate(pulls) if n <= 0)
            untried = pool.deployments[first]
            return ranked_decision(
                self.name, pool, {i: (math.inf if n <= 0 else None) for i, n in zip(pool.ids, pulls)}, untried,
                f"{untried.id} has never been tried: explored first", probability=1.0,
            )
        total = context.total_pulls
        if total is None:
            total = sum(pulls)
        rewards, latencies, costs = pool.rewards, pool.latencies, pool.costs
        # The alias's settings read from them, not through the context's four properties of the
        # same names (a call each); the cost weight through its one home, the context's property.
        s = context.settings
        knobs = dict(c=s.exploration_c, cost_weight=context.cost_weight, latency_weight=s.latency_weight,
                     cost_scale=s.cost_scale_per_1m, latency_scale=s.latency_scale_s)
        scores = ucb1_scores(pulls, rewards, latencies, costs, total, **knobs)
        # index(max) is the first of equal scores: ties go to pool order, deterministically.
        top = max(scores)
        best = scores.index(top)

        def terms(i: int) -> dict:
            arm = ArmStats(pulls=pulls[i], total_reward=rewards[i], avg_latency=latencies[i])
            # n and N as the formula used them: discounted by age when forgetting is on.
            return {**ucb1_terms(arm, total, cost_per_1m=costs[i], **knobs), "n": pulls[i], "N": total}

        def reason() -> str:  # formatted when first read
            t = terms(best)
            runner = max(scores[:best] + scores[best + 1:], default=None)
            margin = f", {top - runner:.3f} ahead of the next" if runner is not None else ""
            return (f"UCB1 picked {pool.deployments[best].id}: score {top:.3f} = reward {t['mean_reward']:.3f}"
                    f" + exploration {t['exploration']:.3f} + cost {t['cost_bonus']:.3f}"
                    f" + latency {t['latency_bonus']:.3f}{margin}")

        chosen, reason, probability = explored(pool, best, reason, context)
        return pool_decision(self.name, pool, scores, chosen, reason, probability=probability, terms=terms)


def bandit_bonuses(pool: Pool, context: RoutingContext) -> list[float]:
    """Each member's seed cost bonus plus latency bonus (``bandit.bonus_columns``)."""
    cbs, lbs = bonus_columns(pool.costs, pool.latencies, context.cost_weight, context.latency_weight,
                             context.cost_scale_per_1m, context.latency_scale_s)
    return [cb + lb for cb, lb in zip(cbs, lbs)]


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

        def reason() -> str:  # formatted when first read
            return (f"Thompson picked {pool.deployments[best].id}: sample {draws[best]:.3f} from "
                    f"Beta({alphas[best]:.1f}, {betas[best]:.1f}) + bonus {bonus[best]:.3f}")

        i, reason, _ = explored(pool, best, reason, context)
        probability = None
        if getattr(context.features, "estimate_probability", False):
            # (1 - epsilon) P(the posterior draws choose it) + epsilon / n
            eps = clamp01(finite(getattr(context, "exploration", 0.0)))
            probability = (1.0 - eps) * self._probability(alphas, betas, bonus, i, rng) + eps / len(pool)

        def terms(j: int) -> dict:
            return {"sample": round(draws[j], 6), "alpha": round(alphas[j], 4), "beta": round(betas[j], 4),
                    "bonus": round(bonus[j], 6)}

        return pool_decision(self.name, pool, scores, i, reason, probability=probability, terms=terms)

    def _probability(self, alphas, betas, bonus, best: int, rng) -> float:
        # Monte-Carlo estimate of P(best wins), for offline evaluation; off the request path.
        wins = 0
        for _ in range(self.probability_draws):
            scores = [d + x for d, x in zip(beta_draws(rng, alphas, betas), bonus)]
            wins += scores.index(max(scores)) == best
        return wins / self.probability_draws
