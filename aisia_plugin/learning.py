"""What one outcome changes, as one pure function over plain records.

A state store applies :func:`apply_outcome` atomically (the memory store under its lock, the
Redis store in a Lua script that mirrors it step by step; a property test holds the two equal).
The engine only classifies the outcome and computes its reward: it never reads then writes the
store, so two replicas recording at once cannot lose each other's updates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from .bandit import ArmStats, update
from .breaker import BreakerState, CircuitBreaker, FailureKind
from .pacing import PaceRule, PaceState, alias_of, pace


def learns_from(kind: Optional[FailureKind]) -> bool:
    """Whether an outcome of this failure kind (None: a success) teaches the deployment's arms:
    a success or a failure that counts against the deployment (the kind of ``blame.judge``'s
    verdict, which says whose failure it is); a rate limit or a failure that is not the
    deployment's does not."""
    return kind is None or kind is FailureKind.PROVIDER


# Treated as immutable (nothing changes one once built) but not frozen, as bandit.ArmStats: a
# frozen dataclass's __init__ goes through object.__setattr__ per field, several times the cost,
# and one of each is built per learned outcome.
@dataclass(slots=True)
class OutcomeRecord:
    """One classified outcome, as a store records it.

    ``kind`` is None for a success, else the failure's class; ``learn`` says whether the bandit
    learns from it (a success or a provider failure: a client error or a rate limit says nothing
    about quality). ``domain`` is the per-domain record to update as well (None: global only).
    ``id`` makes the record idempotent where a store replays batches (the Redis store).
    ``pace_alias`` names the pacing record this call's ``cost_usd`` counts against: the alias's
    with a spend target, ``alias|team:ID`` for a call of a team (pacing.pace_key; None: not paced)."""

    deployment_id: str
    now: float
    kind: Optional[FailureKind] = None
    reward: float = 0.0
    latency_s: Optional[float] = None
    alias: Optional[str] = None
    domain: Optional[str] = None
    retry_after_s: Optional[float] = None
    id: Optional[str] = None
    pace_alias: Optional[str] = None
    cost_usd: Optional[float] = None

    @property
    def success(self) -> bool:
        return self.kind is None

    @property
    def learn(self) -> bool:
        return learns_from(self.kind)


# The engine's name for the record's constructor (every field given, in order).
outcome_record = OutcomeRecord


@dataclass(frozen=True, slots=True)
class LearningRules:
    """The policy's parameters of an update, handed to the store with each record (so that a
    reloaded policy applies from the next outcome on): the breaker's transitions, forgetting,
    the latency EMA weight, Thompson's success threshold, the record of an unseen arm, the
    aliases' spend targets (alias -> pacing.PaceRule) and the quality evidence's forgetting
    (``quality_gamma``: slower than the arms', quality.half_life_requests)."""

    breaker: CircuitBreaker
    gamma: float = 1.0
    ema_weight: float = 0.2
    success_threshold: float = 0.5
    fresh: ArmStats = field(default_factory=ArmStats)
    pacing: Mapping[str, PaceRule] = field(default_factory=dict)
    quality_gamma: float = 1.0


@dataclass(slots=True)  # (not frozen: as OutcomeRecord)
class Applied:
    """The records after one outcome (arms None where they did not change)."""

    breaker: BreakerState
    tick: float
    global_arm: Optional[ArmStats]
    domain_arm: Optional[ArmStats]
    last_known_good: Optional[str]
    pace: Optional[PaceState] = None  # the paced alias's record (None: not paced)


def apply_outcome(rec: OutcomeRecord, rules: LearningRules, breaker: Optional[BreakerState], tick: float,
                  global_arm: Optional[ArmStats], domain_arm: Optional[ArmStats],
                  pace_state: Optional[PaceState] = None) -> Applied:
    """The breaker transition, the paced alias's spend record (every call whose cost is known,
    learning or not: a call is spent either way), then (for a learning outcome) the tick
    advanced by one and the global and per-domain arms updated at the new tick, and the alias's
    last known good set on a success."""
    bs = breaker if breaker is not None else BreakerState()
    cb = rules.breaker
    if rec.kind is None:
        bs = cb.on_success(bs, rec.now)
    else:
        bs = cb.on_failure(bs, rec.now, rec.kind, rec.retry_after_s)
    paced = None
    rule = rules.pacing.get(alias_of(rec.pace_alias)) if rec.pace_alias is not None else None
    if rule is not None:
        paced = pace(pace_state, rule, rec.cost_usd, rec.now)
    if not rec.learn:
        return Applied(bs, tick, None, None, None, paced)
    tick = tick + 1.0
    failed = rec.kind is not None

    def step(prev: Optional[ArmStats]) -> ArmStats:
        return update(prev if prev is not None else rules.fresh, reward=rec.reward, latency_s=rec.latency_s,
                      failed=failed, tick=tick, gamma=rules.gamma, ema_weight=rules.ema_weight,
                      success_threshold=rules.success_threshold)

    g = step(global_arm)
    d = step(domain_arm) if rec.domain is not None else None
    lkgp = rec.alias if (rec.kind is None and rec.alias) else None
    return Applied(bs, tick, g, d, lkgp, paced)
