"""Running a trace through the real routing pipeline, and the baselines it is measured against.

A trace is first *materialised* into a Scenario: every (request, candidate) call gets its final
success, score, cost and latency (latency models sampled with a seed, outage windows applied), so
that the router, every fixed candidate, uniform random and the oracle all see exactly the same
calls, and two policies (``--compare``, ``--sweep``) are measured on the same scenario.

The router runs online in file order: the Engine decides, only the chosen candidate's outcome is
revealed to it (``Engine.record``), and a failed call fails over to another candidate as the
alias's ``failover.attempts`` says. The engine's clock is simulated: request i happens at
i * seconds_per_request.

Figures (per run): requests, mean score (a request the client saw fail scores 0), total cost
(every attempt's cost), p50/p95 of the latency the client waited (the sum of its attempts;
requests with no known latency are left out), errors seen by clients, calls per candidate,
failovers, and regret against the per-request oracle (best score, cheapest among ties)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional, Sequence

from .. import blame
from ..decision import Deployment
from ..deployments import selects
from .. import pacing
from ..outcome import Outcome
from ..schema_defaults import range_of
from .candidates import CandidateSpec
from .quality import measures, spend_windows
from .trace import RecordedOutcome, Trace, prompt_chars

Progress = Callable[[int, int], None]

TIE_EPS = 1e-12
# The first requests of a replay, measured apart too (a router's cold start: issue 20).
FIRST_REQUESTS = 200


class ReplayError(ValueError):
    """A replay that cannot run (an alias selecting no candidate, a bad override...)."""


@dataclass(frozen=True)
class Call:
    """One candidate's answer to one request, as every run of the scenario sees it."""

    candidate: str
    success: bool
    score: float  # 0 for a failed call
    cost_usd: float
    latency_ms: Optional[float]
    status_code: Optional[int] = None
    error: Optional[str] = None
    error_type: Optional[str] = None
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None

    def outcome(self) -> Outcome:
        """What the learner is told about this call."""
        latency_s = None if self.latency_ms is None else self.latency_ms / 1000.0
        if self.success:
            return Outcome(self.candidate, True, latency_s=latency_s, quality=self.score, cost_usd=self.cost_usd,
                           input_tokens=self.input_tokens, output_tokens=self.output_tokens)
        # A failure that names neither status nor type is classified a provider failure by the breaker.
        # Its cost is not told: in the proxy LiteLLM logs a failed call without a response_cost,
        # so a spend target's pacing counts successes only; a replay must pace as the proxy does.
        # (The replay's own total still counts the recorded cost of every attempt.)
        return Outcome(self.candidate, False, latency_s=latency_s, status_code=self.status_code, error_type=self.error_type,
                       message=self.error or "")


@dataclass
class Scenario:
    trace: Trace
    specs: Mapping[str, CandidateSpec]
    calls: list[dict[str, Call]]  # per request: candidate -> Call
    seed: int = 0
    seconds_per_request: float = 1.0

    @property
    def candidates(self) -> list[str]:
        return self.trace.candidates

    def __len__(self) -> int:
        return len(self.calls)

    def head(self, n: int) -> "Scenario":
        """The scenario of its first `n` requests (the same calls)."""
        return Scenario(Trace(self.trace.path, self.trace.records[:n]), self.specs, self.calls[:n], seed=self.seed,
                        seconds_per_request=self.seconds_per_request)

    def deployments(self, policy) -> dict[str, Deployment]:
        return {n: self.specs.get(n, CandidateSpec()).to_deployment(n, policy) for n in self.candidates}

    def selected(self, policy, alias: str) -> list[str]:
        """The trace candidates the alias's selector keeps (the baselines compete among them)."""
        ap = policy.aliases[alias]
        return [n for n, d in self.deployments(policy).items() if selects(ap.candidates, d)]


def call_cost(rec: RecordedOutcome, messages, dep: Deployment, success: bool) -> float:
    """cost_usd when recorded; else tokens x the candidate's prices (input estimated from the
    prompt, chars/4, and output 0 when missing). A failed call with neither costs nothing."""
    if rec.cost_usd is not None:
        return rec.cost_usd
    if not success and rec.input_tokens is None and rec.output_tokens is None:
        return 0.0
    tin = rec.input_tokens
    if tin is None:
        tin = math.ceil(prompt_chars(messages) / 4) if success else 0
    tout = rec.output_tokens or 0
    return dep.cost_usd(tin, tout)


