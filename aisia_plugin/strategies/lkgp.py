"""The "lkgp" strategy (docs/design.md#lkgp): stay on the last known good deployment while it is healthy.

context.last_known_good is matched against the candidates' ids first, then against their
provider names (the first non-OPEN candidate of that provider). A match whose breaker is OPEN is
never pinned to (a stale pin kept choosing a dead provider until a 502: docs/design.md#lkgp);
then, and when there is no usable last known good or context.lkgp_enabled is false, the decision
is the "rules" strategy's, looked up in the plugin registry (a plugin may replace rules). A pin
is sticky: epsilon-greedy exploration applies only to the rules fallback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..breaker import CLOSED, OPEN
from ..decision import Decision, Explainer, Facts, Pool, RoutingContext, atoms, explained_decision


class LkgpStrategy:
    name = "lkgp"
    description = "The last known good deployment (or provider) while its breaker is not OPEN, else rules"
    settings = frozenset({"exploration", "mode_pack", "tier_hint", "lkgp_enabled"})  # the alias settings it reads

    def _rules(self, pool: Pool, context: RoutingContext, why: str) -> Decision:
        from .. import plugins

        rules = plugins.get_strategy("rules")
        if rules is self:  # a misregistration must not recurse
            from .rules import RulesStrategy

            rules = RulesStrategy()
        decision = rules.select(pool, context)
        decision.reason = f"{why}; fell back to rules: {decision.reason}"
        decision.strategy = self.name
        return decision

    def select(self, pool, context: RoutingContext) -> Decision:
        pool = Pool.of(pool)
        lkg = getattr(context, "last_known_good", None)
        if not getattr(context, "lkgp_enabled", True):
            return self._rules(pool, context, "LKGP is disabled for this alias")
        if not lkg:
            return self._rules(pool, context, "no last known good deployment yet")
        ids, breakers = pool.ids, pool.breakers
        by_id = lkg in ids
        matches = ([i for i, x in enumerate(ids) if x == lkg] if by_id
                   else [i for i, d in enumerate(pool.deployments) if d.provider == lkg])
        what = "deployment" if by_id else "provider"
        if not matches:
            # Left out before the strategy ran (a blocking breaker, a budget, a failed attempt, the
            # selector): its own row in the decision says which.
            return self._rules(pool, context, f"last known good {lkg!r} may not take this request (see its row)")
        usable = [i for i in matches if breakers[i] != OPEN]
        if not usable:
            return self._rules(pool, context, f"the LKGP {what} {lkg!r} is OPEN, not pinning to it")
        k = usable[0]
        ids = atoms(ids)
        facts = PinnedFacts(ids=ids, chosen=ids[k], breaker=breakers[k], provider=None if by_id else lkg)
        return explained_decision(self.name, pool.deployments[k], 1.0, _PINNED, facts, probability=1.0)


@dataclass(slots=True, kw_only=True)
class PinnedFacts(Facts):
    """A pin's facts (no scores: the explainer gives 1 to the pinned id, 0 to the others): the
    pinned id, its breaker, and the provider matched (None: the id itself)."""

    chosen: str
    breaker: str
    provider: Optional[str]


class _PinnedExplained(Explainer):
    """Explains a pin from its ``PinnedFacts``."""

    __slots__ = ()

    def scores(self, facts: PinnedFacts):
        chosen = facts.chosen
        return [1.0 if i == chosen else 0.0 for i in facts.ids]

    def why(self, facts: PinnedFacts) -> str:
        state = "" if facts.breaker == CLOSED else f" (breaker {facts.breaker})"
        via = "" if facts.provider is None else f" via provider {facts.provider!r}"
        return f"last known good {facts.chosen}{via} is not OPEN{state}: pinned to it"

    def terms(self, facts: PinnedFacts):
        chosen = facts.chosen
        return {i: {"last_known_good": i == chosen} for i in facts.ids}


_PINNED = _PinnedExplained()
