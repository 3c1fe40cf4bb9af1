"""The multi-factor "rules" strategy (docs/design.md#rules-the-16-factors), and the helpers every ranking strategy
(cost, latency, sla-aware, lkgp, rules) shares: clamping, epsilon-greedy exploration and the
Decision with OPEN candidates marked as excluded.

Factors, each clamped to [0, 1]; pool maxima are computed once per call over the competing pool:

    quota                 c.quota
    health                breaker CLOSED 1, HALF_OPEN 0.5, OPEN 0
    cost_inv              1 - cost / max(max cost in pool, 0.001)
    latency_inv           1 - p95 / max(max p95 in pool, 1)
    task_fit              c.task_fit (task_fitness.TaskFitnessTable)
    stability             1 - stddev / max stddev in pool (1 when every stddev is 0)
    tier_priority         ultra 1, pro 0.67, standard 0.33, free 0 (no tier: as standard)
    tier_affinity         no hint 0.5; the hinted tier 1; an adjacent tier 0.7; else 0.3
    specificity_match     no specificity or no tier 0.5; else 1 - |specificity - tier level| where the tier
                          level is the tier_priority value: a very specific (demanding) request
                          matches the top tier, a generic one the free tier
    context_affinity      c.signals["context_affinity"], default 0.5
    cache_affinity        c.signals["cache_affinity"], default 0
    session_availability  c.signals["session_availability"], default 1
    reset_window_affinity c.signals["reset_window_affinity"], default 0.5
    connection_density    (pool size - 1) / 10
    quality               c.stats.mean_reward when observed, else 0.5
    reliability           1 - c.error_rate

score = clamp01(sum(w_i * f_i)) with the context's (normalised) weights."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..breaker import OPEN
from ..decision import Candidate, Decision, Draw, Explainer, Facts, Pool, RoutingContext, atoms, explained_decision
from ..numbers import clamp01, finite  # noqa: F401 (the strategies import them from here)
from ..policy.models import FACTORS

TIER_LEVEL = {"ultra": 1.0, "pro": 0.67, "standard": 0.33, "free": 0.0}
TIER_ORDER = ("free", "standard", "pro", "ultra")
DEFAULT_TIER = "standard"  # a deployment without a tier is treated as standard

SIGNAL_DEFAULTS = {"context_affinity": 0.5, "cache_affinity": 0.0, "session_availability": 1.0,
                   "reset_window_affinity": 0.5}


# -- helpers shared by the ranking strategies ------------------------------------------------------
def sort_key(x) -> float:
    """A lower-is-better key: NaN counts as +inf so it ranks last."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.inf
    return math.inf if math.isnan(x) else x


def lower_is_better(values) -> list[float]:
    """``sort_key`` of each value (a pool's column of floats: NaN -> +inf), in one pass."""
    inf = math.inf
    return [x if x == x else inf for x in values]


def relative_score(best: float, value: float) -> float:
    """For lower-is-better keys: best / value in [0, 1], 1 for the best (and for equal keys)."""
    if value <= best:
        return 1.0
    if not math.isfinite(value) or best <= 0:
        return 0.0
    return clamp01(best / value)


def explore(eligible, context: RoutingContext) -> Optional[int]:
    """Epsilon-greedy: with probability context.exploration the index of a uniformly random
    eligible candidate.

    Uses context.rng (two draws when epsilon > 0: the coin, then the pick); epsilon 0 draws
    nothing, so a seeded test is exact either way."""
    return _draw(eligible, finite(getattr(context, "exploration", 0.0)), context)


def _draw(eligible, eps: float, context) -> Optional[int]:
    # ``explore`` with the epsilon `eps` (finite) its caller read.
    if eps <= 0.0 or not len(eligible):
        return None
    if context.rng.random() < eps:
        return context.rng.choice(range(len(eligible)))
    return None


def exploration(eligible, best: int, context: RoutingContext):
    """``(chosen, drew, probability)`` once epsilon-greedy exploration (``explore``) had its say
    over the ranking's winner `best`: every strategy that honours an alias's ``exploration``
    goes through here, bandits included (there it is a floor under their own exploration).
    `drew` is None when the winner stands, else the ``decision.Draw`` the reason tells of
    (``decision.explored_reason``), for a decision's facts."""
    eps = finite(getattr(context, "exploration", 0.0))
    picked, n = _draw(eligible, eps, context), len(eligible)
    if picked is None:
        return best, None, selection_probability(n, True, eps)
    ids = eligible.ids
    drew = Draw(epsilon=eps, picked=ids[picked], best=ids[best], candidates=n, same=picked == best)
    return picked, drew, selection_probability(n, picked == best, eps)


