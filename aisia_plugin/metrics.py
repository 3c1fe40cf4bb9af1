"""Prometheus metrics of the router: a thin adapter from decisions, outcomes and store events to
prometheus_client.

Names: the AISIA seed's two (``ai_circuit_breaker_state{provider}``, 0 CLOSED, 1 HALF_OPEN,
2 OPEN, and ``ai_bandit_choice_total{provider,strategy}``), then ours under ``aisia_``. Label
values come only from configured names (deployment ids, aliases, domains, strategies, and the
small fixed vocabularies below); anything else is counted under ``other``, so that no prompt
text, user id or key can reach a label and cardinality stays bounded.

Metrics go to prometheus_client's default registry unless one is given: LiteLLM's own
``/metrics`` (when its Prometheus integration is on) then shows them; in prometheus_client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, as LiteLLM sets up with several workers) gauges
aggregate by the modes given here."""

from __future__ import annotations

import re
from typing import Iterable, Optional

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from .breaker import PROMETHEUS_CODE
from .local_first import RESULTS as LOCAL_FIRST_RESULTS
from .pacing import PaceState, multiplier_of
from .signals import WEIGHTED_KINDS as SIGNAL_KINDS

OTHER = "other"
NO_DOMAIN = "none"  # also the deployment label of a refused decision
OUTCOME_RESULTS = ("success", "provider_failure", "client_error", "rate_limited")
DECISION_RESULTS = ("routed", "refused")
REFUSAL_REASONS = ("budget", "no_candidates", "unknown_alias")
# What an alias of the policy can be refused for (an unknown alias is counted as alias ``other``).
ALIAS_REFUSAL_REASONS = ("budget", "no_candidates")
STORE_EVENTS = ("fallback", "reconnect", "batch_flushed", "outcomes_merged", "queue_full", "reseeded", "log_error")
RELOAD_RESULTS = ("ok", "invalid", "unreadable")
# What became of an answer sampled for the judge (aisia_plugin/litellm/judge.py): graded, its
# reply out of format, the call failed or timed out (nothing learned), or no call: the queue
# was full, the day's cap reached, no rubric for it.
JUDGE_OUTCOMES = ("graded", "unparsed", "error", "timeout", "queue_full", "over_cap", "no_rubric")
# A conversation signal's language label: the policy's lexicon languages (operator data, not a
# client's), the first MAX_SIGNAL_LANGUAGES met kept, the others counted as ``other``; a structural
# signal (regenerate, rephrase, an answer's own defect) has none.
MAX_SIGNAL_LANGUAGES = 32
NO_LANGUAGE = "none"
_LANGUAGE = re.compile(r"[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8})?")
# At most this many label sets of the per-request metrics are kept resolved (each cache cleared
# when full): a policy's aliases, domains, strategies and deployments make far fewer.
_MAX_CHILDREN = 4096
# Decision cost from 5 us to 10 ms (the decision itself costs tens of microseconds).
DECISION_BUCKETS = (5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2)

# Every metric this module exports (the Grafana dashboard's test checks its queries against it).
EXPORTED = (
    "ai_circuit_breaker_state", "ai_bandit_choice_total", "aisia_decisions_total", "aisia_outcomes_total",
    "aisia_failovers_total", "aisia_refusals_total", "aisia_decision_seconds", "aisia_learned_mean_reward",
    "aisia_learned_latency_seconds", "aisia_learned_pulls", "aisia_state_store_events_total",
    "aisia_state_queue_depth", "aisia_policy_reloads_total", "aisia_spend_target_usd_per_1k_requests",
    "aisia_spend_usd_per_1k_requests", "aisia_spend_multiplier", "aisia_judge_calls_total",
    "aisia_judge_spend_usd_total", "aisia_judge_agreement_total", "aisia_conversation_signals_total",
    "aisia_team_decisions_total", "aisia_team_outcomes_total", "aisia_local_first_total",
)

# A LiteLLM team's figures (docs/teams.md): a team's key reads its own team's rows of these only.
TEAM_FAMILIES = ("aisia_team_decisions_total", "aisia_team_outcomes_total")
MAX_TEAMS = 256  # distinct team labels kept; later teams read as ``other``

