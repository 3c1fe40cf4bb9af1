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
from .bandit import ArmStats, arm_view, gamma_for, update
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
        self._selection_cache: dict[tuple, tuple] = {}

    # -- deciding ------------------------------------------------------------------------------
    def features(self, messages, tools=None, request_modalities=None) -> RequestFeatures:
        feats = extract_features(messages, tools, request_modalities, max_chars=self.policy.domains.max_scan_chars)
        hook = self._hook.extract_features
        if not hook.get_hookimpls():
            return feats
        extra = {}
        for contributed in hook(messages=messages, features=feats):
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
        selected, excluded = self._selected(alias, ap, deployments)
        excluded = list(excluded)
        pool = selected
        if exclude:
            exclude = set(exclude)
            pool = [d for d in selected if d.id not in exclude]
            if len(pool) != len(selected):
                excluded.extend(CandidateScore(d.id, excluded="already failed for this request")
                                for d in selected if d.id in exclude)

        # Specialists (seed section 6): when some candidates specialise in the domain, only they compete.
        if domain and pool:
            specialists = [d for d in pool if domain in d.specialities]
            if specialists:
                for d in pool:
                    if domain not in d.specialities:
                        excluded.append(CandidateScore(d.id, excluded=f"not a {domain} specialist"))
                pool = specialists

        # One read of the store for the whole pool (the Redis store: one round trip).
        per_domain = self.policy.bandit.per_domain
        learn_domain = domain if (domain and per_domain.enabled) else None
        tick, breakers, global_arms, domain_arms, last_good = self.store.read_pool([d.id for d in pool], learn_domain, alias)

        # Circuit breaker: skip OPEN, rate-limited and probe-saturated deployments. A deployment
        # with no stored breaker, or a CLOSED one not rate limited, is available as is.
        breaker_state = {}
        available = []
        blocked = []
        for d, bs in zip(pool, breakers):
            if bs is None or (bs.state == CLOSED and now >= bs.rate_limited_until):
                available.append(d)
                continue
            eff = self.breaker.effective_state(bs, now)
            breaker_state[d.id] = (bs, eff)
            if self.breaker.available(bs, now):
                available.append(d)
            else:
                why = ("rate limited (429) until t=%.1f" % bs.rate_limited_until if self.breaker.is_rate_limited(bs, now)
                       else "circuit OPEN" if eff == OPEN else "half-open probes all in flight")
                blocked.append((d, why))
        degraded = False
        if blocked:
            if available:
                excluded.extend(CandidateScore(d.id, excluded=why) for d, why in blocked)
                keep = {d.id for d in available}
                rows = [(d, g, ds) for d, g, ds in zip(pool, global_arms, domain_arms) if d.id in keep]
                pool = available
                global_arms = [r[1] for r in rows]
                domain_arms = [r[2] for r in rows]
            else:
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
                keep_ids = {cheapest.id}
            else:
                excluded.extend(CandidateScore(d.id, excluded=f"estimated ${est[d.id]:.6f} over budget") for d in pool if d not in fits)
                keep_ids = {d.id for d in fits}
            if len(keep_ids) != len(pool):
                rows = [(d, g, ds) for d, g, ds in zip(pool, global_arms, domain_arms) if d.id in keep_ids]
                pool = [r[0] for r in rows]
                global_arms = [r[1] for r in rows]
                domain_arms = [r[2] for r in rows]

        if not pool:
            return self._finish(Decision(None, None, ap.strategy, "no deployment is available for this alias", 0, None,
                                         excluded, alias=alias, domain=domain, task_type=task,
                                         refused="no_candidates", status_code=503), feats)

        # Candidates with what is known about them now.
        prior = per_domain.prior_strength if learn_domain is not None else None
        gamma, fresh = self.gamma, self._fresh
        fits = self.fitness.fitness_of([d.model or "" for d in pool], task)
        candidates = []
        total = 0.0
        for d, g, ds, fit in zip(pool, global_arms, domain_arms, fits):
            stats = arm_view(g, ds, tick, gamma, prior, fresh)
            # The deployment-wide figures come from the global record; forgetting scales failures
            # and pulls alike, so the error rate needs no decay.
            gv = g if g is not None else fresh
            total += stats.pulls
            sd = math.sqrt(gv.latency_var) if gv.latency_var > 0.0 else 0.0
            bs_eff = breaker_state.get(d.id)
            candidates.append(Candidate(
                d, stats, bs_eff[1] if bs_eff is not None else CLOSED,
                (gv.avg_latency + 1.645 * sd) * 1000.0, sd * 1000.0,
                gv.failures / gv.pulls if gv.pulls > 0 else 0.0, fit,
            ))
        bp = self.policy.bandit
        ctx = RoutingContext(
            alias=alias, strategy=ap.strategy, features=feats, domain=domain, task_type=task, now=now, rng=self.rng,
            exploration_c=ap.exploration_c if ap.exploration_c is not None else bp.exploration_c,
            cost_weight=ap.cost_weight if ap.cost_weight is not None else bp.cost_weight,
            latency_weight=ap.latency_weight if ap.latency_weight is not None else bp.latency_weight,
            cost_scale_per_1m=bp.cost_scale_per_1m, latency_scale_s=bp.latency_scale_s,
            exploration=ap.exploration, weights=self._weights[alias], tier_hint=ap.tier_hint, sla=ap.sla,
            last_known_good=last_good, lkgp_enabled=ap.lkgp_enabled,
            total_pulls=total, policy=self.policy,
        )
        decision = plugins.get_strategy(ap.strategy).select(candidates, ctx)
        chosen = None
        for c in candidates:
            if c.deployment.id == decision.deployment_id:
                chosen = c
                break
        if chosen is None:  # a plugin returned something outside the pool: never route there
            chosen = candidates[0]
            decision.reason = f"strategy returned {decision.deployment_id!r}, not in the pool; using {chosen.id}"
            decision.deployment_id = chosen.id
        special = chosen.deployment.specialities.get(domain) if domain else None
        decision.model = special or chosen.deployment.model
        decision.alias, decision.domain, decision.task_type = alias, domain, task
        decision.add_scores(excluded)
        if degraded:
            decision.reason += " (every candidate's breaker blocks it: serving anyway)"
        if reserve and chosen.id in breaker_state:
            bs, eff = breaker_state[chosen.id]
            if eff != CLOSED:
                _, new_state = self.breaker.reserve(bs, now)
                self.store.put_breaker(chosen.id, new_state)
        return self._finish(decision, feats)

    def _selected(self, alias: str, ap, deployments: Sequence[Deployment]):
        """The alias's candidates among `deployments` and the exclusions of the others, memoised:
        the deployment list is the proxy's model list, the same objects request after request."""
        deps = tuple(deployments)
        key = (alias, *map(id, deps))
        hit = self._selection_cache.get(key)
        # Tuple equality checks identity first, element by element, in C: the same objects match
        # at once; a reused id (another object) falls through to a full comparison.
        if hit is not None and hit[0] == deps:
            return hit[1], hit[2]
        selected, excluded = [], []
        for d in deployments:
            if selects(ap.candidates, d):
                selected.append(d)
            else:
                excluded.append(CandidateScore(d.id, excluded="not selected by the alias's candidates"))
        if len(self._selection_cache) >= 256:
            self._selection_cache.clear()
        # The deployments are kept with the entry so that their ids cannot be reused while it lives.
        self._selection_cache[key] = (deps, selected, tuple(excluded))
        return selected, excluded

    def _finish(self, decision: Decision, feats) -> Decision:
        observe = self._hook.observe_decision
        if not observe.get_hookimpls():  # nobody observes: skip pluggy's call machinery
            return decision
        try:
            observe(decision=decision, context=feats)
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