def build_scenario(trace: Trace, specs: Mapping[str, CandidateSpec] | None, policy, *, seed: int = 0,
                   seconds_per_request: float = 1.0) -> Scenario:
    specs = dict(specs or {})
    names = trace.candidates
    deps = {n: specs.get(n, CandidateSpec()).to_deployment(n, policy) for n in names}
    # One random stream per candidate: a candidate's sampled latencies do not depend on the others.
    rngs = {n: random.Random(f"aisia-replay:{seed}:{n}") for n in names}
    calls: list[dict[str, Call]] = []
    for rec in trace.records:
        row: dict[str, Call] = {}
        for name, ro in rec.outcomes.items():
            model = specs.get(name, CandidateSpec()).latency
            latency = ro.latency_ms
            if latency is None:
                latency = model.sample(rec.index, rngs[name])
            outage = model.outage_at(rec.index)
            if outage is not None:
                row[name] = Call(name, False, 0.0, 0.0, outage.latency_ms if outage.latency_ms is not None else latency,
                                 status_code=outage.status_code, error=outage.error)
                continue
            success = not ro.failed
            row[name] = Call(
                name, success, float(ro.score) if success else 0.0, call_cost(ro, rec.messages, deps[name], success),
                latency, status_code=ro.status_code, error=ro.error, error_type=ro.error_type,
                input_tokens=ro.input_tokens, output_tokens=ro.output_tokens,
            )
        calls.append(row)
    return Scenario(trace, specs, calls, seed=seed, seconds_per_request=seconds_per_request)


# -- one run's results ---------------------------------------------------------------------------
@dataclass
class Served:
    """What one request came to in one run."""

    score: float
    cost_usd: float
    latency_ms: Optional[float]
    error: bool
    served_by: Optional[str]
    attempts: list[str] = field(default_factory=list)
    status_code: Optional[int] = None


def served_from(attempts: Sequence[Call]) -> Served:
    """A request served by trying `attempts` in order (the last one succeeded, or all failed)."""
    cost = sum(c.cost_usd for c in attempts)
    lats = [c.latency_ms for c in attempts if c.latency_ms is not None]
    latency = sum(lats) if lats else None
    last = attempts[-1] if attempts else None
    if last is not None and last.success:
        return Served(last.score, cost, latency, False, last.candidate, [c.candidate for c in attempts], 200)
    return Served(0.0, cost, latency, True, None, [c.candidate for c in attempts],
                  last.status_code if last is not None else None)


def first_choices(served: Sequence[Served]) -> list[Optional[str]]:
    """Each request's first choice (the candidate tried first; None when none was)."""
    return [s.attempts[0] if s.attempts else s.served_by for s in served]


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


@dataclass
class Figures:
    name: str
    requests: int
    mean_score: float
    total_cost_usd: float
    p50_latency_ms: Optional[float]
    p95_latency_ms: Optional[float]
    errors: int
    calls: dict[str, int]
    failovers: int = 0
    regret: Optional[float] = None  # sum over requests of (oracle score - score)
    mean_regret: Optional[float] = None
    missing: int = 0  # requests without an outcome for this run's only candidate (fixed baselines)

    def as_dict(self) -> dict:
        d = {
            "requests": self.requests,
            "mean_score": self.mean_score,
            "total_cost_usd": self.total_cost_usd,
            "p50_latency_ms": self.p50_latency_ms,
            "p95_latency_ms": self.p95_latency_ms,
            "errors": self.errors,
            "calls": dict(self.calls),
            "failovers": self.failovers,
            "regret": self.regret,
            "mean_regret": self.mean_regret,
        }
        if self.missing:
            d["missing"] = self.missing
        return d


