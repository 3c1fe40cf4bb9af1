"""The AISIA bandits as strategies: UCB1 (seed section 2) and Thompson sampling (section 3)."""

from __future__ import annotations

import math

from ..bandit import cost_bonus, latency_bonus, ucb1_terms
from ..decision import Candidate, Decision, RoutingContext, not_open, ranked_decision


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
        terms, scores = {}, {}
        for c in pool:
            t = ucb1_terms(c.stats, context.total_pulls, c=context.exploration_c, cost_per_1m=c.cost_per_1m,
                           cost_weight=context.cost_weight, latency_weight=context.latency_weight,
                           cost_scale=context.cost_scale_per_1m, latency_scale=context.latency_scale_s)
            terms[c.id] = t
            scores[c.id] = t["score"]
        # max() keeps the first of equal scores: ties go to pool order, deterministically.
        best = max(pool, key=lambda c: scores[c.id])
        t = terms[best.id]
        runner = max((scores[c.id] for c in pool if c is not best), default=None)
        margin = f", {scores[best.id] - runner:.3f} ahead of the next" if runner is not None else ""
        reason = (f"UCB1 picked {best.id}: score {scores[best.id]:.3f} = reward {t['mean_reward']:.3f}"
                  f" + exploration {t['exploration']:.3f} + cost {t['cost_bonus']:.3f} + latency {t['latency_bonus']:.3f}{margin}")
        return ranked_decision(self.name, pool, scores, best, reason, probability=1.0, terms=terms)


class ThompsonStrategy:
    name = "thompson"
    description = "Thompson sampling: a draw from each candidate's Beta(alpha, beta), plus cost and latency bonuses"
    # Draws used to estimate the selection probability when the context asks for it.
    probability_draws = 200

    def select(self, pool: list[Candidate], context: RoutingContext) -> Decision:
        pool = not_open(pool)
        rng = context.rng
        bonus = {c.id: cost_bonus(c.cost_per_1m, context.cost_weight, context.cost_scale_per_1m)
                 + latency_bonus(c.stats.avg_latency, context.latency_weight, context.latency_scale_s) for c in pool}
        scores, terms = {}, {}
        for c in pool:
            draw = rng.betavariate(c.stats.alpha, c.stats.beta)
            scores[c.id] = draw + bonus[c.id]
            terms[c.id] = {"sample": round(draw, 6), "alpha": round(c.stats.alpha, 4), "beta": round(c.stats.beta, 4),
                           "bonus": round(bonus[c.id], 6)}
        best = max(pool, key=lambda c: scores[c.id])
        probability = None
        if getattr(context.features, "estimate_probability", False):
            probability = self._probability(pool, best, bonus, rng)
        reason = (f"Thompson picked {best.id}: sample {terms[best.id]['sample']:.3f} from Beta({best.stats.alpha:.1f}, "
                  f"{best.stats.beta:.1f}) + bonus {bonus[best.id]:.3f}")
        return ranked_decision(self.name, pool, scores, best, reason, probability=probability, terms=terms)

    def _probability(self, pool, best, bonus, rng) -> float:
        # Monte-Carlo estimate of P(best wins), for offline evaluation; off the request path.
        wins = 0
        for _ in range(self.probability_draws):
            top = max(pool, key=lambda c: rng.betavariate(c.stats.alpha, c.stats.beta) + bonus[c.id])
            wins += top is best
        return wins / self.probability_draws
