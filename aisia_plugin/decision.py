"""The plain data a routing decision is made of: deployments, candidates, context, decision.

Nothing here does I/O; strategies receive a pool of Candidates and a RoutingContext and return a
Decision."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from collections.abc import Mapping as _MappingABC
from typing import Any, Mapping, Optional

HEALTH = {"CLOSED": 1.0, "HALF_OPEN": 0.5, "OPEN": 0.0}


class _NoSignals(_MappingABC):
    """The empty, read-only, hashable mapping shared as Candidate.signals' default: building a
    dict per candidate per request would cost more than the rest of the candidate."""

    __slots__ = ()

    def __getitem__(self, key):
        raise KeyError(key)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"


NO_SIGNALS: Mapping[str, float] = _NoSignals()


@dataclass(frozen=True, slots=True)
class Deployment:
    """A LiteLLM deployment as the router sees it (static facts, from config and policy)."""

    id: str  # LiteLLM model_info.id (a replay candidate's name)
    model_name: str  # LiteLLM model group (model_name)
    model: str  # litellm_params.model, e.g. "openai/gpt-4o"
    provider: str
    tier: Optional[str] = None
    local: bool = False
    tags: tuple[str, ...] = ()
    input_cost_per_1m: float = 2.0
    output_cost_per_1m: float = 2.0
    # Domain -> model served for that domain (None: the deployment's own model).
    specialities: Mapping[str, Optional[str]] = field(default_factory=dict)

    @property
    def cost_per_1m(self) -> float:
        """One price per 1M tokens, as the seed's bonuses expect: a 3:1 input:output blend."""
        return 0.75 * self.input_cost_per_1m + 0.25 * self.output_cost_per_1m


@dataclass(slots=True)
class Candidate:
    """A deployment in a pool, with what is known about it now."""

    deployment: Deployment
    stats: Any  # bandit.ArmStats for the request's domain (blended with the global prior)
    breaker: str = "CLOSED"  # effective breaker state now: CLOSED | HALF_OPEN | OPEN
    p95_latency_ms: float = 5000.0
    latency_stddev_ms: float = 0.0
    error_rate: float = 0.0
    task_fit: float = 0.5
    quota: float = 1.0  # remaining quota share, 0..1 (1 when unknown)
    signals: Mapping[str, float] = NO_SIGNALS  # supplied factors (context_affinity, ...)

    @property
    def id(self) -> str:
        return self.deployment.id

    @property
    def provider(self) -> str:
        return self.deployment.provider

    @property
    def cost_per_1m(self) -> float:
        return self.deployment.cost_per_1m

    @property
    def health(self) -> float:
        return HEALTH[self.breaker]


@dataclass(slots=True)
class RoutingContext:
    """Everything a strategy may use besides the pool. Built by the engine."""

    alias: str
    strategy: str
    features: Any  # features.RequestFeatures
    domain: Optional[str]
    task_type: str
    now: float
    rng: random.Random
    exploration_c: float = math.sqrt(2)
    cost_weight: float = 0.1
    latency_weight: float = 0.15
    cost_scale_per_1m: float = 10.0
    latency_scale_s: float = 30.0
    exploration: float = 0.0  # epsilon for the ranking strategies
    weights: Mapping[str, float] = field(default_factory=dict)  # normalised rules weights
    tier_hint: Optional[str] = None
    sla: Any = None  # policy.models.Sla
    last_known_good: Optional[str] = None
    lkgp_enabled: bool = True
    total_pulls: float = 0.0  # N of UCB1, over the pool
    policy: Any = None  # the whole policy.models.Policy, for plugins


@dataclass(slots=True)
class CandidateScore:
    id: str
    score: Optional[float] = None
    excluded: Optional[str] = None  # why the candidate did not compete
    terms: dict = field(default_factory=dict)  # named parts of the score

    def as_dict(self) -> dict:
        d = {"id": self.id, "score": self.score}
        if self.excluded:
            d["excluded"] = self.excluded
        if self.terms:
            d["terms"] = self.terms
        return d