def figures(name: str, served: Sequence[Served], oracle: Optional[Sequence[Served]] = None, *, missing: int = 0) -> Figures:
    n = len(served)
    calls: dict[str, int] = {}
    for s in served:
        for c in s.attempts:
            calls[c] = calls.get(c, 0) + 1
    lats = [s.latency_ms for s in served if s.latency_ms is not None]
    regret = mean_regret = None
    if oracle is not None:
        regret = sum(o.score - s.score for o, s in zip(oracle, served))
        mean_regret = regret / n if n else 0.0
    return Figures(
        name=name, requests=n, mean_score=(sum(s.score for s in served) / n) if n else 0.0,
        total_cost_usd=sum(s.cost_usd for s in served),
        p50_latency_ms=percentile(lats, 50), p95_latency_ms=percentile(lats, 95),
        errors=sum(1 for s in served if s.error), calls=calls,
        failovers=sum(max(0, len(s.attempts) - 1) for s in served),
        regret=regret, mean_regret=mean_regret, missing=missing,
    )


def teach_others(engine, alias: str, decision, row: dict) -> None:
    """Teach the engine's contextual model the outcome every candidate of `row` the `decision`
    did not choose would have had for its request, each against its own base as the decision
    read it (its ``terms``): what the model learns online with full information instead of the
    bandit's partial feedback, the same model, order and decisions' exploration otherwise. An
    outcome the engine would not learn from (``Engine.judge``: a failure the provider did not
    cause) teaches nothing here either."""
    from ..contextual import LearnContext

    ctx, ap = decision.context, engine.policy.aliases[alias]
    tick = engine.store.tick()
    for cand in decision.scores:
        call = row.get(cand.id)
        if cand.id == decision.deployment_id or call is None or "base" not in cand.terms:
            continue
        value = engine.judge(ap, call.outcome())[1]
        if value is None:
            continue
        engine.contextual.learn(cand.id, LearnContext(ctx.vector, cand.terms["base"], ctx.prior_variance,
                                                      ctx.noise_variance), value, tick, engine.quality_gamma)


class RequestJudge:
    """One replayed request's outcomes learned as the proxy learns them (``blame.judge``, the
    callback's order): a failure that does not count is recorded at once (a rate limit backs the
    deployment off, the caller's frees a probe slot); one that counts waits for the request's next outcome, which may show it to be the request's
    (the same failure elsewhere, a failure on another provider) before it is learned. The replay
    has one caller: the peers' check by key (``blame.outlier_verdict``) never applies."""

    def __init__(self, engine, alias: str, providers: Mapping[str, str]):
        self.engine, self.alias, self.providers = engine, alias, providers
        self.failures: list[blame.AttemptFailure] = []
        self.pending = None  # (decision, outcome, verdict) of a failure that counts, not yet learned
        self.verdicts: list = []  # per attempt: its Verdict (None: a success), as finally learned

    def outcome(self, decision, outcome: Outcome):
        """Learn (or hold) one attempt's outcome; its verdict (None for a success)."""
        if outcome.success:
            self.settle()
            self._record(decision, outcome, None)
            return None
        dep = outcome.deployment_id
        failure = blame.AttemptFailure(dep, self.providers.get(dep, ""), outcome.status_code, outcome.error_type,
                                       outcome.message, blame.signature(outcome.status_code, outcome.error_type,
                                                                        outcome.message, (dep,)), outcome.latency_s)
        verdict = blame.judge(self.engine.policy.circuit_breaker, failure, blame.NO_FACTS, self.failures, self.alias)
        self.failures.append(failure)
        if self.pending is not None and self.pending[1].deployment_id in verdict.acquits:
            held, self.pending = self.pending, None
            self._record(held[0], held[1], verdict)
        if not verdict.counts:
            self._record(decision, outcome, verdict)
        else:
            self.settle()
            self.pending = (decision, outcome, verdict)
        return verdict

    def settle(self) -> None:
        """The pending failure was the deployment's: learn it."""
        held, self.pending = self.pending, None
        if held is not None:
            self._record(*held)

    def _record(self, decision, outcome: Outcome, verdict) -> None:
        self.engine.record(decision, outcome, verdict=verdict)
        self.verdicts.append((outcome.deployment_id, verdict))


