"""The "cost" strategy (alias eco; docs/design.md#cost): the cheapest candidate whose breaker is not OPEN.

Ranked by cost per 1M tokens (Deployment.cost_per_1m, the 3:1 input:output blend), ties in pool
order. A candidate's score is cheapest cost / its cost (1 for the cheapest, higher is better);
the raw cost is in its terms. Every candidate OPEN: the whole pool competes."""

from __future__ import annotations

from ..breaker import OPEN
from ..decision import Decision, Pool, RoutingContext, atoms
from .rules import OwnScores, finish, lower_is_better, relative_score


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
        return finish(self.name, pool, eligible, _COST, (atoms(eligible.ids), atoms(keys), low, i, all_open), i,
                      context, final_score=lambda j: relative_score(low, keys[j]))


class _CostExplained(OwnScores):
    """facts: (ids, None, excluded, drew, competing ids, their costs per 1M, the lowest, the
    winner's index among them, whether every candidate is OPEN)."""

    __slots__ = ()

    def own_scores(self, facts):
        low = facts[6]
        return [relative_score(low, k) for k in facts[5]]

    def why(self, facts) -> str:
        ids, keys, low, i, all_open = facts[4:]
        nxt = min(keys[:i] + keys[i + 1:], default=None)
        vs = f" (next cheapest ${nxt:.4g})" if nxt is not None else ""
        every = "; every candidate is OPEN" if all_open else ""
        return f"cost picked {ids[i]}: cheapest at ${low:.4g} per 1M tokens{vs}{every}"

    def terms(self, facts):
        return {c: {"cost_per_1m": k} for c, k in zip(facts[4], facts[5])}


_COST = _CostExplained()