class Decision:
    """The outcome of routing one request, explaining itself.

    ``scores`` (every candidate's score or the reason it was excluded, with the named parts of
    the score) may be built on first read: a strategy passes ``build_scores``, a function of no
    argument returning the rows, so that a request whose explanation nobody reads does not pay
    for one object per candidate. Reading ``scores`` (or ``as_dict()``) always gives the full
    list, the same on every read. The other fields are plain attributes."""

    __slots__ = ("deployment_id", "model", "strategy", "reason", "candidates_considered", "final_score",
                 "probability", "alias", "domain", "task_type", "refused", "status_code",
                 "_scores", "_build_scores", "_more_scores")

    def __init__(self, deployment_id: Optional[str], model: Optional[str], strategy: str, reason: str,
                 candidates_considered: int, final_score: Optional[float], scores: Optional[list] = None,
                 probability: Optional[float] = None, alias: str = "", domain: Optional[str] = None,
                 task_type: str = "default", refused: Optional[str] = None, status_code: int = 200, *,
                 build_scores=None):
        self.deployment_id = deployment_id
        self.model = model
        self.strategy = strategy
        self.reason = reason
        self.candidates_considered = candidates_considered
        self.final_score = final_score
        self.probability = probability  # selection probability, where the strategy can state it
        self.alias = alias
        self.domain = domain
        self.task_type = task_type
        self.refused = refused  # set when no deployment may serve (e.g. strict budget)
        self.status_code = status_code  # HTTP status to answer with when refused (402 budget, 503 none)
        self._scores = list(scores) if scores is not None else (None if build_scores is not None else [])
        self._build_scores = build_scores
        self._more_scores: Optional[list] = None

    @property
    def scores(self) -> list[CandidateScore]:
        if self._scores is None:
            rows = list(self._build_scores())
            if self._more_scores:
                rows.extend(self._more_scores)
            self._scores, self._build_scores, self._more_scores = rows, None, None
        return self._scores

    @scores.setter
    def scores(self, rows) -> None:
        self._scores, self._build_scores, self._more_scores = list(rows), None, None

    def add_scores(self, rows) -> None:
        """Append rows (the engine's exclusions) after the strategy's, without building them."""
        if not rows:
            return
        if self._scores is not None:
            self._scores.extend(rows)
        elif self._more_scores is None:
            self._more_scores = list(rows)
        else:
            self._more_scores.extend(rows)

    def __repr__(self) -> str:
        return (f"Decision(deployment_id={self.deployment_id!r}, model={self.model!r}, strategy={self.strategy!r}, "
                f"reason={self.reason!r}, final_score={self.final_score!r}, alias={self.alias!r}, "
                f"domain={self.domain!r}, refused={self.refused!r}, status_code={self.status_code!r})")

    def as_dict(self) -> dict:
        return {
            "alias": self.alias,
            "deployment_id": self.deployment_id,
            "model": self.model,
            "strategy": self.strategy,
            "reason": self.reason,
            "domain": self.domain,
            "task_type": self.task_type,
            "candidates_considered": self.candidates_considered,
            "final_score": self.final_score,
            "probability": self.probability,
            "refused": self.refused,
            "status_code": self.status_code,
            "candidates": [s.as_dict() for s in self.scores],
        }


def not_open(pool: list[Candidate]) -> list[Candidate]:
    """The candidates whose breaker is not OPEN; the whole pool when every one is OPEN."""
    healthy = [c for c in pool if c.breaker != "OPEN"]
    return healthy or list(pool)


def ranked_decision(strategy: str, pool: list[Candidate], scores, chosen: Candidate,
                    reason: str, *, probability: Optional[float] = None, terms=None,
                    excluded: Optional[Mapping[int, str]] = None, final_score: Optional[float] = None) -> Decision:
    """A Decision listing every pool member's score (helper for strategies).

    `scores` and `terms` are mappings by candidate id, or functions of no argument returning
    them, called only when the decision's rows are first read (then `final_score`, the chosen
    candidate's score, must be given); `excluded` maps ``id(candidate)`` to why that pool member
    did not compete."""
    if callable(scores):
        score_of = None
    else:
        score_of = scores
        final_score = scores.get(chosen.id)

    def rows():
        sc = score_of if score_of is not None else scores()
        tm = (terms() if callable(terms) else terms) or {}
        out = [CandidateScore(c.id, sc.get(c.id), None, tm.get(c.id, {})) for c in pool]
        if excluded:
            for c, row in zip(pool, out):
                why = excluded.get(id(c))
                if why is not None:
                    row.excluded = why
        return out

    return Decision(chosen.id, chosen.deployment.model, strategy, reason, len(pool), final_score,
                    probability=probability, build_scores=rows)


def pool_decision(strategy: str, pool: list[Candidate], scores: list, chosen: int, reason: str, *,
                  probability: Optional[float] = None, terms=None) -> Decision:
    """Like :func:`ranked_decision` with the scores as a list in pool order and the chosen
    candidate as an index. The rows are built when the decision's ``scores`` are first read;
    ``terms``, when given, is a function of the candidate's index returning its named terms."""
    c = pool[chosen]

    def rows():
        if terms is None:
            return [CandidateScore(x.deployment.id, sc) for x, sc in zip(pool, scores)]
        return [CandidateScore(x.deployment.id, sc, None, terms(i)) for i, (x, sc) in enumerate(zip(pool, scores))]

    return Decision(c.deployment.id, c.deployment.model, strategy, reason, len(pool), scores[chosen],
                    probability=probability, build_scores=rows)