# -- the runs --------------------------------------------------------------------------------------
def run_router(policy, alias: str, scenario: Scenario, *, seed: int = 0, progress: Optional[Progress] = None,
               deployments_at: Optional[Callable[[int, dict], dict]] = None,
               observe: Optional[Callable[[int, object], None]] = None, full_feedback: bool = False) -> list[Served]:
    """The Engine, online, in file order; only chosen candidates' outcomes are revealed (with
    `full_feedback`, a diagnosis and never a router: the contextual model also learns every other
    candidate's outcome of each request, ``teach_others``).

    `deployments_at(index, deployments)` may return the deployments as they are at request
    `index` (a price change or config reload mid-trace: a live proxy reads them per request).
    `observe(index, engine)`, when given, is called after each request was served (to read what
    the engine learned, e.g. the spend target's multiplier)."""
    import random as _random

    from ..engine import Engine

    ap = policy.aliases.get(alias)
    if ap is None:
        raise ReplayError(f"unknown alias {alias!r}; known: {', '.join(policy.aliases)}")
    deps = scenario.deployments(policy)
    now = [0.0]
    engine = Engine(policy, clock=lambda: now[0], rng=_random.Random(seed))
    attempts_allowed = 1 + ap.failover.attempts
    order = scenario.candidates
    providers = {n: d.provider for n, d in deps.items()}
    out: list[Served] = []
    total = len(scenario)
    for i, (rec, row) in enumerate(zip(scenario.trace.records, scenario.calls)):
        now[0] = i * scenario.seconds_per_request
        cur = deployments_at(i, deps) if deployments_at is not None else deps
        pool = [cur[n] for n in order if n in row]
        feats = engine.features(rec.messages)
        tried: list[str] = []
        attempts: list[Call] = []
        refused_status = None
        judged = RequestJudge(engine, alias, providers)
        for _ in range(attempts_allowed):
            decision = engine.decide(alias, rec.messages, pool, exclude=tried, features=feats)
            if decision.deployment_id is None:
                refused_status = decision.status_code
                break
            call = row[decision.deployment_id]
            verdict = judged.outcome(decision, call.outcome())
            if full_feedback and decision.context is not None:
                teach_others(engine, alias, decision, row)
            tried.append(call.candidate)
            attempts.append(call)
            if call.success or not verdict.retry_elsewhere or verdict.callers:
                refused_status = verdict.client_status if verdict is not None else None
                break
        judged.settle()
        served = served_from(attempts)
        if refused_status is not None:
            served.status_code = refused_status
        out.append(served)
        if observe is not None:
            observe(i, engine)
        if progress is not None:
            progress(i + 1, total)
    return out


def run_fixed(scenario: Scenario, name: str) -> tuple[list[Served], int]:
    """Always `name` (no failover: one deployment). A request without its outcome is an error."""
    out, missing = [], 0
    for row in scenario.calls:
        call = row.get(name)
        if call is None:
            missing += 1
            out.append(Served(0.0, 0.0, None, True, None, [], None))
        else:
            out.append(served_from([call]))
    return out, missing


def run_uniform(scenario: Scenario, names: Iterable[str], *, attempts: int = 0, seed: int = 0) -> list[Served]:
    """Uniformly random among `names`, failing over (at random, without repeats) like the alias."""
    rng = random.Random(f"aisia-replay-uniform:{seed}")
    names = list(names)
    out = []
    for row in scenario.calls:
        avail = [n for n in names if n in row]
        order = rng.sample(avail, min(len(avail), 1 + attempts))
        tried = []
        for n in order:
            tried.append(row[n])
            if row[n].success:
                break
        out.append(served_from(tried) if tried else Served(0.0, 0.0, None, True, None, [], 503))
    return out


def run_oracle(scenario: Scenario, names: Iterable[str]) -> list[Served]:
    """Per request, the best score (cheapest among ties) among `names`' successful calls."""
    names = list(names)
    out = []
    for row in scenario.calls:
        ok = [row[n] for n in names if n in row and row[n].success]
        if not ok:
            out.append(Served(0.0, 0.0, None, True, None, [], None))
            continue
        best = max(c.score for c in ok)
        tied = [c for c in ok if c.score >= best - TIE_EPS]
        pick = min(tied, key=lambda c: c.cost_usd)
        out.append(served_from([pick]))
    return out


