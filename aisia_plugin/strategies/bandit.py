"""The AISIA bandits as strategies: UCB1 (seed section 2) and Thompson sampling (section 3)."""

from __future__ import annotations

import math

from ..bandit import beta_sample, cost_bonus, latency_bonus, ucb1_pool
from ..decision import Candidate, Decision, RoutingContext, not_open, pool_decision, ranked_decision


class UCB1Strategy:
    name = "ucb1"
    description = "UCB1: mean reward + C*sqrt(ln N / n) + cost bonus + latency bonus; untried candidates first"

    def select(self, pool: list[Candidate], context: RoutingContext) -> Decision:
        pool = not_open(pool)
        # Seed: a candidate with no observation is chosen before the formula applies, in pool
        # order, so that every candidate is tried once.
        for c in pool:
            if c.stats.pulls <= 0:
                return ranked_decision(
                    self.name, pool, {x.id: (math.inf if x.stats.pulls <= 0 else None) for x in pool}, c,
                    f"{c.id} has never been tried: explored first", probability=1.0,
                )
        rows = ucb1_pool([c.stats for c in pool], [c.deployment.cost_per_1m for c in pool], context.total_pulls,
                         c=context.exploration_c, cost_weight=context.cost_weight,
                         latency_weight=context.latency_weight, cost_scale=context.cost_scale_per_1m,
                         latency_scale=context.latency_scale_s)
        scores = [r[0] for r in rows]
        # max() keeps the first of equal scores: ties go to pool order, deterministically.
        best = max(range(len(pool)), key=scores.__getitem__)
        top, mean, ex, cb, lb = rows[best]
        runner = max(scores[:best] + scores[best + 1:], default=None)
        margin = f", {top - runner:.3f} ahead of the next" if runner is not None else ""
        reason = (f"UCB1 picked {pool[best].deployment.id}: score {top:.3f} = reward {mean:.3f}"
                  f" + exploration {ex:.3f} + cost {cb:.3f} + latency {lb:.3f}{margin}")

        def terms(i: int) -> dict:
            r = rows[i]
            return {"mean_reward": r[1], "exploration": r[2], "cost_bonus": r[3], "latency_bonus": r[4], "score": r[0]}

        return pool_decision(self.name, pool, scores, best, reason, probability=1.0, terms=terms)


class ThompsonStrategy:
    name = "thompson"
    description = "Thompson sampling: a draw from each candidate's Beta(alpha, beta), plus cost and latency bonuses"
    # Draws used to estimate the selection probability when the context asks for it.
    probability_draws = 200

    def select(self, pool: list[Candidate], context: RoutingContext) -> Decision:
        pool = not_open(pool)
        rng = context.rng
        cw, lw = context.cost_weight, context.latency_weight
        cs, ls = context.cost_scale_per_1m, context.latency_scale_s
        bonus = [cost_bonus(c.deployment.cost_per_1m, cw, cs) + latency_bonus(c.stats.avg_latency, lw, ls) for c in pool]
        # One posterior draw per candidate, in pool order (a seeded test replays them exactly).
        draws = [beta_sample(rng, c.stats.alpha, c.stats.beta) for c in pool]
        scores = [d + b for d, b in zip(draws, bonus)]
        i = max(range(len(pool)), key=scores.__getitem__)
        best = pool[i]
        probability = None
        if getattr(context.features, "estimate_probability", False):
            probability = self._probability(pool, best, dict(zip((c.id for c in pool), bonus)), rng)
        reason = (f"Thompson picked {best.id}: sample {draws[i]:.3f} from Beta({best.stats.alpha:.1f}, "
                  f"{best.stats.beta:.1f}) + bonus {bonus[i]:.3f}")

        def terms(j: int) -> dict:
            c = pool[j]
            return {"sample": round(draws[j], 6), "alpha": round(c.stats.alpha, 4), "beta": round(c.stats.beta, 4),
                    "bonus": round(bonus[j], 6)}

        return pool_decision(self.name, pool, scores, i, reason, probability=probability, terms=terms)

    def _probability(self, pool, best, bonus, rng) -> float:
        # Monte-Carlo estimate of P(best wins), for offline evaluation; off the request path.
        wins = 0
        for _ in range(self.probability_draws):
            top = max(pool, key=lambda c: beta_sample(rng, c.stats.alpha, c.stats.beta) + bonus[c.id])
            wins += top is best
        return wins / self.probability_draws