def selection_probability(n_eligible: int, chosen_is_best: bool, epsilon: float) -> float:
    """P(chosen) under epsilon-greedy with `epsilon` (clamped to [0, 1]) over `n_eligible`
    candidates, the chosen one being the ranking's winner or not."""
    eps = clamp01(epsilon)
    share = eps / n_eligible if n_eligible else 0.0
    return (1.0 - eps) + share if chosen_is_best else share


def finish(strategy: str, pool: Pool, eligible: Pool, explainer: Explainer, best: int, context: RoutingContext, *,
           facts: type[Facts], scores=None, final_score=None, why: Optional[str] = None, **own) -> Decision:
    """The Decision of a ranking strategy whose winner is ``eligible``'s member `best`:
    epsilon-greedy exploration over `eligible`, every pool member listed, and the candidates that
    did not compete (OPEN breakers) marked excluded. Explained by `explainer` from a `facts`
    record (a ``decision.Facts`` kind) of the pool's ids, `scores`, the exclusions, the draw, and
    the strategy's `own` fields, by name (``decision.Explainer``).

    `scores`: the pool's scores in pool order (None where a member has none), or None when the
    explainer computes them; then `final_score(j)` gives eligible member j's score. `why`: the
    ranking's reason when the strategy has formatted it already (it is the decision's reason
    when exploration drew nothing)."""
    chosen, drew, probability = exploration(eligible, best, context)
    ids = atoms(pool.ids)
    excluded = ()
    if len(eligible) != len(pool):
        competing = set(eligible.ids)
        excluded = tuple((i, f"breaker {b}: competes only when every candidate is OPEN")
                         for i, b in zip(ids, pool.breakers) if i not in competing)
    if scores is None:
        final = final_score(chosen)
    else:
        final = scores[ids.index(eligible.ids[chosen])] if excluded else scores[chosen]
    return explained_decision(strategy, eligible.deployments[chosen], final, explainer,
                              facts(ids=ids, scores=scores, excluded=excluded, drew=drew, **own),
                              why if drew is None else None, probability=probability)


@dataclass(slots=True, kw_only=True)
class LowestFacts(Facts):
    """The facts of a ranking by a lower-is-better key (cost, latency; no scores: the explainer
    computes them): the competing ids, their keys, the lowest, the winner's index among them,
    and whether every candidate is OPEN."""

    competing: tuple
    keys: tuple
    lowest: float
    winner: int
    all_open: bool


class LowestWins(Explainer):
    """An explainer of a ``LowestFacts`` ranking: each competing member scores lowest key / its
    key (``relative_score``), the members that did not compete without a score."""

    __slots__ = ()

    def scores(self, facts: LowestFacts):
        lowest = facts.lowest
        by_id = {i: relative_score(lowest, k) for i, k in zip(facts.competing, facts.keys)}
        return [by_id.get(i) for i in facts.ids]


# -- factors ---------------------------------------------------------------------------------------
def _tier(c: Candidate) -> str:
    t = c.deployment.tier
    return t if t in TIER_LEVEL else DEFAULT_TIER


def tier_affinity(tier: str, hint: Optional[str]) -> float:
    if not hint or hint not in TIER_LEVEL:
        return 0.5
    d = abs(TIER_ORDER.index(tier) - TIER_ORDER.index(hint))
    return 1.0 if d == 0 else (0.7 if d == 1 else 0.3)


def specificity_match(tier: Optional[str], specificity) -> float:
    # A deployment without a tier has no level to match: neutral, like tier_affinity without a hint.
    if specificity is None or tier not in TIER_LEVEL:
        return 0.5
    try:
        s = float(specificity)
    except (TypeError, ValueError):
        return 0.5
    if not math.isfinite(s):
        return 0.5
    return clamp01(1.0 - abs(clamp01(s) - TIER_LEVEL[tier]))


