"""OmniRoute's "cost" strategy (alias eco): the cheapest candidate whose breaker is not OPEN.

Ranked by cost per 1M tokens (Deployment.cost_per_1m, the 3:1 input:output blend), ties in pool
order. A candidate's score is cheapest cost / its cost (1 for the cheapest, higher is better);
the raw cost is in its terms. Every candidate OPEN: the whole pool competes."""

from __future__ import annotations

from ..breaker import OPEN
from ..decision import Decision, Pool, RoutingContext
from .rules import finish, lower_is_better, relative_score


class CostStrategy:
    name = "cost"
    description = "Cheapest candidate per 1M tokens; OPEN breakers dropped"
    settings = frozenset({"exploration"})  # the alias settings it reads

    def select(self, pool, context: RoutingContext) -> Decision:
        pool = Pool.of(pool)
        eligible = pool.not_open()
        keys = lower_is_better(eligible.costs)
        low = min(keys)
        i = keys.index(low)  # the first of equals: pool order
        ids = eligible.ids

        def reason() -> str:  # formatted when first read
            nxt = min(keys[:i] + keys[i + 1:], default=None)
            vs = f" (next cheapest ${nxt:.4g})" if nxt is not None else ""
            all_open = "; every candidate is OPEN" if eligible.breakers[i] == OPEN else ""
            return f"cost picked {ids[i]}: cheapest at ${low:.4g} per 1M tokens{vs}{all_open}"

        return finish(self.name, pool, eligible,
                      lambda: {c: relative_score(low, k) for c, k in zip(ids, keys)},
                      i, reason, context, terms=lambda: {c: {"cost_per_1m": k} for c, k in zip(ids, keys)},
                      score_of=lambda j: relative_score(low, keys[j]))
