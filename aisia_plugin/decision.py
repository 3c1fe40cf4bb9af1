"""The plain data a routing decision is made of: deployments, candidates, context, decision.

Nothing here does I/O; strategies receive a pool of Candidates and a RoutingContext and return a
Decision."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping as _MappingABC
from collections.abc import Sequence as _SequenceABC
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Mapping, Optional, Sequence

from .bandit import EMPTY, arm_view, arm_weights, beta_params, pulls_and_rewards
from .breaker import CLOSED, HALF_OPEN, OPEN
from .schema_defaults import defaults_of

HEALTH = {CLOSED: 1.0, HALF_OPEN: 0.5, OPEN: 0.0}


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
    # The most input tokens it takes (LiteLLM's model info); None when unknown.
    max_input_tokens: Optional[int] = None
    # What it can take (capabilities.CAPABILITIES -> supported), from its annotation and LiteLLM's
    # model info; a capability left out is unknown (docs/capabilities.md). Where each was read:
    # an explanation only.
    capabilities: Mapping[str, bool] = field(default_factory=dict)
    capability_sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    # What set the prices (deployments.PRICE_BASES; said for a reader in price_source, e.g.
    # "litellm cost map: azure/gpt-4o (model_info.base_model)") and whether LiteLLM bills the
    # deployment at them (None: LiteLLM not asked); why it is local or not. Explanations only:
    # not part of the deployment's identity.
    price_basis: str = field(default="", compare=False)
    price_source: str = field(default="", compare=False)
    priced_by_litellm: Optional[bool] = field(default=None, compare=False)
    local_reason: str = field(default="", compare=False)
    # One price per 1M tokens, as the seed's bonuses expect: a 3:1 input:output blend. Derived
    # (never passed): computed once here because every decision reads it for every candidate.
    cost_per_1m: float = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "cost_per_1m", 0.75 * self.input_cost_per_1m + 0.25 * self.output_cost_per_1m)

    def cost_usd(self, input_tokens: float, output_tokens: float) -> float:
        """The price of a request of these token counts (what LiteLLM bills, when it prices the
        deployment)."""
        return (input_tokens * self.input_cost_per_1m + output_tokens * self.output_cost_per_1m) / 1e6

    def counted_usd(self, reported, input_tokens, output_tokens):
        """A call's cost as the router counts it (spend targets, the decision log, the judge's
        daily cap): LiteLLM's bill, `reported`, except for a deployment LiteLLM does not price,
        whose calls it logs at 0 or None (an unpriced model is not free): its tokens at the price
        the router ranks it at (`reported` when no token count is known)."""
        if self.priced_by_litellm is not False or (input_tokens is None and output_tokens is None):
            return reported
        return self.cost_usd(input_tokens or 0, output_tokens or 0)


@dataclass(slots=True)
class Candidate:
    """A deployment in a pool, with what is known about it now."""

    deployment: Deployment
    stats: Any  # bandit.ArmStats for the request's domain (blended with the global prior)
    breaker: str = CLOSED  # effective breaker state now: CLOSED | HALF_OPEN | OPEN
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


class Pool(_SequenceABC):
    """The candidates competing in one decision, in pool order, held as columns.

    Read as a sequence, a Pool is the list of Candidates it stands for (each built on first
    access, then kept): a plugin strategy may iterate it like any list. The built-in strategies
    read its columns instead, sequences in pool order (lists or tuples: read them, never change
    them), each computed at most once and only when read: a decision runs per request over the
    whole pool, and one object per candidate costs more than the rest of the decision. The
    engine's pools hold the learned records as the store returned them; the views (forgetting,
    per-domain blend) come from ``bandit.arm_weights``.

    Columns: ``deployments``, ``breakers`` (effective states), ``task_fit``, ``quota``,
    ``signals``, and the properties ``ids``, ``costs`` (per 1M tokens), ``weights`` (the
    arms' view weights), ``pulls``, ``rewards``, ``latencies`` (average, s), ``p95_ms``,
    ``stddev_ms``, ``error_rates``, ``beta_params``."""

    __slots__ = ("deployments", "breakers", "task_fit", "quota", "signals", "_globals", "_domains", "_arm_at",
                 "_candidates", "_ids", "_weights", "_pulls", "_rewards", "_latencies", "_p95", "_sd", "_err",
                 "_beta", "_costs")

    def __init__(self, deployments: list, breakers: list, task_fit: list, globals_: list, domains: list,
                 tick: float, gamma: float, prior_strength: Optional[float], fresh, *, quota: Optional[list] = None,
                 signals: Optional[list] = None, ids: Optional[list] = None, costs: Optional[Sequence] = None):
        """An engine's pool: each candidate's global and domain records as stored (None where
        there is none), to be seen at `tick` with forgetting `gamma` and the domain prior (`ids`,
        `costs`: the deployments' ids and costs per 1M tokens, when the caller has them at hand)."""
        n = len(deployments)
        self.deployments = deployments
        self.breakers = breakers
        self.task_fit = task_fit
        self.quota = quota if quota is not None else [1.0] * n
        self.signals = signals if signals is not None else [NO_SIGNALS] * n
        self._globals = globals_
        self._domains = domains
        self._arm_at = (tick, gamma, prior_strength, fresh)
        self._ids = ids
        self._costs = costs
        self._candidates = self._weights = self._pulls = self._rewards = self._latencies = None
        self._p95 = self._sd = self._err = self._beta = None

    @classmethod
    def of(cls, candidates) -> "Pool":
        """The Pool of ready-made Candidates (a test's, a plugin's): their stats are the views."""
        if type(candidates) is cls:
            return candidates
        cands = list(candidates)
        p = cls.__new__(cls)
        p.deployments = [c.deployment for c in cands]
        p.breakers = [c.breaker for c in cands]
        p.task_fit = [c.task_fit for c in cands]
        p.quota = [c.quota for c in cands]
        p.signals = [c.signals for c in cands]
        p._globals = p._domains = p._arm_at = None
        p._candidates = cands
        p._ids = p._costs = None
        p._weights = [(c.stats, 1.0, EMPTY, 0.0) for c in cands]
        p._pulls = [c.stats.pulls for c in cands]
        p._rewards = [c.stats.total_reward for c in cands]
        p._beta = None
        p._latencies = [c.stats.avg_latency for c in cands]
        p._p95 = [c.p95_latency_ms for c in cands]
        p._sd = [c.latency_stddev_ms for c in cands]
        p._err = [c.error_rate for c in cands]
        return p

    # -- the sequence of Candidates -------------------------------------------------------------
    def _built(self) -> list:
        cands = self._candidates
        if cands is None:
            tick, gamma, prior, fresh = self._arm_at
            cands = self._candidates = [
                Candidate(dep, arm_view(g, d, tick, gamma, prior, fresh), br, p95, sd, err, fit, q, sig)
                for dep, g, d, br, p95, sd, err, fit, q, sig in zip(
                    self.deployments, self._globals, self._domains, self.breakers, self.p95_ms, self.stddev_ms,
                    self.error_rates, self.task_fit, self.quota, self.signals)]
        return cands

    def __len__(self) -> int:
        return len(self.deployments)

    def __getitem__(self, i):
        return self._built()[i]

    def __iter__(self):
        return iter(self._built())

    def __repr__(self) -> str:
        return f"Pool({self.ids!r})"

    def subset(self, indices) -> "Pool":
        """The pool of the members at `indices` (as Candidates: off the hot path)."""
        cands = self._built()
        return Pool.of([cands[i] for i in indices])

    def not_open(self) -> "Pool":
        """The members whose breaker is not OPEN (the pool itself when none is); the whole pool
        when every one is OPEN."""
        breakers = self.breakers
        if OPEN not in breakers:
            return self
        keep = [i for i, b in enumerate(breakers) if b != OPEN]
        return self.subset(keep) if keep else self

    # -- columns ----------------------------------------------------------------------------------
    @property
    def tick(self) -> float:
        """The store's tick the arms are seen at (0 for a pool of ready-made Candidates)."""
        return self._arm_at[0] if self._arm_at is not None else 0.0

    @property
    def gamma(self) -> float:
        """Forgetting per tick (1: none)."""
        return self._arm_at[1] if self._arm_at is not None else 1.0

    @property
    def ids(self) -> list[str]:
        ids = self._ids
        if ids is None:
            ids = self._ids = [d.id for d in self.deployments]
        return ids

    @property
    def costs(self) -> Sequence[float]:
        costs = self._costs
        return costs if costs is not None else [d.cost_per_1m for d in self.deployments]

    def _views(self, posterior: bool = False) -> None:
        # One pass computes the weights, the latencies and the two sums the first reader wants
        # (a bandit reads either pulls and rewards, or Beta shapes); the other two come from the
        # weights if ever read.
        tick, gamma, prior, fresh = self._arm_at
        self._weights, first, second, self._latencies = arm_weights(
            self._globals, self._domains, tick, gamma, prior, fresh, posterior=posterior)
        if posterior:
            self._beta = (first, second)
        else:
            self._pulls, self._rewards = first, second

    @property
    def weights(self) -> list:
        if self._weights is None:
            self._views()
        return self._weights

    @property
    def pulls(self) -> list[float]:
        if self._pulls is None:
            if self._weights is None:
                self._views()
            else:
                self._pulls, self._rewards = pulls_and_rewards(self._weights)
        return self._pulls

    @property
    def rewards(self) -> list[float]:
        if self._rewards is None:
            _ = self.pulls  # computes both
        return self._rewards

    @property
    def beta_params(self) -> tuple[list[float], list[float]]:
        if self._beta is None:
            if self._weights is None:
                self._views(posterior=True)
            else:
                self._beta = beta_params(self._weights)
        return self._beta

    def _records(self) -> list:
        fresh = self._arm_at[3]
        return [g if g is not None else fresh for g in self._globals]

    @property
    def latencies(self) -> list[float]:
        if self._latencies is None:
            self._views()
        return self._latencies

    def _latency_columns(self) -> None:
        # The deployment-wide figures come from the global record; forgetting scales failures
        # and pulls alike, so the error rate needs no decay.
        sqrt = math.sqrt
        p95, sds, errs = [], [], []
        for g in self._records():
            sd = sqrt(g.latency_var) if g.latency_var > 0.0 else 0.0
            p95.append((g.avg_latency + 1.645 * sd) * 1000.0)
            sds.append(sd * 1000.0)
            errs.append(g.failures / g.pulls if g.pulls > 0 else 0.0)
        self._p95, self._sd, self._err = p95, sds, errs

    @property
    def p95_ms(self) -> list[float]:
        if self._p95 is None:
            self._latency_columns()
        return self._p95

    @property
    def stddev_ms(self) -> list[float]:
        if self._sd is None:
            self._latency_columns()
        return self._sd

    @property
    def error_rates(self) -> list[float]:
        if self._err is None:
            self._latency_columns()
        return self._err


_BANDIT = defaults_of("Bandit")
_ALIAS = defaults_of("Alias")


@dataclass(frozen=True, slots=True)
class AliasSettings:
    """An alias's policy settings as its decisions use them, resolved once per alias when the
    engine is built (``AliasSettings.of``): the alias's own value, else the bandit section's.
    The defaults (a context built without a policy: tests, plugins) are the schema's."""

    exploration_c: float = _BANDIT["exploration_c"]
    cost_weight: float = _BANDIT["cost_weight"]
    latency_weight: float = _BANDIT["latency_weight"]
    cost_scale_per_1m: float = _BANDIT["cost_scale_per_1m"]
    latency_scale_s: float = _BANDIT["latency_scale_s"]
    exploration: float = _ALIAS["exploration"]  # epsilon for the ranking strategies
    weights: Mapping[str, float] = field(default_factory=dict)  # normalised rules weights
    tier_hint: Optional[str] = _ALIAS["tier_hint"]
    sla: Any = None  # policy.models.Sla
    lkgp_enabled: bool = _ALIAS["lkgp_enabled"]

    @classmethod
    def of(cls, alias, bandit, weights: Mapping[str, float]) -> "AliasSettings":
        """The settings of `alias` (a policy.models.Alias) under the policy's `bandit` section,
        with the alias's normalised rules `weights`."""
        def own(v, fallback):
            return v if v is not None else fallback

        return cls(exploration_c=own(alias.exploration_c, bandit.exploration_c),
                   cost_weight=own(alias.cost_weight, bandit.cost_weight),
                   latency_weight=own(alias.latency_weight, bandit.latency_weight),
                   cost_scale_per_1m=bandit.cost_scale_per_1m, latency_scale_s=bandit.latency_scale_s,
                   exploration=alias.exploration, weights=weights, tier_hint=alias.tier_hint, sla=alias.sla,
                   lkgp_enabled=alias.lkgp_enabled)


DEFAULT_SETTINGS = AliasSettings()


def _setting(name: str) -> property:
    return property(attrgetter(f"settings.{name}"), doc=f"The alias's {name} (``AliasSettings``).")


@dataclass(slots=True)
class RoutingContext:
    """Everything a strategy may use besides the pool, built by the engine per request (by
    keyword). The alias's settings are one shared ``AliasSettings``, also readable here by name
    (``context.exploration_c`` is ``context.settings.exploration_c``; ``context.cost_weight`` is
    ``context.settings.cost_weight`` times ``cost_multiplier``, the spend target's)."""

    alias: str
    strategy: str
    features: Any  # features.RequestFeatures
    domain: Optional[str]
    task_type: str
    now: float
    rng: random.Random
    settings: AliasSettings = DEFAULT_SETTINGS
    last_known_good: Optional[str] = None
    total_pulls: Optional[float] = None  # N of UCB1; None: the sum over the competing pool
    policy: Any = None  # the whole policy.models.Policy, for plugins
    contextual: Any = None  # contextual.ContextualModels the contextual strategy reads (the engine's)
    # The spend target's multiplier of the cost weight (pacing.py; 1 for an alias without a target).
    cost_multiplier: float = 1.0
    # What paces this decision's cost (pacing.BY_TARGET: a spend target; pacing.BY_BUDGET: a
    # team's or key's LiteLLM budget; None: nothing): then the multiplier says how much quality a
    # lower price may cost (the contextual strategy: docs/quality.md#the-choice).
    paced: Optional[str] = None
    # The deployments' quality estimates for this request (``QualityColumns``: the engine's reader
    # of quality.py's records; None outside an engine): the contextual strategy's base.
    quality: Any = None
    # The domain this request's quality is read and learned under (``Engine.quality_domain``): the
    # detected domain, else the one domain whose words occur below min_matches; None: none.
    quality_domain: Optional[str] = None

    exploration_c = _setting("exploration_c")
    latency_weight = _setting("latency_weight")
    cost_scale_per_1m = _setting("cost_scale_per_1m")
    latency_scale_s = _setting("latency_scale_s")
    exploration = _setting("exploration")
    weights = _setting("weights")
    tier_hint = _setting("tier_hint")
    sla = _setting("sla")
    lkgp_enabled = _setting("lkgp_enabled")

    @property
    def cost_weight(self) -> float:
        """The weight of the cost bonus in this decision: the alias's ``cost_weight`` times the
        spend target's multiplier (the one place the multiplier is applied: every strategy with a
        cost term reads its weight here)."""
        return self.settings.cost_weight * self.cost_multiplier


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Draw:
    """What epsilon-greedy exploration drew, as ``strategies.rules.exploration`` records it: the
    alias's epsilon, the id drawn, the ranking's id, how many candidates it drew from, and
    whether the draw is the ranking's choice."""

    epsilon: float
    picked: str
    best: str
    candidates: int
    same: bool


def explored_reason(why: str, drew: Optional[Draw]) -> str:
    """A ranking's reason once epsilon-greedy exploration had its say: `drew` is None (the
    ranking's winner stands: `why` as is) or the ``Draw``. The one home of this wording (the
    contextual strategy keeps its own shorter one, unchanged)."""
    if drew is None:
        return why
    eps, picked, n = drew.epsilon, drew.picked, drew.candidates
    if drew.same:
        return (f"exploration (epsilon {eps:g}) drew {picked} at random from {n} candidates, "
                f"which is also the ranking's choice; {why}")
    return (f"exploration (epsilon {eps:g}) chose {picked} at random from {n} candidates "
            f"instead of the ranking's {drew.best}; ranking: {why}")


@dataclass(slots=True, kw_only=True)
class Facts:
    """What a built-in strategy's decision keeps to explain itself (``Explainer``), built by
    keyword when it decides: atoms (str, numbers, bools, None, and tuples of them), the
    exploration's ``Draw``, and, where a strategy says so, dicts of numbers. Every strategy's
    record begins with these four fields; each strategy family extends it with its own
    (``strategies/*.py``, each a plain slotted dataclass too).

    Treated as immutable, as ``bandit.ArmStats`` is: nothing changes a record once built (nor
    hashes one). Not frozen, because a frozen class's ``__init__`` goes through
    ``object.__setattr__`` per field, about 1.3k instructions each, and one record of 5 to 16
    fields is built per decision.

    `ids`: the pool's ids (the rows' order); `scores`: the scores in pool order (None where a
    candidate has none; the whole field None when the explainer computes them); `excluded`:
    ``(id, why)`` pairs of the pool members that did not compete; `drew`: the exploration's
    ``Draw`` (``explored_reason``; None: the ranking's winner stands)."""

    ids: tuple
    scores: Optional[tuple] = None
    excluded: tuple = ()
    drew: Optional[Draw] = None


class Explainer:
    """How a built-in strategy's decision explains itself, from its *facts* (a ``Facts`` record,
    of the strategy's own kind) that the strategy fills when it decides (more only where no
    proxy reads it: the contextual strategy's under ``aisia explain``).
    A decision stays in the proxy's explain log for hundreds of requests; closures over the
    pool's lists (the earlier form) kept ~40 objects per decision that the cyclic collector
    tracks, promoted to its oldest generation and walked by every full collection. The facts
    record is one tracked object per decision, its tuples of atoms untracked by the first
    collections that find their items untracked; an Explainer is one module-level object per
    strategy, shared by its decisions. The reason and the rows are rendered from the facts when
    first read, never on the request path (``Decision.reason``, ``Decision.scores``)."""

    __slots__ = ()

    def scores(self, facts) -> Sequence:
        """The scores in pool order."""
        return facts.scores

    def probability(self, facts) -> Optional[float]:
        """The chosen candidate's selection probability (a decision made with ``FROM_FACTS``)."""
        return None

    def terms(self, facts) -> Optional[Mapping[str, dict]]:
        """The named parts of each candidate's score, by id (None: none)."""
        return None

    def why(self, facts) -> str:
        """The ranking's reason, before exploration."""
        raise NotImplementedError

    def reason(self, facts) -> str:
        return explored_reason(self.why(facts), facts.drew)

    def rows(self, facts) -> list["CandidateScore"]:
        """Every pool member's row: its score, why it did not compete (None: it did), its terms."""
        out = dict(facts.excluded) if facts.excluded else {}
        tm = self.terms(facts) or {}
        return [CandidateScore(i, s, out.get(i), tm.get(i, {})) for i, s in zip(facts.ids, self.scores(facts))]

    def ranked(self, facts) -> list[tuple]:
        """(id, score) of the candidates that competed, in pool order."""
        pairs = zip(facts.ids, self.scores(facts))
        if not facts.excluded:
            return list(pairs)
        out = {i for i, _ in facts.excluded}
        return [(i, s) for i, s in pairs if i not in out]


# The rows of facts with scores and no terms (``Facts`` itself), for a reason given as a string.
PLAIN = Explainer()
# A Decision's probability left to its explainer (``Decision.probability``).
FROM_FACTS = object()


def atoms(column) -> tuple:
    """A pool's column as facts keep it: a tuple (the column itself when it is one)."""
    return column if type(column) is tuple else tuple(column)


def learned_domain(decision) -> Optional[str]:
    """The domain the quality evidence about `decision`'s answer is recorded under: the one its
    strategy read the quality in (the contextual strategy's ``LearnContext.domain``: the detected
    domain, a single domain's words, or quality.OTHER_PROMPTS), else the detected domain."""
    return getattr(getattr(decision, "context", None), "domain", None) or getattr(decision, "domain", None)


class Decision:
    """The outcome of routing one request, explaining itself.

    ``scores`` (every candidate's score or the reason it was excluded, with the named parts of
    the score) may be built on first read: a built-in strategy passes an ``Explainer`` and its
    facts, another strategy may pass ``build_scores``, a function of no argument returning the
    rows, so that a request whose explanation nobody reads does not pay for one object per
    candidate. Reading ``scores`` (or ``as_dict()``) always gives the full list, the same on
    every read. ``reason`` likewise may be left to the explainer (None) or given as a function of
    no argument returning the one-line reason, formatted on first read. The other fields are
    plain attributes."""

    __slots__ = ("deployment_id", "model", "strategy", "_reason", "candidates_considered", "final_score",
                 "_probability", "alias", "domain", "task_type", "refused", "status_code",
                 "probe", "_scores", "_build_scores", "_more_scores", "context", "_explainer", "_facts")

    def __init__(self, deployment_id: Optional[str], model: Optional[str], strategy: str, reason,
                 candidates_considered: int, final_score: Optional[float], scores: Optional[list] = None,
                 probability: Optional[float] = None, alias: str = "", domain: Optional[str] = None,
                 task_type: str = "default", refused: Optional[str] = None, status_code: int = 200, *,
                 build_scores=None, explainer: Optional[Explainer] = None, facts: Optional[Facts] = None):
        self.deployment_id = deployment_id
        self.model = model
        self.strategy = strategy
        self._reason = reason
        self.candidates_considered = candidates_considered
        self.final_score = final_score
        # Selection probability, where the strategy can state it; FROM_FACTS: its explainer's
        # ``probability(facts)``, computed when first read (the decision log reads it; a request
        # whose decision nobody logs never pays for it).
        self._probability = probability
        self.alias = alias
        self.domain = domain
        self.task_type = task_type
        self.refused = refused  # set when no deployment may serve (e.g. strict budget)
        self.status_code = status_code  # HTTP status to answer with when refused (402 budget, 503 none)
        # The chosen deployment's breaker is half-open: serving it takes a probe slot (the engine
        # reserves it when deciding with reserve=True; a caller deciding with reserve=False, as
        # the proxy does with a shared store, reserves it itself).
        self.probe = False
        self._scores = list(scores) if scores is not None else \
            (None if build_scores is not None or explainer is not None else [])
        self._build_scores = build_scores
        self._explainer = explainer
        self._facts = facts
        self._more_scores: Optional[list] = None
        # What a learning strategy needs back with the outcome (the contextual strategy: the
        # request's feature vector); None for the others.
        self.context = None

    @property
    def probability(self) -> Optional[float]:
        p = self._probability
        if p is FROM_FACTS:
            p = self._probability = self._explainer.probability(self._facts)
        return p

    @probability.setter
    def probability(self, value: Optional[float]) -> None:
        self._probability = value

    @property
    def reason(self) -> str:
        r = self._reason
        if not isinstance(r, str):
            r = self._reason = self._explainer.reason(self._facts) if r is None else r()
        return r

    @reason.setter
    def reason(self, value: str) -> None:
        self._reason = value

    @property
    def scores(self) -> list[CandidateScore]:
        if self._scores is None:
            rows = self._explainer.rows(self._facts) if self._build_scores is None else list(self._build_scores())
            if self._more_scores:
                rows.extend(self._more_scores)
            self._scores, self._build_scores, self._more_scores = rows, None, None
        return self._scores

    @scores.setter
    def scores(self, rows) -> None:
        self._scores, self._build_scores, self._more_scores = list(rows), None, None

    def ranking(self) -> list:
        """The candidates that competed, best first: the chosen one, then the others by score
        (those without a numeric score last, in pool order); excluded candidates are not in it."""
        if self._explainer is not None:  # (without building the explanation rows)
            pairs = self._explainer.ranked(self._facts)
        else:
            pairs = [(row.id, row.score) for row in self.scores if row.excluded is None]
        return ranking_of(pairs, self.deployment_id)

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


def ranking_of(pairs, chosen: Optional[str]) -> list:
    """``Decision.ranking`` from the competing ``(id, score)`` pairs in pool order: `chosen`
    first, then the others by score, best first, ties in pool order, those without a numeric
    score (None, NaN) last in pool order."""
    scored, unscored = [], []
    for k, (i, s) in enumerate(pairs):
        if i == chosen:
            continue
        if isinstance(s, (int, float)) and s == s:
            scored.append((-s, k, i))
        else:
            unscored.append(i)
    scored.sort()
    return [chosen] + [i for _, _, i in scored] + unscored


def explained_decision(strategy: str, chosen: Deployment, final_score: Optional[float], explainer: Explainer,
                       facts: Facts, reason: Optional[str] = None, *, probability: Optional[float] = None) -> Decision:
    """A built-in strategy's Decision, explained by `explainer` from `facts` (``Explainer``);
    `reason`: the reason when it is already a string (None: the explainer's)."""
    return Decision(chosen.id, chosen.model, strategy, reason, len(facts.ids), final_score, probability=probability,
                    explainer=explainer, facts=facts)


def not_open(pool: list[Candidate]) -> list[Candidate]:
    """The candidates whose breaker is not OPEN; the whole pool when every one is OPEN (a list of
    Candidates; ``Pool.not_open`` is the same rule over a Pool)."""
    healthy = [c for c in pool if c.breaker != OPEN]
    return healthy or list(pool)