def factor_table(pool: list[Candidate], context: RoutingContext) -> dict[str, dict[str, float]]:
    """Every candidate's 16 factor values (candidate id -> factor -> value in [0, 1])."""
    max_cost = max((finite(c.cost_per_1m) for c in pool), default=0.0)
    max_p95 = max((finite(c.p95_latency_ms) for c in pool), default=0.0)
    max_sd = max((finite(c.latency_stddev_ms) for c in pool), default=0.0)
    cost_den = max(max_cost, 0.001)
    p95_den = max(max_p95, 1.0)
    density = clamp01((len(pool) - 1) / 10.0)
    hint = getattr(context, "tier_hint", None)
    spec = getattr(getattr(context, "features", None), "specificity", None)
    out = {}
    for c in pool:
        tier = _tier(c)
        sig = c.signals or {}
        stats = c.stats
        pulls = finite(getattr(stats, "pulls", 0.0))
        f = {
            "quota": clamp01(c.quota),
            "health": clamp01(c.health),
            "cost_inv": clamp01(1.0 - finite(c.cost_per_1m, cost_den) / cost_den),
            "latency_inv": clamp01(1.0 - finite(c.p95_latency_ms, p95_den) / p95_den),
            "task_fit": clamp01(c.task_fit),
            "stability": 1.0 if max_sd <= 0 else clamp01(1.0 - finite(c.latency_stddev_ms, max_sd) / max_sd),
            "tier_priority": TIER_LEVEL[tier],
            "tier_affinity": tier_affinity(tier, hint),
            "specificity_match": specificity_match(c.deployment.tier, spec),
            **{k: clamp01(sig.get(k, d)) for k, d in SIGNAL_DEFAULTS.items()},
            "connection_density": density,
            "quality": clamp01(getattr(stats, "mean_reward", 0.5)) if pulls > 0 else 0.5,
            "reliability": clamp01(1.0 - finite(c.error_rate, 1.0)),
        }
        out[c.id] = {k: f[k] for k in FACTORS}
    return out


def context_weights(context: RoutingContext) -> dict[str, float]:
    """The context's factor weights; without any, the policy's rules weights (or the schema's
    defaults, docs/design.md#rules-the-16-factors), normalised."""
    from ..weights import DEFAULT_WEIGHTS, normalise

    w = getattr(context, "weights", None)
    if w:
        return {k: finite(w.get(k, 0.0)) for k in FACTORS}
    policy = getattr(context, "policy", None)
    fallback = policy.rules.weights.model_dump() if policy is not None else DEFAULT_WEIGHTS
    return normalise(fallback, DEFAULT_WEIGHTS)


def rules_scores(pool: list[Candidate], context: RoutingContext):
    """(scores, factor terms) of the rules strategy over `pool`."""
    factors = factor_table(pool, context)
    w = context_weights(context)
    scores = {cid: clamp01(sum(w[k] * v for k, v in f.items())) for cid, f in factors.items()}
    return scores, factors, w


class RulesStrategy:
    name = "rules"
    description = "The 16-factor weighted score (quota, health, cost, latency, task fit, tiers, ...); OPEN breakers dropped"
    settings = frozenset({"exploration", "mode_pack", "tier_hint"})  # the alias settings it reads

    def select(self, pool, context: RoutingContext) -> Decision:
        pool = Pool.of(pool)
        eligible = pool.not_open()
        scores, factors, w = rules_scores(eligible, context)
        ids = eligible.ids
        values = [scores[i] for i in ids]
        b = values.index(max(values))  # first of equal scores: pool order
        best = eligible[b]
        top = sorted(((w[k] * v, k) for k, v in factors[best.id].items()), reverse=True)[:3]
        parts = ", ".join(f"{k} {contrib:.3f}" for contrib, k in top if contrib > 0)
        runner = max(values[:b] + values[b + 1:], default=None)
        margin = f", {scores[best.id] - runner:.3f} ahead of the next" if runner is not None else ""
        all_open = " (every candidate is OPEN)" if best.breaker == OPEN else ""
        reason = f"rules picked {best.id}: score {scores[best.id]:.3f} (largest parts: {parts or 'none'}){margin}{all_open}"
        # The candidates' factor dicts as they are (numbers: dicts CPython does not track; the
        # tuple holding them stays tracked, one object per decision, which costs less than
        # copying 16 factors per candidate into a flat tuple on the request path).
        return finish(self.name, pool, eligible, _RULES, b, context, why=reason,
                      scores=tuple(values) if len(eligible) == len(pool) else tuple([scores.get(i) for i in pool.ids]),
                      facts=RulesFacts, competing=atoms(ids), reason=reason, factors=tuple(factors.values()))


@dataclass(slots=True, kw_only=True)
class RulesFacts(Facts):
    """A rules decision's facts: the competing ids, the ranking's reason, and each competing
    member's factors (factor_table's dicts, in the competing order)."""

    competing: tuple
    reason: str
    factors: tuple


class _RulesExplained(Explainer):
    """Explains a rules decision from its ``RulesFacts``."""

    __slots__ = ()

    def why(self, facts: RulesFacts) -> str:
        return facts.reason

    def terms(self, facts: RulesFacts):
        return {cid: {k: round(v, 6) for k, v in f.items()} for cid, f in zip(facts.competing, facts.factors)}


_RULES = _RulesExplained()