def run_label_hindsight(scenario: Scenario, names: Iterable[str]) -> Optional[list[Served]]:
    """Per request, the candidate of the best mean score over every request of its label (the
    trace's ``label``: a synthetic scenario's domain; cheapest mean cost among ties), known in
    hindsight: the most a router that tells requests apart only by their label can reach, knowing
    each candidate's true mean there. None when the trace has no labels."""
    labels = [r.label for r in scenario.trace.records]
    if not any(labels):
        return None
    names = list(names)
    totals: dict[tuple, list[float]] = {}  # (label, name) -> [score sum, cost sum, requests]
    for label, row in zip(labels, scenario.calls):
        for n in names:
            call = row.get(n)
            t = totals.setdefault((label, n), [0.0, 0.0, 0])
            if call is not None:
                t[0] += call.score if call.success else 0.0
                t[1] += call.cost_usd
            t[2] += 1
    pick = {label: max(names, key=lambda n: (totals[label, n][0] / totals[label, n][2],
                                             -totals[label, n][1] / totals[label, n][2]))
            for label in set(labels)}
    return [served_from([row[pick[label]]]) if pick[label] in row else Served(0.0, 0.0, None, True, None, [], None)
            for label, row in zip(labels, scenario.calls)]


# -- whole replays -------------------------------------------------------------------------------
@dataclass
class Baselines:
    candidates: list[str]  # the trace candidates the alias selects
    oracle_served: list[Served]
    oracle: Figures
    uniform: Figures
    fixed: dict[str, Figures]

    def as_dict(self) -> dict:
        return {
            "candidates": list(self.candidates),
            "fixed": {n: f.as_dict() for n, f in self.fixed.items()},
            "uniform_random": self.uniform.as_dict(),
            "oracle": self.oracle.as_dict(),
        }


def baselines(policy, alias: str, scenario: Scenario, *, seed: int = 0) -> Baselines:
    if alias not in policy.aliases:
        raise ReplayError(f"unknown alias {alias!r}; known: {', '.join(policy.aliases)}")
    names = scenario.selected(policy, alias)
    if not names:
        raise ReplayError(f"alias {alias!r} selects none of the trace's candidates ({', '.join(scenario.candidates)})")
    oracle_served = run_oracle(scenario, names)
    fixed = {}
    for n in names:
        served, missing = run_fixed(scenario, n)
        fixed[n] = figures(n, served, oracle_served, missing=missing)
    attempts = policy.aliases[alias].failover.attempts
    uniform = figures("uniform random", run_uniform(scenario, names, attempts=attempts, seed=seed), oracle_served)
    return Baselines(names, oracle_served, figures("oracle", oracle_served, oracle_served), uniform, fixed)


def first_requests(head: Baselines, runs: Mapping[str, Sequence[Served]]) -> dict:
    """Each run's first requests measured apart: `head` is the baselines of the scenario's first n
    requests (``baselines(policy, alias, scenario.head(n))``), `runs` each run's served requests
    (the first n are read). Per run: requests, mean score, cost per request and gain over mixing
    the fixed candidates on those same n requests (their own frontier); and the oracle's gain."""
    n = len(head.oracle_served)
    figs = [figures(name, list(served)[:n], head.oracle_served) for name, served in runs.items()]
    m = measures(head, figs)
    out = {"requests": n, "oracle_gain_over_mixing": m["oracle"]["gain_over_mixing"], "runs": {}}
    for f, r in zip(figs, m["runs"]):
        out["runs"][f.name] = {"mean_score": f.mean_score, "cost_per_request_usd": f.total_cost_usd / n if n else 0.0,
                               "gain_over_mixing": r["gain_over_mixing"]}
    return out


@dataclass
class ReplayResult:
    alias: str
    seed: int
    requests: int
    router: Figures
    baselines: Baselines
    strategy: str = ""
    # The router's first requests measured apart (cold start): runner.first_requests's dict.
    first: Optional[dict] = None
    # Each request's first choice (a scenario's event response reads them); not in as_dict.
    choices: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "alias": self.alias,
            "strategy": self.strategy,
            "seed": self.seed,
            "requests": self.requests,
            "router": self.router.as_dict(),
            "baselines": self.baselines.as_dict(),
            **({"first": self.first} if self.first is not None else {}),
        }


