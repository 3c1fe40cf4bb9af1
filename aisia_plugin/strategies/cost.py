"""The "cost" strategy (alias eco; docs/design.md#cost): the cheapest candidate whose breaker is not OPEN.

Ranked by cost per 1M tokens (Deployment.cost_per_1m, the 3:1 input:output blend), ties in pool
order. A candidate's score is cheapest cost / its cost (1 for the cheapest, higher is better);
the raw cost is in its terms. Every candidate OPEN: the whole pool competes."""

from __future__ import annotations

from ..breaker import OPEN
from ..decision import Decision, Pool, RoutingContext, atoms
from .rules import LowestFacts, LowestWins, finish, lower_is_better, relative_score


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
        all_open = eligible.breakers[i] == OPEN
        return finish(self.name, pool, eligible, _COST, i, context, final_score=lambda j: relative_score(low, keys[j]),
                      facts=LowestFacts, competing=atoms(eligible.ids), keys=atoms(keys), lowest=low, winner=i,
                      all_open=all_open)


class _CostExplained(LowestWins):
    """Explains a cost decision from its ``LowestFacts`` (the keys: costs per 1M tokens)."""

    __slots__ = ()

    def why(self, facts: LowestFacts) -> str:
        keys, i = facts.keys, facts.winner
        nxt = min(keys[:i] + keys[i + 1:], default=None)
        vs = f" (next cheapest ${nxt:.4g})" if nxt is not None else ""
        every = "; every candidate is OPEN" if facts.all_open else ""
        return f"cost picked {facts.competing[i]}: cheapest at ${facts.lowest:.4g} per 1M tokens{vs}{every}"

    def terms(self, facts: LowestFacts):
        return {c: {"cost_per_1m": k} for c, k in zip(facts.competing, facts.keys)}


_COST = _CostExplained()