# What the router learned and chose per deployment (rewards, latencies, pulls, breaker states,
# choices, outcomes, decisions by deployment): the proxy admin's only (GET /aisia/metrics shows
# the other keys, and anyone when LiteLLM's metrics need no key, the rest).
PER_DEPLOYMENT = (
    "ai_circuit_breaker_state", "ai_bandit_choice_total", "aisia_decisions_total", "aisia_outcomes_total",
    "aisia_learned_mean_reward", "aisia_learned_latency_seconds", "aisia_learned_pulls",
)


class WithoutFamilies:
    """A registry's view without some metric families (named as exported: a counter's family is
    its name without ``_total``), for ``prometheus_client.generate_latest``."""

    def __init__(self, registry, names: Iterable[str]):
        self.registry = registry
        self.dropped = frozenset(n[: -len("_total")] if n.endswith("_total") else n for n in names)

    def collect(self):
        for family in self.registry.collect():
            if family.name not in self.dropped:
                yield family


class OnlyTeam:
    """A registry's view for a team's key: the samples of TEAM_FAMILIES labelled with its team,
    nothing else, for ``prometheus_client.generate_latest``."""

    def __init__(self, registry, team: str):
        self.registry = registry
        self.team = team
        self.kept = frozenset(n[: -len("_total")] for n in TEAM_FAMILIES)

    def collect(self):
        from prometheus_client.core import Metric

        for family in self.registry.collect():
            if family.name in self.kept:
                mine = Metric(family.name, family.documentation, family.type, family.unit)
                mine.samples = [s for s in family.samples if s.labels.get("team") == self.team]
                yield mine


def team_figures(registry, team: Optional[str] = None) -> dict:
    """The TEAM_FAMILIES counters as the routing page shows them: {team: {alias: {deployment:
    {"decisions": n, "outcomes": {result: n}}}}}, of every team, or of `team` only."""
    out: dict = {}
    source = OnlyTeam(registry, team) if team is not None else registry
    for family in source.collect():
        kind = {"aisia_team_decisions": "decisions", "aisia_team_outcomes": "outcomes"}.get(family.name)
        for s in family.samples if kind else ():
            if not s.name.endswith("_total"):
                continue  # (a counter's ``_created`` samples)
            row = out.setdefault(s.labels["team"], {}).setdefault(s.labels["alias"], {}).setdefault(
                s.labels["deployment"], {"decisions": 0, "outcomes": {}})
            if kind == "decisions":
                row["decisions"] += int(s.value)
            else:
                row["outcomes"][s.labels["result"]] = row["outcomes"].get(s.labels["result"], 0) + int(s.value)
    return out


class _Names:
    """A bounded vocabulary: a value outside it reads as ``other``."""

    __slots__ = ("known",)

    def __init__(self, names: Iterable[str] = ()):
        self.known = frozenset(str(n) for n in names)

    def __call__(self, value) -> str:
        return value if value in self.known else OTHER