def replay(policy, alias: str, scenario: Scenario, *, seed: int = 0, progress: Optional[Progress] = None,
           name: str = "router", deployments_at: Optional[Callable[[int, dict], dict]] = None) -> ReplayResult:
    """The router and every baseline on one scenario (`deployments_at`: as run_router's)."""
    base = baselines(policy, alias, scenario, seed=seed)
    served = run_router(policy, alias, scenario, seed=seed, progress=progress, deployments_at=deployments_at)
    first = None
    if len(scenario) > FIRST_REQUESTS:
        first = first_requests(baselines(policy, alias, scenario.head(FIRST_REQUESTS), seed=seed), {name: served})
    return ReplayResult(alias, seed, len(scenario), figures(name, served, base.oracle_served), base,
                        strategy=policy.aliases[alias].strategy, first=first, choices=first_choices(served))


# -- overrides (--sweep) ---------------------------------------------------------------------------
TARGET = "budget.target_usd_per_1k_requests"
FLOOR = "budget.min_multiplier"
SWEEPABLE = ("cost_weight", "latency_weight", "exploration_c", "exploration",
             "failover.attempts", "sla.target_p95_ms", "budget.max_cost_per_request_usd",
             TARGET, FLOOR)
_INT_FIELDS = {"failover.attempts"}
_POSITIVE_FIELDS = {TARGET}  # must be above 0
_UNIT_FIELDS = {"exploration"}  # must lie in [0, 1]


def override_alias(policy, alias: str, param: str, value: float):
    """The policy with one parameter of one alias replaced. Frozen pydantic models: the alias
    (and the nested model holding a dotted parameter) are copied with model_copy(update=...)."""
    if param not in SWEEPABLE:
        raise ReplayError(f"cannot sweep {param!r}; sweepable: {', '.join(SWEEPABLE)}")
    if param == FLOOR:  # must lie in the schema's range, below 0
        lo, hi = range_of("Budget", "min_multiplier")
        if not lo <= value <= hi:  # NaN fails too
            raise ReplayError(f"{param}={value:g}: must lie between {lo:g} and {hi:g}")
    elif not math.isfinite(value) or value < 0:
        raise ReplayError(f"{param}={value:g}: must be a finite number >= 0")
    if param in _POSITIVE_FIELDS and value <= 0:
        raise ReplayError(f"{param}={value:g}: must be above 0")
    if param in _UNIT_FIELDS and value > 1:
        raise ReplayError(f"{param}={value:g}: must lie between 0 and 1")
    if param in _INT_FIELDS:
        if value != int(value) or value > 10:
            raise ReplayError(f"{param}={value:g}: must be a whole number from 0 to 10")
        value = int(value)
    ap = policy.aliases.get(alias)
    if ap is None:
        raise ReplayError(f"unknown alias {alias!r}; known: {', '.join(policy.aliases)}")
    if "." in param:
        outer, inner = param.split(".", 1)
        nested = getattr(ap, outer).model_copy(update={inner: value})
        new_alias = ap.model_copy(update={outer: nested})
    else:
        new_alias = ap.model_copy(update={param: value})
    return policy.model_copy(update={"aliases": {**policy.aliases, alias: new_alias}})


def with_strategy(policy, alias: str, strategy: str, **contextual):
    """The policy with one alias's strategy replaced (and its contextual settings, if given)."""
    ap = policy.aliases[alias]
    ap = ap.model_copy(update={"strategy": strategy, **(
        {"contextual": ap.contextual.model_copy(update=contextual)} if contextual else {})})
    return policy.model_copy(update={"aliases": {**policy.aliases, alias: ap}})


# Requests per window of the spend target's figures: the window the pacing record averages over.
SPEND_WINDOW = int(pacing.SPEND_WINDOW)


