"""The plain data a routing decision is made of: deployments, candidates, context, decision.

Nothing here does I/O; strategies receive a pool of Candidates and a RoutingContext and return a
Decision."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

HEALTH = {"CLOSED": 1.0, "HALF_OPEN": 0.5, "OPEN": 0.0}


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
    signals: dict = field(default_factory=dict)  # supplied factors (context_affinity, ...)

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


@dataclass(slots=True)
class Decision:
    """The outcome of routing one request, explaining itself."""

    deployment_id: Optional[str]
    model: Optional[str]
    strategy: str
    reason: str
    candidates_considered: int
    final_score: Optional[float]
    scores: list[CandidateScore] = field(default_factory=list)
    probability: Optional[float] = None  # selection probability, where the strategy can state it
    alias: str = ""
    domain: Optional[str] = None
    task_type: str = "default"
    refused: Optional[str] = None  # set when no deployment may serve (e.g. strict budget)
    status_code: int = 200  # HTTP status to answer with when refused (402 budget, 503 none)

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


def ranked_decision(strategy: str, pool: list[Candidate], scores: Mapping[str, float], chosen: Candidate,
                    reason: str, *, probability: Optional[float] = None, terms: Mapping[str, dict] | None = None) -> Decision:
    """A Decision listing every pool member's score (helper for strategies)."""
    terms = terms or {}
    return Decision(
        deployment_id=chosen.id,
        model=chosen.deployment.model,
        strategy=strategy,
        reason=reason,
        candidates_considered=len(pool),
        final_score=scores.get(chosen.id),
        scores=[CandidateScore(c.id, scores.get(c.id), None, terms.get(c.id, {})) for c in pool],
        probability=probability,
    )
