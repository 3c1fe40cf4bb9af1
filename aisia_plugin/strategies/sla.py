"""The "sla-aware" strategy (alias sla; docs/design.md#sla-scoring): how well each candidate meets the alias's SLA.

Sub-scores, each clamped to [0, 1]:
    latency    target_p95_ms / max(p95, 1e-6)
    error      max_error_rate / max(error rate, 1e-6)
    cost       max_cost_per_1m / max(cost, 1e-6) with a cost cap, else 1 - cost / max cost in pool
    health     breaker CLOSED 1, HALF_OPEN 0.5, OPEN 0
    stability  1 - stddev / max stddev in pool (1 when every stddev is 0)
score = 0.35 latency + 0.35 error + 0.15 health + 0.10 cost + 0.05 stability.

violation = (OPEN ? 1 : 0) + the relative overshoot (value - limit) / limit of every limit
exceeded (p95 target, error rate, cost cap when set). hard_constraints: ranked by (violation,
-score); otherwise by score alone; ties in pool order.

As in its source every candidate is scored, OPEN ones with health 0 and violation + 1; but only
the non-OPEN candidates compete while there is one (so the strategy never routes to an OPEN
breaker when it has a choice; the OPEN ones are listed as excluded, with their scores). Without
an SLA in the context: target 2000 ms, max error rate 0.05, no cost cap, soft constraints."""

from __future__ import annotations

from dataclasses import dataclass

from ..breaker import OPEN
from ..decision import Candidate, Decision, Explainer, Facts, Pool, RoutingContext
from ..schema_defaults import defaults_of
from .rules import clamp01, finish, finite, sort_key

EPS = 1e-6
# Without an SLA in the context: the schema's Sla defaults.
DEFAULT_TARGET_P95_MS = float(defaults_of("Sla")["target_p95_ms"])
DEFAULT_MAX_ERROR_RATE = float(defaults_of("Sla")["max_error_rate"])
WEIGHTS = {"latency": 0.35, "error": 0.35, "health": 0.15, "cost": 0.10, "stability": 0.05}


def sla_limits(sla) -> tuple[float, float, float | None, bool]:
    if sla is None:
        return DEFAULT_TARGET_P95_MS, DEFAULT_MAX_ERROR_RATE, None, False
    cap = getattr(sla, "max_cost_per_1m", None)
    return (finite(getattr(sla, "target_p95_ms", DEFAULT_TARGET_P95_MS), DEFAULT_TARGET_P95_MS),
            finite(getattr(sla, "max_error_rate", DEFAULT_MAX_ERROR_RATE), DEFAULT_MAX_ERROR_RATE),
            None if cap is None else finite(cap, None), bool(getattr(sla, "hard_constraints", False)))


def _over(value: float, limit: float) -> float:
    """Relative overshoot of a limit (0 when within it)."""
    return (value - limit) / max(limit, EPS) if value > limit else 0.0


def sla_terms(pool: list[Candidate], sla) -> dict[str, dict[str, float]]:
    target, max_err, max_cost, _ = sla_limits(sla)
    costs = {c.id: max(0.0, sort_key(c.cost_per_1m)) for c in pool}  # NaN -> +inf
    max_pool_cost = max((v for v in costs.values() if v != float("inf")), default=0.0)
    max_sd = max((max(0.0, finite(c.latency_stddev_ms)) for c in pool), default=0.0)
    out = {}
    for c in pool:
        p95 = max(0.0, sort_key(c.p95_latency_ms))
        err = max(0.0, finite(c.error_rate))
        cost = costs[c.id]
        lat_s = clamp01(target / max(p95, EPS))
        err_s = clamp01(max_err / max(err, EPS))
        if max_cost is not None:
            cost_s = clamp01(max_cost / max(cost, EPS))
        else:
            cost_s = 1.0 if max_pool_cost <= 0 else clamp01(1.0 - cost / max_pool_cost)
        stab = 1.0 if max_sd <= 0 else clamp01(1.0 - max(0.0, finite(c.latency_stddev_ms)) / max_sd)
        health = clamp01(c.health)
        score = (WEIGHTS["latency"] * lat_s + WEIGHTS["error"] * err_s + WEIGHTS["health"] * health
                 + WEIGHTS["cost"] * cost_s + WEIGHTS["stability"] * stab)
        violation = (1.0 if c.breaker == OPEN else 0.0) + _over(p95, target) + _over(err, max_err)
        if max_cost is not None:
            violation += _over(cost, max_cost)
        violation = finite(violation, 1e12)  # an infinite p95 or cost: a huge, finite violation
        out[c.id] = {"latency": lat_s, "error": err_s, "health": health, "cost": cost_s, "stability": stab,
                     "score": score, "violation": violation}
    return out


class SlaStrategy:
    name = "sla-aware"
    description = "Best SLA compliance: 35% p95 vs target, 35% error rate vs max, 15% health, 10% cost, 5% stability"
    settings = frozenset({"exploration"})  # the alias settings it reads (besides sla)

    def select(self, pool, context: RoutingContext) -> Decision:
        pool = Pool.of(pool)
        target, max_err, max_cost, hard = sla_limits(getattr(context, "sla", None))
        t = sla_terms(pool, getattr(context, "sla", None))
        eligible = pool.not_open()
        if hard:
            ranked = sorted(range(len(eligible)), key=lambda i: (t[eligible.ids[i]]["violation"], -t[eligible.ids[i]]["score"]))
        else:
            ranked = sorted(range(len(eligible)), key=lambda i: -t[eligible.ids[i]]["score"])  # stable: ties keep pool order
        b = ranked[0]
        best = eligible[b]
        tb = t[best.id]
        compliant = [c for c in eligible if t[c.id]["violation"] == 0.0]
        limits = f"p95 <= {target:g} ms, error rate <= {max_err:g}" + (f", cost <= ${max_cost:g}/1M" if max_cost is not None else "")
        if compliant:
            how = "meets every SLA limit" if tb["violation"] == 0.0 else f"violation {tb['violation']:.3f}"
            reason = f"sla-aware picked {best.id}: {how} ({limits}), score {tb['score']:.4f}"
        elif hard:
            reason = (f"no candidate meets every SLA limit; least violating: {best.id} "
                      f"(violation {tb['violation']:.3f}, score {tb['score']:.4f}; limits {limits})")
        else:
            reason = (f"no candidate meets every SLA limit; highest score: {best.id} "
                      f"(score {tb['score']:.4f}, violation {tb['violation']:.3f}; limits {limits})")
        if best.breaker == OPEN:
            reason += "; every candidate is OPEN"
        # Every pool member is scored (t is in pool order); its terms kept as sla_terms' dicts
        # (numbers: untracked; the tuple holding them stays tracked, one object per decision,
        # which costs less than copying them into a flat tuple on the request path).
        return finish(self.name, pool, eligible, _SLA, b, context, why=reason,
                      scores=tuple([v["score"] for v in t.values()]), facts=SlaFacts, reason=reason,
                      terms=tuple(t.values()))


@dataclass(slots=True, kw_only=True)
class SlaFacts(Facts):
    """An sla-aware decision's facts: the ranking's reason and every pool member's sla_terms
    dict (pool order)."""

    reason: str
    terms: tuple


class _SlaExplained(Explainer):
    """Explains an sla-aware decision from its ``SlaFacts``."""

    __slots__ = ()

    def why(self, facts: SlaFacts) -> str:
        return facts.reason

    def terms(self, facts: SlaFacts):
        return {cid: {k: round(v, 6) for k, v in d.items() if k != "score"} for cid, d in zip(facts.ids, facts.terms)}


_SLA = _SlaExplained()
