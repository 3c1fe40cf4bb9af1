"""The routing pipeline: the only place that orders the steps.

    request -> features -> domain -> alias candidates -> what the request needs -> specialists
            -> breaker -> context window -> budget -> pacing floor
            -> strategy (plugins) -> Decision
    outcome -> failure class -> breaker -> reward -> bandit (global and per domain) -> LKGP
    quality evidence (feedback, a judge's grade, a signal) -> quality records (quality.py)

No I/O: the clock, the random source and the state store are injected (the memory store is
plain data; the Redis adapter implements the same methods)."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Optional, Sequence

from . import blame, plugins
from .answer_time import LengthCaps, TokenTimes, held_by_client
from .bandit import ArmStats, gamma_for
from .blame import Verdict
from .capabilities import lacking, refusal, request_needs
from .conversation import question_text
from .breaker import CLOSED, OPEN, CircuitBreaker, FailureKind
from .decision import (NO_SIGNALS, AliasSettings, CandidateScore, Decision, Deployment, Pool, RoutingContext,
                       learned_domain)
from .deployments import selects
from .features import RequestFeatures
from .interfaces import StateStore
from .key_share import KeyPulls
from .learning import LearningRules, learns_from, outcome_record
from .outcome import Outcome, reward
from .pacing import BY_TARGET, TeamPace, above_floor, multiplier_of, pace_key, rule_of, team_multiplier
from .quality import OTHER_PROMPTS, SOURCES, QualityPriors, QualityRecord, estimate, finite_unit
from .schema_defaults import defaults_of
from .policy.models import Policy
from .scan import scanner_for
from .signals import reader_for
from .state.memory import MemoryState
from .contextual_io import contextual_models_for
from .task_fitness import TaskFitnessTable
from .weights import normalise, weights_for_alias


@dataclass(frozen=True, slots=True)
class RecordedEvidence:
    """A piece of quality evidence as recorded: its value and the weight it counted with."""

    value: float
    weight: float


class UnknownAlias(KeyError):
    pass


# An outcome recorded against an alias the policy no longer has: the schema's SLA target.
_SLA_TARGET_P95_MS = float(defaults_of("Sla")["target_p95_ms"])


class Engine:
    def __init__(self, policy: Policy, *, clock: Callable[[], float] = time.time,
                 rng: Optional[random.Random] = None, store: Optional[StateStore] = None,
                 token_times: Optional[TokenTimes] = None):
        self.policy = policy
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.store = store if store is not None else MemoryState()
        # The contextual strategy's models: the store's when it keeps them (shared, snapshotted),
        # else this engine's own; started from the aliases' prior model files.
        self.contextual = contextual_models_for(self.store, policy)
        self.breaker = CircuitBreaker(policy.circuit_breaker)
        self.scanner = scanner_for(policy.domains)  # the programs the policy loader checked
        self.detector = self.scanner.detector
        # Reads whether a conversation's new message says the answer was wrong (its domain is
        # then the previous question's): the policy's signal lexicons, compiled once per policy.
        self.signal_reader = reader_for(policy.signals)
        self.fitness = TaskFitnessTable(policy.task_fitness)
        forgets = policy.bandit.forgetting.enabled
        self.gamma = gamma_for(policy.bandit.forgetting.half_life_requests if forgets else None)
        # Quality evidence (its sums, the contextual model's prompt weights) forgets more slowly than
        # health: docs/quality.md#how-long-evidence-counts.
        self.quality_gamma = gamma_for(policy.quality.half_life_requests if forgets else None)
        self._fallback_weights = policy.rules.weights.model_dump()
        self._weights = {name: normalise(weights_for_alias(policy, a), self._fallback_weights)
                         for name, a in policy.aliases.items()}
        self._fresh = ArmStats(avg_latency=policy.bandit.initial_latency_s)
        bp = policy.bandit
        # Per alias with a spend target, how its multiplier moves (pacing.py).
        self.pace_rules = {name: r for name, a in policy.aliases.items() if (r := rule_of(a.budget)) is not None}
        self.rules = LearningRules(self.breaker, self.gamma, bp.latency_ema_weight, bp.thompson_success_threshold,
                                   self._fresh, self.pace_rules, self.quality_gamma)
        self._hook = plugins.hook()
        # Each deployment's prior quality and each evidence source's weight (quality.py); the
        # store shows them beside the evidence in its stats.
        self.quality = QualityPriors(policy.quality, self.quality_gamma)
        self.key_pulls = KeyPulls()  # each key's pull on a deployment's estimate (key_share.py)
        # Each deployment's times per output and per prompt token, which bring a long answer's
        # latency to the length caps (answer_time.py); the proxy's engines share one.
        self.token_times = token_times if token_times is not None else TokenTimes()
        # The store's stats show the first engine's priors: another engine over the same store (a
        # team layer's, a reload's) does not replace them with priors that know no deployment yet;
        # the proxy's runtime attaches its operator's engine's own (Runtime.attach_priors).
        if hasattr(self.store, "quality_prior") and self.store.quality_prior is None:
            self.store.quality_prior = self.quality
        self._pools: dict[tuple, _AliasPool] = {}
        # Per alias, its settings as a decision uses them (resolved once, shared by its contexts).
        self._settings = {name: AliasSettings.of(a, bp, self._weights[name]) for name, a in policy.aliases.items()}

    # -- deciding ------------------------------------------------------------------------------
    def features(self, messages, tools=None, request_modalities=None) -> RequestFeatures:
        return self._scan(messages, tools, request_modalities, self._question(messages))[0]

    def _question(self, messages) -> Optional[str]:
        """What a conversation's request asks (``conversation.question_text``: its new user
        message, with the previous one when it says the answer was wrong), None outside a
        conversation: its domain and the prompt the contextual model reads are this, not the
        whole history (docs/quality.md#the-choice)."""
        return question_text(messages, self.signal_reader) if isinstance(messages, (list, tuple)) else None

    def _scan(self, messages, tools, request_modalities, question: Optional[str]) -> tuple[RequestFeatures, set]:
        """The request's features (with the plugins' contributions; `question` marked in its
        text, ``features.features_and_hits``) and the domains occurring in its text, from one
        pass over it (scan.PromptScanner)."""
        feats, present = self.scanner.scan(messages, tools, request_modalities, question)
        return self._contributed(messages, feats), present

    def _asked_domain(self, question: Optional[str], feats: RequestFeatures,
                      present) -> tuple[Optional[str], Optional[set]]:
        """The request's domain and the domains whose words occur in what it asks (`question`,
        ``_question``; None: its whole text): a general question after a math one is no math
        request (docs/quality.md#the-choice)."""
        if question is None:
            return self.detector.detect(feats.text, present), present
        asked, present = self.scanner.scan([{"role": "user", "content": question}])
        return self.detector.detect(asked.text, present), present

    def _contributed(self, messages, feats: RequestFeatures) -> RequestFeatures:
        hook = self._hook.extract_features
        if not hook.get_hookimpls():
            return feats
        extra = {}
        for contributed in plugins.call_each(hook, messages=messages, features=feats):
            if isinstance(contributed, dict):
                extra.update(contributed)
        return feats.replace(extra=extra) if extra else feats

    def decide(self, alias: str, messages, deployments: Sequence[Deployment], *, tools=None,
               exclude: Iterable[str] = (), request_modalities=None,
               features: Optional[RequestFeatures] = None, reserve: bool = True,
               session: Optional[str] = None, signals: Optional[Mapping[str, Mapping[str, float]]] = None,
               team: Optional[TeamPace] = None, request: Optional[Mapping] = None,
               max_cost_usd: Optional[float] = None) -> Decision:
        """`team`: whose spend the call paces (its own record and budgets: pacing.team_multiplier).
        `request`: the rest of the request body (``response_format``, reasoning parameters),
        read with `tools` and the messages for what the request needs (capabilities.py).
        `session` keys the last known good deployment per conversation (the alias's own pin
        when None). `signals`, by deployment id, are what the caller knows of each deployment
        now, in [0, 1]: ``quota`` (its remaining quota share) and the rules strategy's supplied
        factors (``context_affinity``, ``cache_affinity``, ``session_availability``,
        ``reset_window_affinity``); a deployment or a key left out keeps its default.
        `max_cost_usd`: the request's own cap on its estimated cost (docs/teams.md), strict, and
        only ever lower than the alias's budget.

        The stages, in order (the module's docstring draws them): the request understood, the
        alias's candidates (what the request needs, the specialists), the store read with the
        breakers, the context window, the budget, the pacing floor, the strategy."""
        ap = self.policy.aliases.get(alias)
        if ap is None:
            raise UnknownAlias(alias)
        now = self.clock()
        question = self._question(messages)
        if features is None:
            feats, present = self._scan(messages, tools, request_modalities, question)
        else:
            feats, present = features, None
        domain = ap.domain_hint
        if domain is None:
            domain, present = self._asked_domain(question, feats, present)
        asked = _Asked(alias, ap, domain, ap.task_hint or feats.task_type, feats, present)
        left_out = _left_out(exclude)
        needs = request_needs(feats, messages, tools, request)
        if needs:  # a candidate known not to take what the request needs is left out (docs/capabilities.md)
            group = self._alias_pool(alias, ap, deployments)
            unfit = lacking(group.selected, needs)
            if unfit and len(unfit) == len(group.selected):  # none can: the caller's 400
                rows = group.excluded + [CandidateScore(i, excluded=why) for i, why in unfit.items()]
                return self._finish(asked.refused(refusal(needs, group.selected), UNSUPPORTED, 400, rows), feats)
            left_out = {**unfit, **left_out}
        slate = self._slate(asked, deployments, left_out, pin_key(alias, session), now)
        self._fit_window(slate, feats.input_tokens)
        refused = self._within_budget(slate, asked, max_cost_usd) or self._above_floor(slate, asked, team)
        if refused is not None:
            return self._finish(refused, feats)
        decision = self._strategy_decides(slate, asked, now, signals, team)
        held = slate.held.get(decision.deployment_id) if slate.held else None
        if held is not None and held[1] != CLOSED:
            decision.probe = True
            if reserve and not self.store.reserve_probe(decision.deployment_id, now, self.breaker) \
                    and not slate.degraded:
                # Another request (or replica) took the last probe slot since the read: the same
                # decision without this deployment.
                return self.decide(alias, messages, deployments, tools=tools,
                                   exclude={**left_out, decision.deployment_id: PROBE_TAKEN},
                                   request_modalities=request_modalities, features=feats, reserve=reserve,
                                   session=session, signals=signals, team=team, request=request,
                                   max_cost_usd=max_cost_usd)
        return self._finish(decision, feats)

    def _slate(self, asked: "_Asked", deployments, left_out: dict, pin: str, now: float) -> "_Slate":
        """The alias's candidates for the request's domain, read from the store in one round trip,
        without the deployments whose breaker blocks them.

        Specialists: when some candidates specialise in the domain, only they compete
        (docs/design.md#specialists), unless none of them holds the prompt or every one is
        blocked: then the generalists compete (a second read of the store, for them alone). A
        retry's failed deployments leave before the specialists are chosen (its last specialist
        failed: everyone competes)."""
        alias, ap, domain, need = asked.alias, asked.ap, asked.domain, asked.feats.input_tokens
        group = self._alias_pool(alias, ap, deployments)
        group = group.without(left_out, domain) if left_out else group.for_domain(domain)
        if need and group.specialised and not any(_holds(d, need) for d in group.deployments):
            wider = self._alias_pool(alias, ap, deployments).generalists(
                left_out, domain, {d.id: _window_clause(d, need) for d in group.deployments},
                because=f"no {domain} specialist holds the prompt")
            if any(_holds(d, need) for d in wider.deployments):
                group = wider
        per_domain = self.policy.bandit.per_domain
        learn_domain = domain if (domain and per_domain.enabled) else None
        slate = self._read(group, asked.task, learn_domain, pin, now)
        if slate.blocked and len(slate.blocked) == len(slate.ids) and group.specialised:
            fallback = self._alias_pool(alias, ap, deployments).generalists(
                left_out, domain, {slate.ids[k]: why for k, why in slate.blocked})
            if fallback.ids:
                slate = self._read(fallback, asked.task, learn_domain, pin, now)
        if slate.blocked:
            if len(slate.blocked) < len(slate.ids):
                why = dict(slate.blocked)
                slate.keep([k for k in range(len(slate.ids)) if k not in why], why.__getitem__)
            else:
                slate.degraded = True  # every candidate is blocked: still serve, from the whole pool
        slate.prior = per_domain.prior_strength if learn_domain is not None else None
        return slate

    def _read(self, group: "_DomainPool", task: str, learn_domain: Optional[str], pin: str, now: float) -> "_Slate":
        """The group's columns and what the store holds of them (one read), with their breakers."""
        read = self.store.read_pool(group.ids, learn_domain, pin)
        states, held, blocked = self._breakers(group.ids, read.breakers, now)
        return _Slate(group, group.fits(self.fitness, task), states, read.global_arms, read.domain_arms, read.tick,
                      read.last_known_good, held, blocked)

    @staticmethod
    def _fit_window(slate: "_Slate", need: int) -> None:
        """Context window: a deployment that cannot hold the prompt (estimated) is not a candidate;
        when none can, the largest window competes alone (LiteLLM then answers with its own
        context-window error, or its context_window_fallbacks take over)."""
        deps = slate.deps
        if not (deps and need and need > slate.group.smallest_window):  # (else every window holds it)
            return
        fit = [k for k, d in enumerate(deps) if _holds(d, need)]
        if len(fit) != len(deps):
            if not fit:
                fit = [max(range(len(deps)), key=lambda k: deps[k].max_input_tokens or 0)]
            slate.keep(fit, lambda k: _window_clause(deps[k], need))

    @staticmethod
    def _within_budget(slate: "_Slate", asked: "_Asked", max_cost_usd: Optional[float]) -> Optional[Decision]:
        """Budget cap (docs/design.md#budget-cap): the request's estimated cost per candidate;
        over the cap, left out; none within: a strict budget (or the request's own maximum cost,
        never served above) refuses, else the cheapest competes alone."""
        budget = asked.ap.budget
        cap, strict, whose = budget.max_cost_per_request_usd, budget.mode == "strict", "strict budget"
        if max_cost_usd is not None and (cap is None or max_cost_usd < cap):
            cap, strict, whose = max_cost_usd, True, "the request's maximum cost"
        if cap is None or not slate.deps:
            return None
        est = [d.cost_usd(asked.feats.input_tokens, budget.expected_output_tokens) for d in slate.deps]
        within = [k for k, e in enumerate(est) if e <= cap]
        over = lambda k: f"estimated ${est[k]:.6f} over budget"  # noqa: E731
        if not within:
            if strict:
                rows = slate.excluded + [CandidateScore(i, excluded=over(k)) for k, i in enumerate(slate.ids)]
                return asked.refused(f"no candidate fits the budget of ${cap:g} per request "
                                     f"(cheapest estimate ${min(est):.6f}); {whose} refuses", "budget", 402, rows)
            within = [est.index(min(est))]
        if len(within) != len(slate.deps):
            slate.keep(within, over)
        return None

    def _above_floor(self, slate: "_Slate", asked: "_Asked", team: Optional[TeamPace]) -> Optional[Decision]:
        """The pacing floor (the cheapest tier a paced decision may lean to), then: no candidate
        left is the alias's 503."""
        budget = asked.ap.budget
        paced = asked.alias in self.pace_rules or (team is not None and bool(team.budgets))
        if paced and budget.floor_tier is not None and slate.deps:
            keep = above_floor([d.tier for d in slate.deps], budget.floor_tier)
            if len(keep) != len(slate.deps):
                slate.keep(keep, lambda k: f"below the budget's floor tier {budget.floor_tier}")
        if not slate.deps:
            return asked.refused("no deployment is available for this alias", "no_candidates", 503, slate.excluded)
        return None

    def _strategy_decides(self, slate: "_Slate", asked: "_Asked", now: float, signals, team) -> Decision:
        """The pool as columns, the context, the strategy's choice (a plugin's answer outside
        the pool never routes), named with the model and the rows of the left out."""
        alias, ap, ids = asked.alias, asked.ap, slate.ids
        quota = supplied = None
        if signals:
            supplied = [signals.get(i) or NO_SIGNALS for i in ids]
            quota = [sig.get("quota", 1.0) for sig in supplied]
        # The arms' views (forgetting, per-domain blend) are computed by the strategy's first read.
        pool = Pool(slate.deps, slate.states if slate.states is not None else [CLOSED] * len(ids), slate.fits,
                    slate.global_arms, slate.domain_arms, slate.tick, self.gamma, slate.prior, self._fresh,
                    quota=quota, signals=supplied, ids=ids,
                    costs=slate.group.costs if slate.deps is slate.group.deployments else None)
        # By position, in RoutingContext's field order (alias, strategy, features, domain, task_type, now,
        # rng, settings, last_known_good, total_pulls, policy, contextual): eleven keywords cost
        # about 5k instructions more per request (test_engine_context_by_position holds the order).
        ctx = RoutingContext(alias, ap.strategy, asked.feats, asked.domain, asked.task, now, self.rng,
                             self._settings[alias], slate.last_good, None, self.policy, self.contextual)
        ctx.quality = self
        ctx.quality_domain = asked.domain if asked.domain is not None \
            else (self.quality_domain(asked.present) if asked.present else None) or OTHER_PROMPTS
        pace_rule = self.pace_rules.get(alias)
        if team is not None and (team.team or team.budgets):
            ctx.cost_multiplier, ctx.paced = team_multiplier(self.store.pace(pace_key(alias, team.team)), pace_rule,
                                                             team.budgets, ap.budget.min_multiplier,
                                                             ap.budget.max_multiplier)
        elif pace_rule is not None:
            ctx.paced = BY_TARGET
            ctx.cost_multiplier = multiplier_of(self.store.pace(alias), pace_rule)
        decision = plugins.get_strategy(ap.strategy).select(pool, ctx)
        try:
            k = ids.index(decision.deployment_id)
        except ValueError:  # a plugin returned something outside the pool: never route there
            k = 0
            decision.reason = f"strategy returned {decision.deployment_id!r}, not in the pool; using {ids[0]}"
            decision.deployment_id = ids[0]
        chosen = slate.deps[k]
        special = chosen.specialities.get(asked.domain) if asked.domain else None
        decision.model = special or chosen.model
        decision.alias, decision.domain, decision.task_type = alias, asked.domain, asked.task
        decision.add_scores(slate.excluded)
        if slate.degraded:
            decision.reason += " (every candidate's breaker blocks it: serving anyway)"
        return decision

    def _breakers(self, ids, breakers, now: float):
        """The pool's breakers as a decision sees them: ``(states, held, blocked)`` -- the
        effective states in pool order (None: all plainly CLOSED), the stored and effective state
        by id of every deployment whose breaker is not plainly CLOSED, and ``(position, why)`` of
        each one that may not take this request. A deployment with no stored breaker, or a CLOSED
        one not rate limited, costs one test."""
        states, held, blocked = None, {}, []
        breaker = self.breaker
        for k, bs in enumerate(breakers):
            if bs is None or (bs.state == CLOSED and now >= bs.rate_limited_until):
                continue
            eff = breaker.effective_state(bs, now)
            held[ids[k]] = (bs, eff)
            if states is None:
                states = [CLOSED] * len(ids)
            states[k] = eff
            if not breaker.available(bs, now):
                why = ("rate limited (429) until t=%.1f" % bs.rate_limited_until if breaker.is_rate_limited(bs, now)
                       else "circuit OPEN" if eff == OPEN else "half-open probes all in flight")
                blocked.append((k, why))
        return states, held, blocked

    def _alias_pool(self, alias: str, ap, deployments: Sequence[Deployment]) -> "_AliasPool":
        """The alias's candidates among `deployments`, memoised: the deployment list is the
        proxy's model list, the same objects request after request."""
        deps = tuple(deployments)
        key = (alias, len(deps), id(deps[0]) if deps else 0, id(deps[-1]) if deps else 0)
        hit = self._pools.get(key)
        # Tuple equality checks identity first, element by element, in C: the same objects match
        # at once; another list with the same ends falls through to a full comparison.
        if hit is not None and hit.source == deps:
            return hit
        if len(self._pools) >= 256:
            self._pools.clear()
        # The deployments are kept with the entry so that their ids cannot be reused while it lives.
        entry = self._pools[key] = _AliasPool(deps, ap.candidates)
        self.quality.know(deps)  # their tiers and specialities: the priors of their outcomes
        return entry

    def _finish(self, decision: Decision, feats) -> Decision:
        observe = self._hook.observe_decision
        if observe.get_hookimpls():  # nobody observes: nothing to call
            plugins.call_each(observe, decision=decision, features=feats)
        return decision

    # -- learning --------------------------------------------------------------------------------
    def judge(self, ap, outcome: Outcome, domain: Optional[str] = None,
              verdict: Optional[Verdict] = None) -> tuple[Optional[FailureKind], Optional[float]]:
        """An outcome's failure kind (None: a success) and its reward for the alias settings `ap`
        (None: no alias); the reward is None when the failure does not count against the
        deployment. `verdict` is the failure's ``blame.Verdict`` where the caller judged it with
        its request around it (the proxy, the replay); else it is judged alone here. A success
        without a grade is scored with the deployment's quality estimate in `domain`
        (``quality_estimate``), never with 1."""
        kind = None
        if not outcome.success:
            if verdict is None:
                verdict = blame.judge(self.policy.circuit_breaker, blame.AttemptFailure(
                    outcome.deployment_id, status_code=outcome.status_code, error_type=outcome.error_type,
                    message=outcome.message, elapsed_s=outcome.latency_s))
            kind = verdict.kind
        if not learns_from(kind):
            return kind, None
        target = ap.sla.target_p95_ms if ap is not None else _SLA_TARGET_P95_MS
        plain = self.quality_estimate(outcome.deployment_id, domain) if outcome.quality is None else 0.0
        return kind, reward(outcome, self.policy.reward, target, plain)

    def at_length_cap(self, outcome: Outcome) -> Outcome:
        """A success as it teaches latency: an answer longer than ``bandit.latency_length_cap_tokens``,
        or to a prompt longer than ``bandit.latency_prompt_cap_tokens``, counts the time those
        lengths take on its deployment (answer_time.py), so that a client's choice of lengths moves
        a deployment's latency for the others at most that far. A stream its client held back for
        half its time or more teaches none, and is not fitted (``answer_time.held_by_client``)."""
        if held_by_client(outcome.latency_s, outcome.client_held_s):
            return replace(outcome, latency_s=None)
        bandit = self.policy.bandit
        seconds = self.token_times.at_length_cap(
            outcome.deployment_id, outcome.latency_s, outcome.input_tokens, outcome.output_tokens,
            LengthCaps(bandit.latency_length_cap_tokens, bandit.latency_prompt_cap_tokens))
        return outcome if seconds == outcome.latency_s else replace(outcome, latency_s=seconds)

    def quality_estimate(self, deployment_id: str, domain: Optional[str] = None) -> float:
        """The deployment's quality estimate (quality.py): its prior in `domain` moved by the
        evidence recorded there (the per-domain record when per-domain learning is on, else the
        deployment's global one)."""
        dom = domain if (domain and self.policy.bandit.per_domain.enabled) else None
        q = self.store.quality_of(deployment_id, dom)
        prior = self.quality.prior(deployment_id, dom)
        return estimate(q, prior, self.quality.strength, self.store.tick(), self.quality_gamma)

    def quality_domain(self, present) -> Optional[str]:
        """The domain a request the detector left without one is learned under: the one domain
        whose words occur in it (`present`: the scan's domain indices), below the detector's
        min_matches; None when none or several do (docs/quality.md#the-choice). A weaker hint
        than the detected domain: it never picks a specialist, it only keeps the quality
        evidence of such prompts apart."""
        if len(present) != 1:
            return None
        (k,) = present
        return self.detector.names[k]

    def quality_columns(self, ids, domain: Optional[str], priors=None) -> tuple[list[float], list[float]]:
        """(quality estimate, its variance) per deployment of `ids` for a request of `domain`
        (``QualityPriors.columns`` from `priors`, None: the declared ones; per domain when
        per-domain learning is on): the contextual strategy's base, which only quality evidence
        moves (docs/quality.md#the-choice)."""
        dom = domain if (domain and self.policy.bandit.per_domain.enabled) else None
        return self.quality.columns(self.store, ids, dom, self.store.tick(), priors)

    def record_quality(self, deployment_id: str, alias: Optional[str], domain: Optional[str], value: float,
                       source: str, weight: Optional[float] = None, *, context=None,
                       key: Optional[str] = None) -> Optional[RecordedEvidence]:
        """Record one piece of quality evidence about a deployment's answer: `value` in [0, 1]
        from `source` (``feedback``, ``judge`` or ``signal``), weighing `weight` observations
        (None: the policy's ``quality.evidence`` weight of the source). It moves the
        deployment's quality estimate (in `domain` too, when per-domain learning is on) and so
        the score of its next successes; never its health, its breaker or the tick. Returns the
        value recorded and the weight it counted with (the key's pull rule applied: what the
        decision log writes), or None when it was no number in [0, 1] (nothing recorded). `alias`
        names the alias that served the answer (unused yet: kept for the signals' attribution).
        `context`, the answer's decision's ``Decision.context`` when the caller kept it (the
        contextual strategy's request vector), teaches the deployment's contextual model the
        value for that prompt as well: what a plain success, scored alike for every prompt,
        cannot teach it. `key`, the hash of the API key the evidence came from, weighs it against
        the other keys' recent evidence about the deployment (key_share.py: one key moves a
        deployment's quality by at most 0.10)."""
        if source not in SOURCES:
            raise ValueError(f"quality evidence source must be one of {', '.join(SOURCES)}, not {source!r}")
        v = finite_unit(value)
        w = self.quality.weight(source) if weight is None else _evidence_weight(weight)
        if v is None or w is None or not deployment_id:
            return None
        if context is not None and getattr(context, "domain", None) is not None:
            domain = context.domain  # the domain the answer's decision learned it under
        dom = domain if (domain and self.policy.bandit.per_domain.enabled) else None
        admitted = self.key_pulls.admit(deployment_id, key, w, v, self.quality.strength,
                                        self.quality.prior(deployment_id, None), dom,
                                        self.quality.prior(deployment_id, dom) if dom is not None else None,
                                        self.clock(), self.store.tick(), self.quality_gamma)
        self.store.record_quality(QualityRecord(deployment_id, v, admitted, source, dom), self.rules)
        if context is not None and admitted > 0.0:
            # As much of an observation as the key's pull let count: a piece the rule cut to a
            # sliver teaches the prompt's part a sliver (found by a review); and the key's part
            # of the prompt weights is bounded too (key_share.py).
            self.contextual.learn(deployment_id, context, v, self.store.tick(), self.quality_gamma,
                                  weight=admitted / w, bound=self.key_pulls.prompt_bound(deployment_id, key))
        return RecordedEvidence(v, admitted)

    def record(self, decision_or_alias, outcome: Outcome, *, domain: Optional[str] = None,
               session: Optional[str] = None, verdict: Optional[Verdict] = None,
               team: Optional[str] = None, evidence_domain: Optional[str] = None) -> float | None:
        """Learn from one outcome (its cost paced on `team`'s record of the alias, pacing.pace_key):
        its verdict (``blame``), its reward, and one record handed to
        the store to apply atomically (``learning.apply_outcome``). Returns the reward, or None
        when the failure does not count against the deployment (the caller's, a rate limit).
        Given a decision, its alias, domain and ``learned_domain`` say where; given an alias,
        `domain` and `evidence_domain` do (where an outcome's grade is recorded: default `domain`)."""
        if isinstance(decision_or_alias, Decision):
            alias, domain = decision_or_alias.alias, decision_or_alias.domain
            evidence_domain = learned_domain(decision_or_alias)
        else:
            alias, evidence_domain = decision_or_alias, evidence_domain or domain
        ap = self.policy.aliases.get(alias)
        # What it teaches: a long answer's latency at the length cap (the observers see it as measured).
        taught = self.at_length_cap(outcome) if outcome.success else outcome
        kind, value = self.judge(ap, taught, domain, verdict)
        per_domain = domain if (domain and self.policy.bandit.per_domain.enabled) else None
        tick = self.store.record_outcome(outcome_record(
            outcome.deployment_id, self.clock(), kind, value if value is not None else 0.0, taught.latency_s,
            pin_key(alias, session) if alias else None, per_domain, outcome.retry_after_s, None,
            pace_key(alias, team) if alias in self.pace_rules else None, outcome.cost_usd), self.rules)
        if outcome.quality is not None and value is not None and kind is None:
            # A graded success (a replay's, an evaluator's): its grade is a judge's evidence.
            self.record_quality(outcome.deployment_id, alias, evidence_domain, outcome.quality, "judge")
        learn = getattr(decision_or_alias, "context", None)
        # The contextual strategy's: teach the chosen model what says something of this prompt's
        # answer (a failure, a grade, feedback); a plain success, scored with the quality estimate
        # its base already is, teaches it nothing (its signals do, through record_quality).
        if learn is not None and value is not None and (
                kind is not None or outcome.quality is not None or outcome.feedback is not None):
            self.contextual.learn(outcome.deployment_id, learn, value, tick, self.quality_gamma)
        observe = self._hook.observe_outcome
        if observe.get_hookimpls():
            decision = decision_or_alias
            if not isinstance(decision, Decision):  # recorded against an alias: a Decision standing for it
                decision = Decision(outcome.deployment_id, None, ap.strategy if ap is not None else "",
                                    "outcome recorded against the alias alone", 0, None, alias=alias or "",
                                    domain=domain)
            plugins.call_each(observe, outcome=outcome, decision=decision)
        return value


def _evidence_weight(weight) -> Optional[float]:
    """A caller's weight of one piece of evidence: a finite number in [0, 1000] (the schema's
    bounds of ``quality.evidence``), else None."""
    w = finite_unit(weight / 1000.0) if isinstance(weight, (int, float)) and not isinstance(weight, bool) else None
    return None if w is None else float(weight)


ALREADY_FAILED = "already failed for this request"
UNSUPPORTED = "unsupported_request"  # a refusal: no candidate can take what the request needs
PROBE_TAKEN = "its half-open probe slot was taken by another request"


class _Asked:
    """What a decision was asked: the alias (its name and settings), the request's domain, task
    type and features, and the domains its words hint at."""

    __slots__ = ("alias", "ap", "domain", "task", "feats", "present")

    def __init__(self, alias: str, ap, domain: Optional[str], task: str, feats: RequestFeatures, present):
        self.alias, self.ap, self.domain, self.task, self.feats = alias, ap, domain, task, feats
        self.present = present  # the domains whose words occur in the text (None: features given)

    def refused(self, reason: str, why: str, status_code: int, excluded: list) -> Decision:
        """The decision that serves nothing: `why` is its kind (``Decision.refused``)."""
        return Decision(None, None, self.ap.strategy, reason, 0, None, excluded, alias=self.alias,
                        domain=self.domain, task_type=self.task, refused=why, status_code=status_code)


class _Slate:
    """A decision's candidates as parallel columns (the deployments, their ids, task fitness,
    breaker states and arms) with what the store held of them, narrowed stage by stage: each
    stage keeps some positions and leaves the others out, each with why (``excluded``)."""

    __slots__ = ("group", "deps", "ids", "fits", "states", "global_arms", "domain_arms", "excluded", "tick",
                 "last_good", "held", "blocked", "degraded", "prior")

    def __init__(self, group: "_DomainPool", fits, states, global_arms, domain_arms, tick, last_good, held, blocked):
        self.group = group
        self.deps, self.ids, self.excluded = group.deployments, group.ids, group.excluded
        self.fits, self.states, self.global_arms, self.domain_arms = fits, states, global_arms, domain_arms
        self.tick, self.last_good, self.held, self.blocked = tick, last_good, held, blocked
        self.degraded = False
        self.prior = None

    def keep(self, positions: list[int], why: Callable[[int], str]) -> None:
        """Keep the candidates at `positions` (in pool order); each other one leaves, saying why(k)."""
        inside = set(positions)
        self.excluded = self.excluded + [CandidateScore(self.ids[k], excluded=why(k))
                                         for k in range(len(self.ids)) if k not in inside]
        self.deps, self.ids, self.fits, self.states, self.global_arms, self.domain_arms = _take(
            positions, self.deps, self.ids, self.fits, self.states, self.global_arms, self.domain_arms)


def _left_out(exclude) -> dict:
    """The deployments a decision leaves out, id -> why: `exclude` as a mapping that says why,
    or as ids (a retry's deployments that already failed)."""
    if isinstance(exclude, Mapping):
        return {str(k): str(v) for k, v in exclude.items()}
    return {i: ALREADY_FAILED for i in exclude}


def pin_key(alias: str, session: Optional[str]) -> str:
    """Where the last known good deployment is kept: per alias, or per alias and session."""
    return alias if session is None else f"{alias}|{session}"


def _holds(d: Deployment, tokens: int) -> bool:
    """Whether the deployment's context window holds a prompt of about `tokens` (unknown: yes)."""
    return d.max_input_tokens is None or d.max_input_tokens >= tokens


def _window_clause(d: Deployment, tokens: int) -> str:
    return f"context window of {d.max_input_tokens} tokens, prompt about {tokens}"


def _take(keep: list[int], *columns):
    """The columns (lists in pool order, or None) restricted to the positions in `keep`."""
    return tuple(None if col is None else [col[k] for k in keep] for col in columns)


class _AliasPool:
    """An alias's candidates among one deployment list, and what follows from them alone: the
    exclusion rows of the others, the specialists of each domain, the task fitness of each
    model. Built once per deployment list (the engine memoises it)."""

    __slots__ = ("source", "selected", "excluded", "_by_domain")

    def __init__(self, deployments: tuple, candidates):
        self.source = deployments
        self.selected = [d for d in deployments if selects(candidates, d)]
        chosen = {id(d) for d in self.selected}
        self.excluded = [CandidateScore(d.id, excluded="not selected by the alias's candidates")
                         for d in deployments if id(d) not in chosen]
        self._by_domain: dict = {}

    def for_domain(self, domain: Optional[str]) -> "_DomainPool":
        hit = self._by_domain.get(domain)
        if hit is None:
            if len(self._by_domain) >= 64:
                self._by_domain.clear()
            hit = self._by_domain[domain] = _DomainPool(self.selected, self.excluded, domain)
        return hit

    def without(self, failed: dict, domain: Optional[str]) -> "_DomainPool":
        """The competitors for `domain` once the `failed` deployments (id -> why) are left out
        (not memoised: a retry's own)."""
        kept = [d for d in self.selected if d.id not in failed]
        rows = [CandidateScore(d.id, excluded=failed[d.id]) for d in self.selected if d.id in failed]
        return _DomainPool(kept, self.excluded + rows, domain)

    def generalists(self, failed: dict, domain: str, blocked: dict, because: str = "") -> "_DomainPool":
        """The competitors once every specialist of `domain` is blocked (`blocked`: id -> why;
        `because`: what the rows say of it), the `failed` deployments left out too (not
        memoised: rare)."""
        because = because or f"every {domain} specialist is blocked"
        rows = [CandidateScore(d.id, excluded=failed[d.id]) for d in self.selected if d.id in failed]
        rows += [CandidateScore(i, excluded=f"{why} ({because}: the generalists compete)")
                 for i, why in blocked.items()]
        kept = [d for d in self.selected if d.id not in failed and d.id not in blocked]
        return _DomainPool(kept, self.excluded + rows, domain)


class _DomainPool:
    """The competitors of an alias for one domain: only the specialists of the domain when some
    candidates declare it (docs/design.md#specialists), else every candidate."""

    __slots__ = ("deployments", "ids", "excluded", "specialised", "smallest_window", "_fits", "_costs")

    def __init__(self, pool: list, excluded: list, domain: Optional[str]):
        excluded = list(excluded)
        self.specialised = False  # whether only the domain's specialists compete
        if domain and pool:
            specialists = [d for d in pool if domain in d.specialities]
            if specialists and len(specialists) < len(pool):
                excluded += [CandidateScore(d.id, excluded=f"not a {domain} specialist")
                             for d in pool if domain not in d.specialities]
                pool = specialists
                self.specialised = True
        # Tuples: these are handed to every decision's Pool, and a strategy must not be able to
        # change what the next decision starts from.
        self.deployments = tuple(pool)
        self.ids = tuple(d.id for d in pool)
        # The smallest context window among them (inf: none known): a prompt within it fits
        # every one of them (``_holds``), with no test per deployment.
        self.smallest_window = min((d.max_input_tokens for d in pool if d.max_input_tokens is not None),
                                   default=math.inf)
        self.excluded = excluded
        self._fits: dict = {}
        self._costs: Optional[tuple] = None

    @property
    def costs(self) -> tuple:
        """The pool's column of costs per 1M tokens (``Pool.costs``), kept with the pool."""
        costs = self._costs
        if costs is None:
            costs = self._costs = tuple(d.cost_per_1m for d in self.deployments)
        return costs

    def fits(self, table: TaskFitnessTable, task: str) -> tuple:
        hit = self._fits.get(task)
        if hit is None:
            hit = self._fits[task] = tuple(table.fitness_of([d.model or "" for d in self.deployments], task))
        return hit
