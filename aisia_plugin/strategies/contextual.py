"""The contextual strategy: Thompson sampling on each deployment's predicted reward for this
prompt (aisia_plugin/contextual.py), plus the bandits' cost and latency bonuses.

Per candidate: a draw from N(predicted reward, exploration**2 * its variance) + the cost bonus +
the latency bonus (``bandit_bonuses``, the bandits' own). The choice is cost-aware
(``cheapest_within``, docs/quality.md#the-choice): the cheapest candidate whose prediction plus
one standard deviation (its optimistic quality), or whose draw, is within
``contextual.quality_tolerance`` of the highest optimistic quality, ties to the higher score; a
tolerance of 0 takes the highest score, draw plus bonuses. The prediction is the
deployment's learned mean (the arm the pool shows: forgetting and per-domain blend included) plus
what the prompt's features say about it. The decision carries the request's vector, so that the
engine can teach the chosen deployment's model its outcome (``Decision.context``)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from operator import add
from statistics import NormalDist
from typing import Any, Optional

from ..contextual import LearnContext, cold_prior, request_vector
import numpy as np

from ..decision import FROM_FACTS, Decision, Explainer, Facts, Pool, RoutingContext, atoms, explained_decision
from ..pacing import BY_TARGET
from ..policy.models import ColdStart, QualityPrior
from ..schema_defaults import defaults_of
from ..task_fitness import TaskFitnessTable
from .bandit import ThompsonStrategy, bandit_bonuses
from .rules import explore

# The alias's `contextual` settings when a test's context carries no policy (the schema's defaults).
_DEFAULTS = tuple(float(defaults_of("Contextual")[k])
                  for k in ("prior_variance", "noise_variance", "exploration", "quality_tolerance"))
_COLD = ColdStart(**defaults_of("ColdStart"))
_PRIOR = QualityPrior(**defaults_of("QualityPrior"))


def _settings(context: RoutingContext):
    """The context's alias's `contextual` settings (None: a test's context without a policy)."""
    policy = context.policy
    ap = policy.aliases.get(context.alias) if policy is not None else None
    return getattr(ap, "contextual", None)


def settings_of(context: RoutingContext) -> tuple[float, float, float, float]:
    """(prior_variance, noise_variance, exploration, quality_tolerance) of the context's alias."""
    c = _settings(context)
    if c is None:
        return _DEFAULTS
    return c.prior_variance, c.noise_variance, c.exploration, c.quality_tolerance


def cheapest_within(means, sds, draws, scores, costs, tolerance: float) -> int:
    """The cost-aware choice (docs/quality.md#the-choice): each member's optimistic quality for
    this prompt is its prediction ``means[j]`` plus one standard deviation ``sds[j]``; the bar
    is the highest optimistic quality less `tolerance`. A member is within the tolerance when
    its optimistic quality or its posterior draw ``draws[j]`` (from N(means[j], sds[j]**2))
    reaches the bar; among those, the cheapest by ``costs`` (USD per 1M tokens), ties to the
    higher score (draw plus bonuses), then to pool order. A tolerance of 0 (or less) is the
    highest score, the plain Thompson choice. Pure.

    Why not the draws alone: two draws compared with each other add both spreads to the gap the
    tolerance judges (and the highest of several draws sits above every mean), so a cheap
    candidate as good as the best one lost about a third of the time. Optimism on both sides
    keeps the exploring: a candidate little is known about has a wide spread, so a cheap one is
    tried and a dear one may raise the bar until it is known. Why the draw as well: one standard
    deviation is a fixed reach, so a cheap candidate whose first answers went badly stayed below
    the bar until forgetting widened its spread (with a quality memory of 10,000 requests, one run
    of twelve never came back); its draw reaches the bar as often as its posterior says it may be
    within the tolerance, less often as evidence narrows it (docs/quality.md#how-steady-it-is)."""
    if tolerance <= 0.0:
        return scores.index(max(scores))
    optimistic = list(map(add, means, sds))
    floor = max(optimistic) - tolerance
    best = None
    for j, o in enumerate(optimistic):
        if (o >= floor or draws[j] >= floor) and (best is None or costs[j] < costs[best]
                                                  or (costs[j] == costs[best] and scores[j] > scores[best])):
            best = j
    return best


def paced_tolerance(tolerance: float, multiplier: float, by: str) -> float:
    """The quality tolerance of a paced decision. Paced by a spend target (`by` BY_TARGET): the
    alias's own times the multiplier, as the bandits' cost weight is (1: the alias's own, above it
    a wider tolerance, cheaper choices; 0 or below: none, the highest score, whose cost bonus a
    negative multiplier turns towards the dearer candidates). The target's multiplier settles
    wherever the spend meets the target, and the cost bonus alone could not bring the spend below
    the alias's own. Paced by a budget (BY_BUDGET): 0, the highest score, the multiplier on the
    cost bonus only: a budget's multiplier is a fixed ramp from the floor to max_multiplier
    (pacing.budget_multiplier) shaped for the cost bonus, which grades its way through the tiers;
    on it the tolerance would pass from the best tier to the cheapest in a sliver of the ramp
    (on benchmarks/team_budget.py's week, contextual's paced scores were 0.788 / 0.802 / 0.864
    for the heavy, bursty and steady teams with it, 0.833 / 0.818 / 0.887 with the bonus, at the
    same worst days). Pure."""
    if by != BY_TARGET or multiplier <= 0.0:
        return 0.0
    return tolerance * multiplier


def family_fits(pool: Pool, context: RoutingContext) -> list:
    """Each pool member's model family score for the request's task in the policy's task-fitness
    table (``TaskFitnessTable.family_fitness``; None: the family is unknown, or no policy). Read
    only when a deployment is met for the first time: the table is built for it (about 14 us)."""
    if context.policy is None:
        return [None] * len(pool)
    table = TaskFitnessTable(context.policy.task_fitness)
    return [table.family_fitness(d.model or "", context.task_type) for d in pool.deployments]


def start_cold(models, pool: Pool, context: RoutingContext, prior_variance: float) -> None:
    """Start the columns of the pool's deployments the model has not met from their prior
    (``contextual.cold_prior``, with the alias's ``contextual.cold_start`` and the policy's
    ``quality.prior``)."""
    c = _settings(context)
    cold = c.cold_start if c is not None else _COLD
    prior = context.policy.quality.prior if context.policy is not None else _PRIOR
    means = cold_prior(pool.deployments, family_fits(pool, context), cold, prior)
    for dep, m in zip(pool.ids, means):
        models.start(dep, prior_variance, m, cold.count)


class ContextualStrategy:
    name = "contextual"
    description = ("Thompson sampling on each candidate's predicted reward for this prompt (a per-deployment "
                   "Bayesian linear model of hashed words, bigrams and request features, its mean as prior), "
                   "plus cost and latency bonuses")
    # The alias settings it reads (`exploration`: an epsilon floor under Thompson sampling's own
    # exploration; `contextual`: its section's exploration, tolerance and cold start, which no other
    # built-in strategy reads).
    settings = frozenset({"exploration", "cost_weight", "latency_weight", "contextual"})

    def __init__(self):
        # The vector of the last request seen: a retry decides again on the same features object.
        self._last = (None, None, None, None)

    def vector(self, context: RoutingContext):
        feats = context.features
        last = self._last
        if last[0] is feats and last[1] == context.domain and last[2] == context.task_type:
            return last[3]
        x = request_vector(feats, context.domain, context.task_type)
        self._last = (feats, context.domain, context.task_type, x)
        return x

    def select(self, pool, context: RoutingContext) -> Decision:
        models = context.contextual
        if models is None:  # a pool decided outside an engine (no model to read): plain Thompson
            d = ThompsonStrategy().select(pool, context)
            d.reason = f"no contextual model in this context: {d.reason}"
            d.strategy = self.name
            return d
        pool = Pool.of(pool).not_open()
        prior_var, noise_var, spread, tolerance = settings_of(context)
        if context.paced is not None:  # the pacing multiplier decides (docs/quality.md#the-choice)
            tolerance = paced_tolerance(tolerance, context.cost_multiplier, context.paced)
        x = self.vector(context)
        if not models.ids.keys() >= set(pool.ids):  # a deployment met for the first time: its prior
            start_cold(models, pool, context, prior_var)
        sqrt = math.sqrt
        quality = context.quality
        if quality is not None:
            # The base is the quality estimate (prior and evidence, per domain), drawn with its own
            # posterior spread; `exploration` scales the prompt's part only (docs/quality.md#the-choice).
            # Its prior: the deployment's cold prior (task fitness, tier, price), set when first met.
            base, base_var = quality.quality_columns(pool.ids, context.quality_domain or context.domain,
                                                     models.prior_means(models.columns(pool.ids, prior_var)))
            res, res_var = models.predict_residual(pool.ids, x, pool.tick, quality.quality_gamma, prior_var)
            on = 1.0 if spread > 0.0 else 0.0  # exploration 0: always the best prediction
            mean_l, sd = [], []
            for b, r, bv, rv in zip(base, res, base_var, res_var):
                mean_l.append(b + r)
                sd.append(sqrt(max(on * bv + spread * spread * rv, 0.0)))
            spread = on
        else:
            mean_l, var, base = models.predict(pool.ids, x, pool.pulls, pool.rewards, pool.tick, pool.gamma, prior_var)
            sd = [sqrt(v) if v > 0.0 else 0.0 for v in var]
        bonus = bandit_bonuses(pool, context)
        # One draw per candidate, rng.gauss(0, 1); its score adds the bonuses.
        draws, scores = [], []
        for m, s, z, b in zip(mean_l, sd, gauss_draws(context.rng, len(sd)), bonus):
            d = m + spread * s * z
            draws.append(d)
            scores.append(d + b)
        costs = pool.costs
        best = cheapest_within(mean_l, [spread * s for s in sd], draws, scores, costs, tolerance)
        picked = explore(pool, context)
        i = best if picked is None else picked
        ids = pool.ids

        # Asked for an explanation (aisia explain, offline evaluation): each row also names the
        # features that moved its prediction most; never computed on the request path (there the
        # facts are atoms only, see decision.Explainer).
        moved = None
        if getattr(context.features, "estimate_probability", False):
            moved = (models, context.features, context.domain, context.task_type, x)
        facts = ContextualFacts(ids=atoms(ids), scores=tuple(scores), predicted=tuple(mean_l), uncertainty=tuple(sd),
                                base=tuple(base), draws=tuple(draws), bonus=tuple(bonus), best=best, chosen=i,
                                moved=moved, spread=spread, epsilon=context.exploration, tolerance=tolerance,
                                costs=atoms(costs))
        decision = explained_decision(self.name, pool.deployments[i], scores[i], _EXPLAINED, facts,
                                      probability=FROM_FACTS)
        decision.context = LearnContext(x, base[i], prior_var, noise_var,
                                        (context.quality_domain or context.domain) if quality is not None else None)
        return decision


@dataclass(slots=True, kw_only=True)
class ContextualFacts(Facts):
    """A contextual decision's facts (its own exploration wording: `drew` stays None). In pool
    order: the predicted rewards, their uncertainties, the learned means (base), the draws and
    the bonuses; the ranking's winner and the chosen (indexes: they differ when exploration drew
    another); for `aisia explain` only, what names the features that moved each prediction
    (models, features, domain, task type, vector; None on the request path); the draws' spread,
    the alias's epsilon, the quality tolerance and the costs (``cheapest_within``)."""

    predicted: tuple
    uncertainty: tuple
    base: tuple
    draws: tuple
    bonus: tuple
    best: int
    chosen: int
    moved: Optional[tuple[Any, ...]]
    spread: float
    epsilon: float
    tolerance: float
    costs: tuple


class _ContextualExplained(Explainer):
    """Explains a contextual decision from its ``ContextualFacts``."""

    __slots__ = ()

    def probability(self, facts: ContextualFacts) -> float:
        """P(the chosen is chosen) = (1 - epsilon) P(its draw + bonus is the highest) + epsilon / n
        (``win_probability``): what `aisia replay --logged` weighs the logged choice by."""
        mean_l, bonus, i, tolerance = facts.predicted, facts.bonus, facts.chosen, facts.tolerance
        eps = min(max(float(facts.epsilon or 0.0), 0.0), 1.0)
        sds = [facts.spread * x for x in facts.uncertainty]
        if tolerance > 0.0:  # the cost-aware choice: no closed form, estimated by draws
            p = choice_probability(mean_l, sds, bonus, facts.costs, tolerance, i)
            return (1.0 - eps) * p + eps / len(mean_l)
        centres = [m + b for m, b in zip(mean_l, bonus)]
        return (1.0 - eps) * win_probability(centres, sds, i) + eps / len(centres)

    def reason(self, facts: ContextualFacts) -> str:
        ids, draws, best, i, tolerance = facts.ids, facts.draws, facts.best, facts.chosen, facts.tolerance
        why = (f"contextual picked {ids[best]}: predicted reward {facts.predicted[best]:.3f} +/- "
               f"{facts.uncertainty[best]:.3f} for this prompt (its mean {facts.base[best]:.3f}), "
               f"sample {draws[best]:.3f} + bonus {facts.bonus[best]:.3f}")
        optimistic = [m + facts.spread * s for m, s in zip(facts.predicted, facts.uncertainty)]
        top = optimistic.index(max(optimistic))
        if tolerance > 0.0 and top != best:
            why += (f"; the cheapest within the quality tolerance {tolerance:g} of the best prediction plus "
                    f"one standard deviation ({ids[top]} {optimistic[top]:.3f})")
            if optimistic[best] < optimistic[top] - tolerance:
                why += " by its draw"  # (its optimistic quality alone was below the bar: cheapest_within)
        if i == best:
            return why
        return f"exploration (epsilon {facts.epsilon:g}) chose {ids[i]} at random instead; {why}"

    def terms(self, facts: ContextualFacts):
        ids, mean_l, sd, base, draws, bonus = (facts.ids, facts.predicted, facts.uncertainty, facts.base, facts.draws,
                                               facts.bonus)
        moved = facts.moved and moved_by(facts.moved[0], ids, *facts.moved[1:])
        out = {}
        for j, dep in enumerate(ids):
            row = {"predicted": round(mean_l[j], 6), "uncertainty": round(sd[j], 6), "base": round(base[j], 6),
                   "sample": round(draws[j], 6), "bonus": round(bonus[j], 6)}
            if moved is not None:
                row["moved_by"] = ", ".join(f"{lab} {c:+.3f}" for lab, c in moved.get(dep, ())) or "-"
            out[dep] = row
        return out


_EXPLAINED = _ContextualExplained()
# Gauss-Legendre nodes and weights on [0, 1] (8 per panel), computed once.
_GL = [(float(x + 1.0) / 2.0, float(w) / 2.0) for x, w in zip(*np.polynomial.legendre.leggauss(8))]
_PANELS = 8
_SQRT2 = math.sqrt(2.0)
_NORMAL = NormalDist()


def win_probability(means, sds, k: int) -> float:
    """P(member k's draw is the highest) when each member j draws from N(means[j], sds[j]**2)
    independently, ties going to the first (``scores.index(max(scores))``; a member with no
    spread draws its mean). Written as an integral over u = k's CDF, from the u at which k's
    draw passes every member without spread, to 1, of the product of the others' CDFs at k's
    draw: smooth in u, summed by composite Gauss-Legendre quadrature (8 panels of 8 nodes)."""
    mk, sk = means[k], sds[k]
    spread, fixed = [], []
    for j, (m, s) in enumerate(zip(means, sds)):
        if j != k:
            (spread if s > 0.0 else fixed).append((j, m, s))

    def below(x: float) -> float:  # P(every other draw loses to x)
        for j, m, _ in fixed:
            if not (m < x or (m == x and j > k)):
                return 0.0
        p = 1.0
        for _, m, s in spread:
            p *= 0.5 * (1.0 + math.erf((x - m) / (s * _SQRT2)))
        return p

    if sk <= 0.0:
        return below(mk)
    floor = max((m for _, m, _ in fixed), default=None)
    u0 = _NORMAL.cdf((floor - mk) / sk) if floor is not None else 0.0
    width = (1.0 - u0) / _PANELS
    total = 0.0
    for p in range(_PANELS):
        a = u0 + p * width
        for x, w in _GL:
            u = min(max(a + x * width, 1e-15), 1.0 - 1e-15)
            total += w * width * below(mk + sk * _NORMAL.inv_cdf(u))
    return min(1.0, total)


CHOICE_DRAWS = 400  # draws estimating a cost-aware choice's probability (off the request path)


def choice_probability(means, sds, bonus, costs, tolerance: float, k: int, draws: int = CHOICE_DRAWS) -> float:
    """P(``cheapest_within`` picks member k) when each member j draws from N(means[j],
    sds[j]**2): estimated from `draws` joint draws of a source seeded by the facts (the same
    facts give the same value). For ``aisia replay --logged``; never on the request path."""
    rng = random.Random(repr((tuple(means), tuple(sds), k)))
    wins = 0
    for _ in range(draws):
        d = [m + s * rng.gauss(0.0, 1.0) for m, s in zip(means, sds)]
        wins += cheapest_within(means, sds, d, [x + b for x, b in zip(d, bonus)], costs, tolerance) == k
    return wins / draws


def gauss_draws(rng, n: int) -> list[float]:
    """`n` draws of ``rng.gauss(0.0, 1.0)``, in order (CPython's Box-Muller written out saved 34k
    instructions at 16 candidates, 0.08 % of an alias request: docs/benchmarks.md, "Fast paths")."""
    return [rng.gauss(0.0, 1.0) for _ in range(n)]


def moved_by(models, ids, features, domain, task_type, x, top: int = 3) -> dict:
    """Per deployment, the `top` features (label, contribution to the prediction) that moved it
    most for this prompt."""
    from ..contextual import feature_labels

    labels = feature_labels(features, domain, task_type)
    out = {}
    for dep in ids:
        merged: dict[str, float] = {}
        for lab, c in zip(labels, models.contributions(dep, x).tolist()):
            merged[lab] = merged.get(lab, 0.0) + c
        out[dep] = [(lab, c) for lab, c in sorted(merged.items(), key=lambda kv: -abs(kv[1]))[:top] if c != 0.0]
    return out
