"""OmniRoute's "cost" strategy (alias eco): the cheapest candidate whose breaker is not OPEN.

Ranked by cost per 1M tokens (Deployment.cost_per_1m, the 3:1 input:output blend), ties in pool
order. A candidate's score is cheapest cost / its cost (1 for the cheapest, higher is better);
the raw cost is in its terms. Every candidate OPEN: the whole pool competes."""

from __future__ import annotations

from ..decision import Candidate, Decision, RoutingContext, not_open
from .rules import finish, relative_score, sort_key


class CostStrategy:
    name = "cost"
    description = "Cheapest candidate per 1M tokens; OPEN breakers dropped"

    def select(self, pool: list[Candidate], context: RoutingContext) -> Decision:
        eligible = not_open(pool)
        keys = [sort_key(c.deployment.cost_per_1m) for c in eligible]
        i = min(range(len(keys)), key=keys.__getitem__)  # min keeps the first of equals: pool order
        best, low = eligible[i], keys[i]
        nxt = min(keys[:i] + keys[i + 1:], default=None)
        vs = f" (next cheapest ${nxt:.4g})" if nxt is not None else ""
        all_open = "; every candidate is OPEN" if best.breaker == "OPEN" else ""
        reason = f"cost picked {best.id}: cheapest at ${low:.4g} per 1M tokens{vs}{all_open}"
        return finish(self.name, pool, eligible,
                      lambda: {c.id: relative_score(low, k) for c, k in zip(eligible, keys)},
                      best, reason, context, terms=lambda: {c.id: {"cost_per_1m": k} for c, k in zip(eligible, keys)},
                      score_of=lambda c: relative_score(low, sort_key(c.deployment.cost_per_1m)))
