"""Quality learned from evidence only, apart from health (docs/quality.md).

Health (errors, timeouts, latency, the breaker) learns from every call, in the bandit's arms.
Quality learns from evidence only: a prior the operator declares (tier, specialities) and what
says something of an answer -- explicit feedback, a judge's grade, a conversation signal. A
successful call with no grade is scored with the deployment's quality *estimate* for the
request's domain, never with 1: a thousand plain successes leave the estimate at its prior.

    estimate = (strength * prior + sum of weight * value) / (strength + sum of weights)

The sums are forgotten as the bandit forgets (gamma per tick of the store), lazily when the
record is read or updated. Pure: plain records and functions, no clock, no I/O; the stores keep
one ``QualityStats`` per (deployment, domain) beside the arms and apply ``apply_evidence``
atomically (the Redis store's lua/record.lua mirrors it step by step)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from .numbers import clamp01

# Where quality evidence comes from (the prior is not evidence: it is the starting point).
SOURCES = ("feedback", "judge", "signal")
# The record of the prompts of no declared domain (none detected, no single domain's words in
# them): kept apart from the deployment's global record, which sums every domain's evidence. A
# deployment poor at math and good at everything else would otherwise be read, on a general
# question, at its average over both (docs/quality.md#the-choice). Outside the schema's domain
# names (^[a-z]...), so no operator's domain shares it.
OTHER_PROMPTS = "_other"


@dataclass(frozen=True, slots=True)
class QualityStats:
    """The evidence recorded about one deployment (in one domain, or over all of them):
    ``weight`` and ``total`` the forgotten sums of the evidence's weights and of weight * value,
    as of ``tick``; ``feedback``, ``judge``, ``signal`` how many pieces of each source were
    recorded (plain counts, for a reader)."""

    weight: float = 0.0
    total: float = 0.0
    feedback: float = 0.0
    judge: float = 0.0
    signal: float = 0.0
    tick: float = 0.0

    def at(self, tick: float, gamma: float) -> "QualityStats":
        """The record as seen at `tick` (its sums forgotten since its own tick)."""
        if gamma >= 1.0 or tick <= self.tick:
            return self
        f = gamma ** (tick - self.tick)
        return QualityStats(self.weight * f, self.total * f, self.feedback, self.judge, self.signal, tick)


EMPTY = QualityStats()
QUALITY_FIELDS = ("weight", "total", "feedback", "judge", "signal", "tick")


@dataclass(frozen=True, slots=True)
class QualityRecord:
    """One piece of quality evidence as a store records it: `value` in [0, 1] about
    `deployment_id` (its global record, and its `domain`'s when not None), weighing `weight`
    observations, from `source` (one of SOURCES)."""

    deployment_id: str
    value: float
    weight: float
    source: str
    domain: Optional[str] = None


def add_evidence(prev: Optional[QualityStats], value: float, weight: float, source: str, tick: float,
                 gamma: float) -> QualityStats:
    """The record after one piece of evidence, at `tick`."""
    q = (prev if prev is not None else EMPTY).at(tick, gamma)
    counts = [q.feedback, q.judge, q.signal]
    counts[SOURCES.index(source)] += 1.0
    return QualityStats(q.weight + weight, q.total + weight * clamp01(value), *counts, max(tick, q.tick))


def apply_evidence(rec: QualityRecord, tick: float, gamma: float, global_q: Optional[QualityStats],
                   domain_q: Optional[QualityStats]) -> tuple[QualityStats, Optional[QualityStats]]:
    """The deployment's global record and its domain's (None without a domain) after `rec`."""
    g = add_evidence(global_q, rec.value, rec.weight, rec.source, tick, gamma)
    d = add_evidence(domain_q, rec.value, rec.weight, rec.source, tick, gamma) if rec.domain is not None else None
    return g, d


def estimate(q: Optional[QualityStats], prior: float, strength: float, tick: float, gamma: float) -> float:
    """The quality estimate: the prior's `strength` pseudo-observations and the evidence."""
    if q is None:
        return prior
    q = q.at(tick, gamma)
    n = strength + q.weight
    return clamp01((strength * prior + q.total) / n) if n > 0.0 else prior


def posterior(q: Optional[QualityStats], prior: float, strength: float, tick: float,
              gamma: float) -> tuple[float, float]:
    """(estimate, its variance): the estimate read as the mean of a Beta posterior of
    ``strength + evidence weight`` observations, variance m (1 - m) / (n + 1). The variance
    shrinks with evidence only, never with plain successes (docs/quality.md#the-choice)."""
    m = estimate(q, prior, strength, tick, gamma)
    n = strength + (q.at(tick, gamma).weight if q is not None else 0.0)
    return m, m * (1.0 - m) / (n + 1.0)


def prior_quality(deployment, domain: Optional[str], prior) -> float:
    """A deployment's prior quality in `domain` (None: over every domain), from what its
    operator declares (`prior`: the policy's ``quality.prior``): its tier's value, ``untiered``
    without one, plus ``speciality_bonus`` in a domain among its specialities."""
    tier = getattr(deployment, "tier", None)
    q = prior.by_tier.get(tier, prior.untiered) if tier is not None else prior.untiered
    if domain is not None and domain in (getattr(deployment, "specialities", None) or ()):
        q += prior.speciality_bonus
    return clamp01(q)


class QualityPriors:
    """The policy's ``quality`` section and the deployments met so far (an outcome names only
    its deployment's id): each one's prior, each source's weight, and the stats' view of a
    record. Held by an engine and, for ``stats()``, by its store."""

    def __init__(self, quality, gamma: float = 1.0):
        self.settings = quality
        self.strength = float(quality.prior.strength)
        self.gamma = gamma  # the engine's forgetting per tick, which the evidence's sums follow
        self._known: dict[str, object] = {}

    def know(self, deployments: Iterable) -> None:
        """Remember the deployments a decision met (their tiers and specialities)."""
        known = self._known
        for d in deployments:
            known[d.id] = d
        if len(known) > 100000:  # a config reloaded for months: keep the latest ones only
            for dep in list(known)[:len(known) - 100000]:
                del known[dep]

    def known(self) -> list:
        """The deployments met so far (what ``know`` remembers), oldest first."""
        return list(self._known.values())

    def prior(self, deployment_id: str, domain: Optional[str]) -> float:
        """The prior of a deployment by id (``untiered`` for one never met)."""
        d = self._known.get(deployment_id)
        return prior_quality(d, domain, self.settings.prior)

    def columns(self, store, ids, domain: Optional[str], tick: float,
                priors: Optional[Sequence[float]] = None) -> tuple[list[float], list[float]]:
        """(estimate, variance) per deployment of `ids` in `domain` (None: their global records):
        ``posterior`` of each one's record in `store` from `priors` (None: each one's declared
        prior, ``prior``)."""
        means, variances = [], []
        strength, gamma, quality_of = self.strength, self.gamma, store.quality_of
        for k, dep in enumerate(ids):
            prior = self.prior(dep, domain) if priors is None else priors[k]
            m, v = posterior(quality_of(dep, domain), prior, strength, tick, gamma)
            means.append(m)
            variances.append(v)
        return means, variances

    def weight(self, source: str) -> float:
        """One piece of evidence from `source`, in observations (the policy's ``quality.evidence``)."""
        return float(getattr(self.settings.evidence, source))

    def view(self, q: Optional[QualityStats], deployment_id: Optional[str], domain: Optional[str], tick: float,
             gamma: float) -> dict:
        """A record as ``/admin/bandit/stats`` shows it (``quality_view``) with the prior."""
        p = self.prior(deployment_id, domain) if deployment_id is not None else None
        return quality_view(q, p, self.strength, tick, gamma)


def quality_view(q: Optional[QualityStats], prior: Optional[float], strength: Optional[float], tick: float,
                 gamma: float) -> dict:
    """What the stats show of a quality record: the estimate (the evidence's mean alone when no
    prior is known; None with neither), the prior, the evidence by source (the prior counted in
    pseudo-observations) and the evidence's total weight as of `tick`."""
    seen = (q if q is not None else EMPTY).at(tick, gamma)
    if prior is not None:
        est = estimate(seen, prior, strength or 0.0, tick, gamma)
    else:
        est = clamp01(seen.total / seen.weight) if seen.weight > 0.0 else None
    return {"estimate": est, "prior": prior,
            "evidence": {"prior": strength, "feedback": seen.feedback, "judge": seen.judge, "signal": seen.signal},
            "evidence_weight": seen.weight}


def finite_unit(value) -> Optional[float]:
    """`value` as a float in [0, 1], or None when it is no finite number in that range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) and 0.0 <= v <= 1.0 else None
