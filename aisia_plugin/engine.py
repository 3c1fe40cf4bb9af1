"""The routing pipeline: the only place that orders the steps.

    request -> features -> domain -> alias candidates -> specialists -> breaker -> budget
            -> strategy (plugins) -> Decision
    outcome -> failure class -> breaker -> reward -> bandit (global and per domain) -> LKGP

No I/O: the clock, the random source and the state store are injected (the memory store is
plain data; the Redis adapter implements the same methods)."""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace
from typing import Callable, Iterable, Optional, Sequence

from . import plugins
from .bandit import ArmStats, blend, decayed, gamma_for, update
from .breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker, FailureKind, classify_failure
from .decision import Candidate, CandidateScore, Decision, Deployment, RoutingContext
from .deployments import selects
from .domains import DomainDetector
from .features import RequestFeatures, extract_features
from .outcome import Outcome, reward
from .policy.models import Policy
from .state.memory import MemoryState
from .task_fitness import TaskFitnessTable
from .weights import normalise, weights_for_alias


class UnknownAlias(KeyError):
    pass


class Engine:
    def __init__(self, policy: Policy, *, clock: Callable[[], float] = time.time,
                 rng: Optional[random.Random] = None, store=None):
        self.policy = policy
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.store = store if store is not None else MemoryState()
        self.breaker = CircuitBreaker(policy.circuit_breaker)
        self.detector = DomainDetector(policy.domains)
        self.fitness = TaskFitnessTable(policy.task_fitness)
        self.gamma = gamma_for(policy.bandit.forgetting.half_life_requests if policy.bandit.forgetting.enabled else None)
        self._fallback_weights = policy.rules.weights.model_dump()
        self._weights = {name: normalise(weights_for_alias(policy, a), self._fallback_weights)
                         for name, a in policy.aliases.items()}
        self._fresh = ArmStats(avg_latency=policy.bandit.initial_latency_s)
        self._hook = plugins.hook()

    # -- deciding ------------------------------------------------------------------------------
    def features(self, messages, tools=None, request_modalities=None) -> RequestFeatures:
        feats = extract_features(messages, tools, request_modalities, max_chars=self.policy.domains.max_scan_chars)
        extra = {}
        for contributed in self._hook.extract_features(messages=messages, features=feats):
            if isinstance(contributed, dict):
                extra.update(contributed)
        return replace(feats, extra=extra) if extra else feats

    def decide(self, alias: str, messages, deployments: Sequence[Deployment], *, tools=None,
               exclude: Iterable[str] = (), request_modalities=None,
               features: Optional[RequestFeatures] = None, reserve: bool = True) -> Decision:
        ap = self.policy.aliases.get(alias)
        if ap is None:
            raise UnknownAlias(alias)
        now = self.clock()
        feats = features if features is not None else self.features(messages, tools, request_modalities)
        domain = ap.domain_hint or self.detector.detect(feats.text)
        task = ap.task_hint or feats.task_type
        excluded: list[CandidateScore] = []
        exclude = set(exclude)

        pool = []
        for d in deployments:
            if not selects(ap.candidates, d):
                excluded.append(CandidateScore(d.id, excluded="not selected by the alias's candidates"))
            elif d.id in exclude:
                excluded.append(CandidateScore(d.id, excluded="already failed for this request"))
            else:
                pool.append(d)

        # Specialists (seed section 6): when some candidates specialise in the domain, only they compete.
        if domain and pool:
            specialists = [d for d in pool if domain in d.specialities]
            if specialists:
                for d in pool:
                    if domain not in d.specialities:
                        excluded.append(CandidateScore(d.id, excluded=f"not a {domain} specialist"))
                pool = specialists

        # Circuit breaker: skip OPEN, rate-limited and probe-saturated deployments.
        breaker_state = {}
        available = []
        blocked = []
        for d in pool:
            bs = self.store.breaker(d.id)
            eff = self.breaker.effective_state(bs, now)
            breaker_state[d.id] = (bs, eff)
            if self.breaker.available(bs, now):
                available.append(d)
            else:
                why = ("rate limited (429) until t=%.1f" % bs.rate_limited_until if self.breaker.is_rate_limited(bs, now)
                       else "circuit OPEN" if eff == OPEN else "half-open probes all in flight")
                blocked.append((d, why))
        degraded = False
        if available:
            excluded.extend(CandidateScore(d.id, excluded=why) for d, why in blocked)
            pool = available
        elif pool:
            degraded = True  # every candidate is blocked: still serve, from the whole pool

        # Budget cap (OmniRoute): estimated cost of this request per candidate.
        budget = ap.budget
        if budget.max_cost_per_request_usd is not None and pool:
            est = {d.id: (feats.input_tokens * d.input_cost_per_1m + budget.expected_output_tokens * d.output_cost_per_1m) / 1e6
                   for d in pool}
            fits = [d for d in pool if est[d.id] <= budget.max_cost_per_request_usd]
            if not fits:
                if budget.mode == "strict":
                    return self._finish(Decision(
                        None, None, ap.strategy,
                        f"no candidate fits the budget of ${budget.max_cost_per_request_usd:g} per request "
                        f"(cheapest estimate ${min(est.values()):.6f}); strict budget refuses",
                        0, None, excluded + [CandidateScore(d.id, excluded=f"estimated ${est[d.id]:.6f} over budget") for d in pool],
                        alias=alias, domain=domain, task_type=task, refused="budget", status_code=402), feats)
                cheapest = min(pool, key=lambda d: est[d.id])
                excluded.extend(CandidateScore(d.id, excluded=f"estimated ${est[d.id]:.6f} over budget") for d in pool if d is not cheapest)
                pool = [cheapest]
            else:
                excluded.extend(CandidateScore(d.id, excluded=f"estimated ${est[d.id]:.6f} over budget") for d in pool if d not in fits)
                pool = fits

        if not pool:
            return self._finish(Decision(None, None, ap.strategy, "no deployment is available for this alias", 0, None,
                                         excluded, alias=alias, domain=domain, task_type=task,
                                         refused="no_candidates", status_code=503), feats)

        # Candidates with what is known about them now.
        tick = self.store.tick()
        per_domain = self.policy.bandit.per_domain
        candidates = []
        total = 0.0
        for d in pool:
            g = self.store.arm(d.id, None)
            g = decayed(g, tick, self.gamma) if g is not None else self._fresh
            if domain and per_domain.enabled:
                ds = self.store.arm(d.id, domain)
                stats = blend(g, decayed(ds, tick, self.gamma) if ds is not None else None, per_domain.prior_strength)
            else:
                stats = g
            total += stats.pulls
            eff = breaker_state[d.id][1]
            candidates.append(Candidate(
                deployment=d, stats=stats, breaker=eff,
                p95_latency_ms=g.p95_latency * 1000.0, latency_stddev_ms=g.latency_stddev * 1000.0,
                error_rate=g.error_rate, task_fit=self.fitness.fitness(d.model, task),
            ))
        bp = self.policy.bandit
        ctx = RoutingContext(
            alias=alias, strategy=ap.strategy, features=feats, domain=domain, task_type=task, now=now, rng=self.rng,
            exploration_c=ap.exploration_c if ap.exploration_c is not None else bp.exploration_c,
            cost_weight=ap.cost_weight if ap.cost_weight is not None else bp.cost_weight,
            latency_weight=ap.latency_weight if ap.latency_weight is not None else bp.latency_weight,
            cost_scale_per_1m=bp.cost_scale_per_1m, latency_scale_s=bp.latency_scale_s,
            exploration=ap.exploration, weights=self._weights[alias], tier_hint=ap.tier_hint, sla=ap.sla,
            last_known_good=self.store.last_known_good(alias), lkgp_enabled=ap.lkgp_enabled,
            total_pulls=total, policy=self.policy,
        )
        decision = plugins.get_strategy(ap.strategy).select(candidates, ctx)
        chosen = next((c for c in candidates if c.id == decision.deployment_id), None)
        if chosen is None:  # a plugin returned something outside the pool: never route there
            chosen = candidates[0]
            decision.reason = f"strategy returned {decision.deployment_id!r}, not in the pool; using {chosen.id}"
            decision.deployment_id = chosen.id
        special = chosen.deployment.specialities.get(domain) if domain else None
        decision.model = special or chosen.deployment.model
        decision.alias, decision.domain, decision.task_type = alias, domain, task
        decision.scores.extend(excluded)
        if degraded:
            decision.reason += " (every candidate's breaker blocks it: serving anyway)"
        if reserve:
            bs, eff = breaker_state[chosen.id]
            if eff != CLOSED:
                _, new_state = self.breaker.reserve(bs, now)
                self.store.put_breaker(chosen.id, new_state)
        return self._finish(decision, feats)

    def _finish(self, decision: Decision, feats) -> Decision:
        try:
            self._hook.observe_decision(decision=decision, context=feats)
        except Exception:  # an observer must never break routing
            pass
        return decision

    # -- learning --------------------------------------------------------------------------------
    def record(self, decision_or_alias, outcome: Outcome, *, domain: Optional[str] = None) -> float | None:
        """Learn from one outcome. Returns the reward, or None when the outcome says nothing about
        the deployment's quality (a client error or a rate limit)."""
        if isinstance(decision_or_alias, Decision):
            alias, domain = decision_or_alias.alias, decision_or_alias.domain
        else:
            alias = decision_or_alias
        ap = self.policy.aliases.get(alias)
        now = self.clock()
        dep = outcome.deployment_id
        bs = self.store.breaker(dep)
        kind = None
        if outcome.success:
            self.store.put_breaker(dep, self.breaker.on_success(bs, now))
        else:
            kind = classify_failure(self.policy.circuit_breaker, status_code=outcome.status_code,
                                    error_type=outcome.error_type, message=outcome.message)
            self.store.put_breaker(dep, self.breaker.on_failure(bs, now, kind, outcome.retry_after_s))
        value = None
        if kind in (None, FailureKind.PROVIDER):
            target = ap.sla.target_p95_ms if ap is not None else 2000.0
            value = reward(outcome, self.policy.reward, target)
            tick = self.store.advance_tick()
            bp = self.policy.bandit
            keys = [None]
            if domain and bp.per_domain.enabled:
                keys.append(domain)
            for key in keys:
                prev = self.store.arm(dep, key) or self._fresh
                self.store.put_arm(dep, key, update(
                    prev, reward=value, latency_s=outcome.latency_s, failed=not outcome.success, tick=tick,
                    gamma=self.gamma, ema_weight=bp.latency_ema_weight, success_threshold=bp.thompson_success_threshold))
            if outcome.success and alias:
                self.store.set_last_known_good(alias, dep)
        try:
            self._hook.observe_outcome(outcome=outcome, decision=decision_or_alias)
        except Exception:
            pass
        return value