def spend_figures(costs: Sequence[float], multipliers: Sequence[float], target: float, top: float,
                  floor: float = 0.0) -> dict:
    """How a run held a spend target: its spend per 1,000 requests and deviation over the whole
    run, the windows of SPEND_WINDOW requests furthest above and below it (quality.spend_windows,
    each with the share of its requests after which the multiplier sat at its floor), and the
    shares of the requests after the first SPEND_WINDOW after which the multiplier sat at its
    `floor` (budget.min_multiplier; at 0, the target did not bind; below, the dearest choices the
    cost term can buy spend less than the target), ``at_floor``, and at its maximum `top`
    (the target is below what the cost term can buy); None where the run is too short."""
    spend = 1000.0 * sum(costs) / len(costs) if costs else 0.0
    later = multipliers[SPEND_WINDOW:]
    windows = spend_windows(costs, target, SPEND_WINDOW)
    for w in (windows or {}).values():  # where the target bound during the window itself
        inside = multipliers[w["start"]:w["start"] + SPEND_WINDOW]
        w["at_floor"] = sum(1 for m in inside if m <= floor) / len(inside) if inside else None
    return {"spend_per_1k": spend, "whole_deviation": (spend - target) / target,
            "windows": windows, "floor": floor,
            "at_floor": sum(1 for m in later if m <= floor) / len(later) if later else None,
            "at_max": sum(1 for m in later if m >= top) / len(later) if later else None,
            "final_multiplier": multipliers[-1] if multipliers else None}


@dataclass
class SweepPoint:
    value: float
    figures: Figures
    spend: Optional[dict] = None  # spend_figures, in a sweep of TARGET


@dataclass
class SweepResult:
    alias: str
    param: str
    seed: int
    requests: int
    points: list[SweepPoint]
    baselines: Baselines

    def as_dict(self) -> dict:
        return {
            "alias": self.alias,
            "param": self.param,
            "seed": self.seed,
            "requests": self.requests,
            "points": [{"value": p.value, **p.figures.as_dict(), **({"spend": p.spend} if p.spend else {})}
                       for p in self.points],
            "baselines": self.baselines.as_dict(),
        }


def sweep(policy, alias: str, scenario: Scenario, param: str, values: Sequence[float], *, seed: int = 0,
          progress: Optional[Callable[[int, float], Optional[Progress]]] = None,
          deployments_at: Optional[Callable[[int, dict], dict]] = None, full_feedback: bool = False) -> SweepResult:
    """Re-run the router with `param` set to each value; baselines once (they do not learn).
    `progress(i, value)` may return a per-run progress callback; `deployments_at`, `full_feedback`:
    as run_router's.
    A sweep of the spend target (TARGET), or of its multiplier's floor (FLOOR) under a target, also
    follows each run's multiplier: its ``spend``."""
    policies = [override_alias(policy, alias, param, v) for v in values]  # every value checked first
    base = baselines(policy, alias, scenario, seed=seed)
    points = []
    for i, (v, pol) in enumerate(zip(values, policies)):
        cb = progress(i, v) if progress is not None else None
        multipliers: list[float] = []
        rule = pacing.rule_of(pol.aliases[alias].budget)
        paced = rule is not None and param in (TARGET, FLOOR)  # the spend against the target, per point
        observe = ((lambda _, engine: multipliers.append(pacing.multiplier_of(engine.store.pace(alias), rule)))
                   if paced else None)
        served = run_router(pol, alias, scenario, seed=seed, progress=cb, deployments_at=deployments_at, observe=observe,
                            full_feedback=full_feedback)
        spend = (spend_figures([s.cost_usd for s in served], multipliers, rule.target_usd_per_1k, rule.max_multiplier,
                               rule.min_multiplier) if paced else None)
        points.append(SweepPoint(v, figures(f"{param}={v:g}", served, base.oracle_served), spend))
    return SweepResult(alias, param, seed, len(scenario), points, base)


def parse_sweep(spec: str) -> tuple[str, list[float]]:
    """'cost_weight=0,0.05,0.1' -> ('cost_weight', [0.0, 0.05, 0.1]). Raises ReplayError."""
    if "=" not in spec:
        raise ReplayError(f"--sweep {spec!r}: expected PARAM=V1,V2,... (e.g. cost_weight=0,0.05,0.1)")
    param, _, rest = spec.partition("=")
    param = param.strip()
    if param not in SWEEPABLE:
        raise ReplayError(f"--sweep: cannot sweep {param!r}; sweepable: {', '.join(SWEEPABLE)}")
    values = []
    for raw in rest.split(","):
        raw = raw.strip()
        if not raw:
            continue
        try:
            v = float(raw)
        except ValueError:
            raise ReplayError(f"--sweep: {raw!r} is not a number") from None
        values.append(v)
    if not values:
        raise ReplayError(f"--sweep {spec!r}: give at least one value")
    return param, values