class RouterMetrics:
    """One set of router metrics. ``configure`` sets the vocabularies (the policy's aliases,
    domains and strategies, the deployments' ids); call it again after a reload."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        r = registry if registry is not None else REGISTRY
        self.registry = r
        self.breaker_state = Gauge("ai_circuit_breaker_state", "Circuit breaker state per deployment "
                                   "(0 CLOSED, 1 HALF_OPEN, 2 OPEN).", ["provider"], registry=r,
                                   multiprocess_mode="mostrecent")
        self.choices = Counter("ai_bandit_choice_total", "Deployments chosen, by strategy.",
                               ["provider", "strategy"], registry=r)
        self.decisions = Counter("aisia_decisions_total", "Routing decisions by alias, domain, chosen deployment "
                                 "('none' when refused) and result.", ["alias", "domain", "deployment", "result"],
                                 registry=r)
        self.outcomes = Counter("aisia_outcomes_total", "Attempt outcomes by alias, deployment and result.",
                                ["alias", "deployment", "result"], registry=r)
        self.team_decisions = Counter("aisia_team_decisions_total", "Routed decisions of a LiteLLM team's keys, by "
                                      "team, alias and chosen deployment.", ["team", "alias", "deployment"], registry=r)
        self.team_outcomes = Counter("aisia_team_outcomes_total", "Attempt outcomes of a LiteLLM team's keys, by team, "
                                     "alias, deployment and result.", ["team", "alias", "deployment", "result"],
                                     registry=r)
        self._teams: set = set()
        self.failovers = Counter("aisia_failovers_total", "Retries routed to another deployment after a failure.",
                                 ["alias"], registry=r)
        self.refusals = Counter("aisia_refusals_total", "Requests refused, by alias and reason.",
                                ["alias", "reason"], registry=r)
        self.decision_seconds = Histogram("aisia_decision_seconds", "Time to decide one attempt (seconds).",
                                          ["alias"], buckets=DECISION_BUCKETS, registry=r)
        self.mean_reward = Gauge("aisia_learned_mean_reward", "Learned mean reward per deployment and domain.",
                                 ["deployment", "domain"], registry=r, multiprocess_mode="mostrecent")
        self.latency = Gauge("aisia_learned_latency_seconds", "Learned average latency per deployment (EMA).",
                             ["deployment"], registry=r, multiprocess_mode="mostrecent")
        self.pulls = Gauge("aisia_learned_pulls", "Learned (discounted) pulls per deployment and domain.",
                           ["deployment", "domain"], registry=r, multiprocess_mode="mostrecent")
        self.store_events = Counter("aisia_state_store_events_total", "State store events.", ["event"], registry=r)
        self.queue_depth = Gauge("aisia_state_queue_depth", "Outcomes queued for the shared store.", registry=r,
                                 multiprocess_mode="livesum")
        self.reloads = Counter("aisia_policy_reloads_total", "Policy reloads by result.", ["result"], registry=r)
        self.spend_target = Gauge("aisia_spend_target_usd_per_1k_requests", "Spend target per alias "
                                  "(budget.target_usd_per_1k_requests).", ["alias"], registry=r,
                                  multiprocess_mode="mostrecent")
        self.spend = Gauge("aisia_spend_usd_per_1k_requests", "Realised spend per 1,000 calls of the alias "
                           "(over its last 1,000 calls, every replica's).", ["alias"], registry=r,
                           multiprocess_mode="mostrecent")
        self.spend_multiplier = Gauge("aisia_spend_multiplier", "Multiplier of the alias's cost weight that "
                                      "paces it to its spend target (1: as configured).", ["alias"], registry=r,
                                      multiprocess_mode="mostrecent")
        self.judge_calls = Counter("aisia_judge_calls_total", "Answers sampled for the judge, by outcome (graded, "
                                   "unparsed, error, timeout; queue_full, over_cap, no_rubric: no call made).",
                                   ["outcome"], registry=r)
        self.judge_spend = Counter("aisia_judge_spend_usd_total", "What the judge's calls cost (USD, as LiteLLM "
                                   "reports it).", registry=r)
        self.judge_agreements = Counter("aisia_judge_agreement_total", "Answers both the judge and a conversation "
                                       "signal spoke about, by whether they agreed (good or bad).", ["result"],
                                       registry=r)
        self.signals = Counter("aisia_conversation_signals_total", "Conversation signals recorded as quality "
                               "evidence (docs/signals.md), by kind and by the lexicon language that said so "
                               "('none' for a structural signal).", ["kind", "language"], registry=r)
        self.local_first = Counter("aisia_local_first_total", "Local answers of local-first aliases by what "
                                   "became of them (kept, escalated, escalation_failed, not_local: a cloud "
                                   "candidate served the local side).", ["alias", "result"], registry=r)
        self._alias = self._domain = self._deployment = self._strategy = _Names()
        self._results = _Names(OUTCOME_RESULTS)
        self._reasons = _Names(REFUSAL_REASONS)
        self._events = _Names(STORE_EVENTS)
        self._reload = _Names(RELOAD_RESULTS)
        self._judged = _Names(JUDGE_OUTCOMES)
        self._signal_kinds = _Names(SIGNAL_KINDS)
        self._languages: set = set()
        self._local_first = _Names(LOCAL_FIRST_RESULTS)
        # The children of the per-request metrics: timers by their (bounded) alias label; routed
        # decisions and outcomes by the names as given (see decision).
        self._timers: dict = {}
        self._routed: dict = {}
        self._outcomes: dict = {}
        self._create_known_children()

    def configure(self, *, aliases: Iterable[str], domains: Iterable[str], deployments: Iterable[str],
                  strategies: Iterable[str]) -> None:
        names = (_Names(aliases), _Names([*domains, NO_DOMAIN]), _Names(deployments), _Names(strategies))
        if tuple(n.known for n in names) == tuple(n.known for n in (self._alias, self._domain, self._deployment,
                                                                        self._strategy)):
            return  # the gauges' refresh calls it every few seconds: nothing to create when unchanged
        self._alias, self._domain, self._deployment, self._strategy = names
        self._routed.clear()  # keyed by the names as given: their labels may have changed
        self._outcomes.clear()
        self._create_known_children()

    def _create_known_children(self) -> None:
        """The event counters' known label sets, at 0: a counter child exists only once labelled,
        and a healthy proxy that never failed over, reloaded or refused would otherwise export no
        sample at all (Grafana's "No data" instead of 0)."""
        for alias in self._alias.known:
            self.failovers.labels(alias)
            for reason in ALIAS_REFUSAL_REASONS:
                self.refusals.labels(alias, reason)
        self.refusals.labels(OTHER, "unknown_alias")
        for result in RELOAD_RESULTS:
            self.reloads.labels(result)
        for event in STORE_EVENTS:
            self.store_events.labels(event)
        for outcome in JUDGE_OUTCOMES:
            self.judge_calls.labels(outcome)
        for result in ("agreed", "disagreed"):
            self.judge_agreements.labels(result)

    # -- events --------------------------------------------------------------------------------
    def decision(self, decision, elapsed_s: float, *, failover: bool = False) -> None:
        if decision.refused or decision.deployment_id is None:
            alias = self._alias(decision.alias)
            self._timer(alias).observe(elapsed_s)
            self.decisions.labels(alias, self._domain(decision.domain or NO_DOMAIN), NO_DOMAIN, "refused").inc()
            self.refusals.labels(alias, self._reasons(decision.refused or "no_candidates")).inc()
            return
        raw = (decision.alias, decision.domain, decision.deployment_id, decision.strategy)
        children = self._routed.get(raw)
        if children is None:
            # labels() validates and looks the child up under a lock on every call: a routed
            # decision's timer and two counters are kept per decision's names, as read through
            # the vocabularies (configure drops them when those change; bounded all the same).
            alias = self._alias(decision.alias)
            domain = self._domain(decision.domain or NO_DOMAIN)
            dep, strategy = self._deployment(decision.deployment_id), self._strategy(decision.strategy)
            if len(self._routed) >= _MAX_CHILDREN:
                self._routed.clear()
            children = self._routed[raw] = (self._timer(alias), self.decisions.labels(alias, domain, dep, "routed"),
                                            self.choices.labels(dep, strategy), alias)
        children[0].observe(elapsed_s)
        children[1].inc()
        children[2].inc()
        if failover:
            self.failovers.labels(children[3]).inc()

    def _timer(self, alias: str):
        timer = self._timers.get(alias)
        if timer is None:
            timer = self._timers[alias] = self.decision_seconds.labels(alias)
        return timer

    def refused(self, alias: str, reason: str) -> None:
        """A request refused before any decision (an alias the policy does not define)."""
        self.refusals.labels(self._alias(alias), self._reasons(reason)).inc()

    def outcome(self, alias: str, deployment_id: str, result: str) -> None:
        raw = (alias, deployment_id, result)
        child = self._outcomes.get(raw)
        if child is None:
            if len(self._outcomes) >= _MAX_CHILDREN:
                self._outcomes.clear()
            child = self._outcomes[raw] = self.outcomes.labels(self._alias(alias), self._deployment(deployment_id),
                                                               self._results(result))
        child.inc()

    def _team(self, team: str) -> str:
        if team not in self._teams and len(self._teams) >= MAX_TEAMS:
            return OTHER
        self._teams.add(team)
        return team

    def team_decision(self, team: Optional[str], decision) -> None:
        """A routed decision of a team's key (refusals are counted by alias only)."""
        if team and decision.deployment_id is not None and not decision.refused:
            self.team_decisions.labels(self._team(team), self._alias(decision.alias),
                                       self._deployment(decision.deployment_id)).inc()

    def team_outcome(self, team: Optional[str], alias: str, deployment_id: str, result: str) -> None:
        if team:
            self.team_outcomes.labels(self._team(team), self._alias(alias), self._deployment(deployment_id),
                                      self._results(result)).inc()

    def learned(self, stats: dict) -> None:
        """Gauges from a store's ``stats()`` (per deployment, with per-domain rows)."""
        for dep, row in stats.items():
            d = self._deployment(dep)
            if d == OTHER:
                continue
            self.mean_reward.labels(d, NO_DOMAIN).set(row["mean_reward"])
            self.pulls.labels(d, NO_DOMAIN).set(row["pulls"])
            self.latency.labels(d).set(row["avg_latency"])
            for dom, drow in (row.get("domains") or {}).items():
                self.mean_reward.labels(d, self._domain(dom)).set(drow["mean_reward"])
                self.pulls.labels(d, self._domain(dom)).set(drow["pulls"])

    def pacing(self, rules: dict, paces: dict) -> None:
        """Gauges of the spend targets: ``rules`` {alias: pacing.PaceRule} (the engine's
        ``pace_rules``), ``paces`` a store's ``pacing()`` ({alias: record})."""
        for alias, rule in rules.items():
            a = self._alias(alias)
            if a == OTHER:
                continue
            rec = paces.get(alias)
            self.spend_target.labels(a).set(rule.target_usd_per_1k)
            self.spend.labels(a).set(rec["spend_per_1k"] if rec else 0.0)
            self.spend_multiplier.labels(a).set(multiplier_of(PaceState(**rec) if rec else None, rule))

    def breakers(self, states: dict[str, str]) -> None:
        """``{deployment id: effective state}`` -> ``ai_circuit_breaker_state``."""
        for dep, state in states.items():
            d = self._deployment(dep)
            if d != OTHER:
                self.breaker_state.labels(d).set(PROMETHEUS_CODE.get(state, 0))

    def store_event(self, event: str, n: int = 1) -> None:
        self.store_events.labels(self._events(event)).inc(n)

    def set_queue_depth(self, depth: int) -> None:
        self.queue_depth.set(depth)

    def reload(self, result: str) -> None:
        self.reloads.labels(self._reload(result)).inc()

    def local_first_answer(self, alias: str, result: str) -> None:
        """What became of a local-first call's local answer (local_first.RESULTS)."""
        self.local_first.labels(self._alias(alias), self._local_first(result)).inc()

    def judge_call(self, outcome: str) -> None:
        """An answer sampled for the judge, and what became of it (JUDGE_OUTCOMES)."""
        self.judge_calls.labels(self._judged(outcome)).inc()

    def judge_spent(self, usd: float) -> None:
        if usd > 0.0:
            self.judge_spend.inc(usd)

    def judge_agreement(self, agreed: bool) -> None:
        """The judge and a conversation signal both spoke about an answer: agreed or not."""
        self.judge_agreements.labels("agreed" if agreed else "disagreed").inc()

    def signal(self, kind: str, language: str = "") -> None:
        """A conversation signal recorded as quality evidence (litellm/conversations.py)."""
        lang = language or NO_LANGUAGE
        if lang != NO_LANGUAGE and lang not in self._languages:
            if len(self._languages) >= MAX_SIGNAL_LANGUAGES or not _LANGUAGE.fullmatch(lang):
                lang = OTHER
            else:
                self._languages.add(lang)
        self.signals.labels(self._signal_kinds(kind), lang).inc()
