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
        key = {c.id: sort_key(c.cost_per_1m) for c in eligible}
        best = min(eligible, key=lambda c: key[c.id])  # min keeps the first of equals: pool order
        scores = {c.id: relative_score(key[best.id], key[c.id]) for c in eligible}
        terms = {c.id: {"cost_per_1m": key[c.id]} for c in eligible}
        nxt = min((key[c.id] for c in eligible if c is not best), default=None)
        vs = f" (next cheapest ${nxt:.4g})" if nxt is not None else ""
        all_open = "; every candidate is OPEN" if best.breaker == "OPEN" else ""
        reason = f"cost picked {best.id}: cheapest at ${key[best.id]:.4g} per 1M tokens{vs}{all_open}"
        return finish(self.name, pool, eligible, scores, best, reason, context, terms=terms)
