"""Off-policy evaluation on a decision log: what would another policy have earned on the traffic
the logging policy saw?

Each logged attempt is an event (context, chosen deployment, the probability the logging policy
gave it, observed reward). The reward of an answer that quality evidence spoke about after it was
served (a conversation signal, a judge's grade, feedback: the log's ``evidence`` lines) is that
evidence, the weighted mean of its values; otherwise it is the reward logged with the outcome (a
success's quality estimate then, which says nothing of that answer). For a target policy's
probabilities pi(a | x) over the same candidates:

- inverse propensity (IPS): mean of w * r with w = pi(a_logged | x) / p_logged;
- self-normalised IPS: sum(w * r) / sum(w) (a ratio estimate, its interval by the delta method);
- doubly robust (DR): mean of  sum_a pi(a | x) q(x, a) + w * (r - q(x, a_logged)),  where q is a
  reward model fitted on the log (mean reward per domain and deployment, shrunk to the
  deployment's mean), cross-fitted on two folds so an event's own reward never fits its q.

Each estimate comes with a normal 95 % interval (1.96 standard errors). Unbiasedness needs every
action the target can take to have a positive logged probability where the target takes it: an
event with a logged probability of 0 or none is skipped and counted. Pure functions: reading the
log and deciding for the target policy are the caller's (aisia_plugin/commands/replay.py)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Optional, Sequence

from ..numbers import clamp01

Z95 = 1.959963984540054


@dataclass(frozen=True)
class LoggedEvent:
    request_id: str
    alias: str
    domain: Optional[str]
    candidates: tuple[str, ...]
    chosen: str
    propensity: float
    reward: float
    features: Mapping[str, object] = field(default_factory=dict)
    attempt: int = 0
    # Each candidate's (input, output) USD per 1M tokens as the proxy priced it (decision_log.py).
    prices: Mapping[str, tuple] = field(default_factory=dict)
    # The evidence the reward is (the pieces' count; 0: the reward is the one logged with the outcome).
    evidence: int = 0
    # Whether the call answered (the outcome line's `success`): a failed call is the deployment's
    # health; an answer valued 0 by its evidence is its quality, never a failure.
    success: bool = True
    ts: float = 0.0  # when it was decided (the decision line's `ts`)


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float
    se: float

    def as_dict(self) -> dict:
        return {"value": self.value, "ci95": [self.low, self.high], "se": self.se}


def _mean_se(xs: Sequence[float]) -> tuple[float, float]:
    n = len(xs)
    if n == 0:
        return math.nan, math.nan
    m = math.fsum(xs) / n
    if n == 1:
        return m, math.inf
    var = math.fsum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def _estimate(m: float, se: float) -> Estimate:
    return Estimate(m, m - Z95 * se, m + Z95 * se, se)


class RewardModel:
    """q(domain, deployment): the mean logged reward per (domain, deployment), shrunk towards the
    deployment's mean with ``prior`` pseudo-observations, and that towards the global mean."""

    def __init__(self, events: Iterable[LoggedEvent], prior: float = 5.0):
        by_pair: dict = defaultdict(lambda: [0.0, 0])
        by_dep: dict = defaultdict(lambda: [0.0, 0])
        total, n = 0.0, 0
        for e in events:
            for table, key in ((by_pair, (e.domain, e.chosen)), (by_dep, e.chosen)):
                table[key][0] += e.reward
                table[key][1] += 1
            total += e.reward
            n += 1
        self.prior = prior
        self.global_mean = total / n if n else 0.0
        self.by_dep = {k: (s + prior * self.global_mean) / (c + prior) for k, (s, c) in by_dep.items()}
        self.by_pair = {k: (s + prior * self.by_dep[k[1]]) / (c + prior) for k, (s, c) in by_pair.items()}

    def __call__(self, domain: Optional[str], deployment: str) -> float:
        hit = self.by_pair.get((domain, deployment))
        if hit is not None:
            return hit
        return self.by_dep.get(deployment, self.global_mean)


TargetPolicy = Callable[[LoggedEvent], Mapping[str, float]]


def evaluate(events: Sequence[LoggedEvent], target: TargetPolicy) -> dict:
    """The estimates of the target's mean reward per event, next to the logging policy's own."""
    usable = [e for e in events if e.propensity is not None and e.propensity > 0 and math.isfinite(e.propensity)]
    skipped = len(events) - len(usable)
    # The target is asked in log order: a learning target (engine_target) replays the log's
    # outcomes as it goes.
    pis = [target(e) for e in usable]
    folds = ((0, 2), (1, 2))
    models = (RewardModel(usable[1::2]), RewardModel(usable[0::2]))  # each fold's q is fitted on the other
    ips_terms, weights, dr_terms, agree = [], [], [], 0
    for k, (start, step) in enumerate(folds):
        q = models[k]
        for i in range(start, len(usable), step):
            e, pi = usable[i], pis[i]
            w = float(pi.get(e.chosen, 0.0)) / e.propensity
            if pi.get(e.chosen, 0.0) > 0:
                agree += 1
            ips_terms.append(w * e.reward)
            weights.append(w)
            direct = math.fsum(p * q(e.domain, a) for a, p in pi.items())
            dr_terms.append(direct + w * (e.reward - q(e.domain, e.chosen)))
    n = len(usable)
    logged_m, logged_se = _mean_se([e.reward for e in usable])
    ips_m, ips_se = _mean_se(ips_terms)
    dr_m, dr_se = _mean_se(dr_terms)
    sw = math.fsum(weights)
    if n and sw > 0:
        snips = math.fsum(ips_terms) / sw
        wbar = sw / n
        resid = [(t - snips * w) / wbar for t, w in zip(ips_terms, weights)]
        _, snips_se = _mean_se(resid)
    else:
        snips, snips_se = math.nan, math.nan
    return {
        "events": n,
        "skipped_no_propensity": skipped,
        "valued_by_evidence": sum(1 for e in usable if e.evidence),
        "agreement": agree / n if n else math.nan,
        "logged": _estimate(logged_m, logged_se).as_dict(),
        "ips": _estimate(ips_m, ips_se).as_dict(),
        "snips": _estimate(snips, snips_se).as_dict(),
        "dr": _estimate(dr_m, dr_se).as_dict(),
        "effective_sample_size": (sw * sw / math.fsum(w * w for w in weights)) if weights and sw > 0 else 0.0,
    }


class LogError(ValueError):
    pass


# The record types of a decision log (decision_log.py); those the evaluation does not read are skipped.
RECORD_TYPES = ("decision", "outcome", "evidence", "local_first")


def read_log(lines: Iterable[str], source: str = "<log>", evidence: bool = True) -> list[LoggedEvent]:
    """Events from a decision log (aisia_plugin/decision_log.py): each decision line joined with
    the outcome line of the same request id and attempt; with `evidence`, a successful answer's
    reward is the weighted mean of the evidence lines about it (same request id and deployment),
    when there are any. A line that is not JSON, or no decision-log record, or a field of the wrong
    type, is an error naming the file and line; decisions with no outcome (still in flight, or
    refused) are left out."""
    return read_logs([(source, lines)], evidence)


def read_logs(sources: Sequence[tuple[str, Iterable[str]]], evidence: bool = True) -> list[LoggedEvent]:
    """``read_log`` over several files read as one log, (name, lines) each: a proxy's workers
    each write their own, and the evidence about an answer one worker served is often written by
    another (the next turn, the feedback, reached it). With more than one file the events are in
    the order they were decided (the decision lines' times)."""
    decisions: dict = {}
    events: list[LoggedEvent] = []
    spoken: dict = defaultdict(lambda: [0.0, 0.0, 0])  # (request id, deployment) -> [sum w*v, sum w, count]
    for source, lines in sources:
        for lineno, line in enumerate(lines, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LogError(f"{source}:{lineno}: not JSON ({exc.msg})") from None
            if not isinstance(rec, dict) or rec.get("type") not in RECORD_TYPES:
                raise LogError(f"{source}:{lineno}: not a decision-log record (no 'type': {', '.join(RECORD_TYPES)})")
            if rec["type"] == "evidence":
                value, weight = rec.get("value"), rec.get("weight")
                if _finite_number(value) and _finite_number(weight) and 0.0 <= value <= 1.0 and weight > 0.0:
                    acc = spoken[(str(rec.get("request_id")), str(rec.get("deployment")))]
                    acc[0] += weight * value
                    acc[1] += weight
                    acc[2] += 1
                continue
            if rec["type"] not in ("decision", "outcome"):
                continue
            problem = _odd_field(rec)
            if problem is not None:
                raise LogError(f"{source}:{lineno}: {rec['type']} record: {problem}")
            key = (str(rec.get("request_id")), int(rec.get("attempt") or 0))
            if rec["type"] == "decision":
                if rec.get("deployment") is not None and not rec.get("refused"):
                    decisions[key] = rec
                continue
            dec = decisions.pop(key, None)
            reward = rec.get("reward")
            if dec is None or dec.get("deployment") != rec.get("deployment") or not _finite_number(reward):
                continue
            prob = dec.get("probability")
            # Old logs hold the task type beside the decision only.
            features = dec.get("features") or ({"task_type": dec["task_type"]} if dec.get("task_type") else {})
            ts = dec.get("ts")
            events.append(LoggedEvent(
                request_id=key[0], alias=str(dec.get("alias") or ""), domain=dec.get("domain"),
                candidates=tuple(dec.get("candidates") or (dec["deployment"],)), chosen=dec["deployment"],
                propensity=float(prob) if _finite_number(prob) else math.nan, reward=float(reward),
                features=features, attempt=key[1], prices=_prices(dec.get("prices")),
                success=rec.get("success") is True, ts=float(ts) if _finite_number(ts) else 0.0))
    if len(sources) > 1:
        events.sort(key=lambda e: e.ts)
    if not evidence or not spoken:
        return events
    valued = []
    for e in events:
        acc = spoken.get((e.request_id, e.chosen)) if e.success else None  # (evidence is about an answer)
        if acc is not None:
            e = replace(e, reward=clamp01(acc[0] / acc[1]), evidence=acc[2])
        valued.append(e)
    return valued


# A decision line's features the replay decides with, by kind.
_TEXT_FEATURES = ("task_type", "length_bucket", "modality")
_FLAG_FEATURES = ("has_code", "has_tools")


def _odd_field(rec: dict) -> Optional[str]:
    """What is wrong with a decision or outcome line's fields the evaluation reads (None: nothing)."""
    attempt = rec.get("attempt")
    if attempt is not None and not (_finite_number(attempt) and 0 <= attempt < 1e6 and attempt == int(attempt)):
        return f"attempt: {attempt!r} is not a count"
    for name in ("request_id", "deployment", "alias", "domain"):
        v = rec.get(name)
        if v is not None and not isinstance(v, (str, int)):
            return f"{name}: {v!r} is not a string"
    candidates = rec.get("candidates")
    if candidates is not None and not (isinstance(candidates, list) and all(isinstance(c, str) for c in candidates)):
        return f"candidates: {candidates!r} is not a list of deployment ids"
    features = rec.get("features")
    if features is None:
        return None
    if not isinstance(features, dict):
        return f"features: {features!r} is not an object"
    for name in _TEXT_FEATURES:
        if features.get(name) is not None and not isinstance(features[name], str):
            return f"features.{name}: {features[name]!r} is not a string"
    for name in _FLAG_FEATURES:
        if features.get(name) is not None and not isinstance(features[name], bool):
            return f"features.{name}: {features[name]!r} is not true or false"
    tokens = features.get("input_tokens")
    if tokens is not None and not (_finite_number(tokens) and 0 <= tokens < 1e12):
        return f"features.input_tokens: {tokens!r} is not a count"
    return None


def _finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _prices(raw) -> dict:
    """A decision line's prices, each a pair of finite numbers >= 0 (anything else left out)."""
    out = {}
    for dep, pair in (raw or {}).items() if isinstance(raw, dict) else ():
        if (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                        for v in pair)):
            out[str(dep)] = (float(pair[0]), float(pair[1]))
    return out


class _LoggedDomain:
    """Stands in for the engine's domain detector: the log holds no prompt text, only the domain
    the router detected for it, which the target policy is then given."""

    __slots__ = ("domain",)

    def __init__(self):
        self.domain = None

    def detect(self, text, present=None):
        return self.domain


def engine_target(policy, deployments, *, alias: Optional[str] = None, seed: int = 0) -> TargetPolicy:
    """The target policy as the engine would run it: for each logged event (in log order), the
    decision of `policy` among the event's candidates for the logged domain (or the given
    alias), on the state learned from the log's outcomes so far; then the event's outcome is
    recorded, as the shared store would have. Deterministic strategies give probability 1 to
    their choice (epsilon-exploring ones their stated probability, the rest spread evenly);
    Thompson sampling estimates it by sampling."""
    import random

    from ..decision import learned_domain
    from ..engine import Engine
    from ..features import RequestFeatures
    from ..outcome import Outcome

    by_id = {d.id: d for d in deployments}
    clock = [0.0]
    engine = Engine(policy, clock=lambda: clock[0], rng=random.Random(seed))
    detector = _LoggedDomain()
    engine.detector = detector

    def target(e: LoggedEvent) -> Mapping[str, float]:
        name = alias or e.alias
        pool = [by_id[c] for c in e.candidates if c in by_id]
        if name not in policy.aliases or not pool:
            return {}
        detector.domain = e.domain
        clock[0] += 1.0
        f = e.features
        feats = RequestFeatures(task_type=str(f.get("task_type") or "default"), has_code=bool(f.get("has_code")),
                                length_bucket=str(f.get("length_bucket") or "short"),
                                modality=str(f.get("modality") or "text"), input_tokens=int(f.get("input_tokens") or 0),
                                has_tools=bool(f.get("has_tools")), estimate_probability=True)
        d = engine.decide(name, [], pool, features=feats)
        out: dict = {}
        if d.deployment_id is not None:
            p = 1.0 if d.probability is None else clamp01(d.probability)
            out[d.deployment_id] = p
            rest = [c.id for c in pool if c.id != d.deployment_id]
            for c in rest:
                out[c] = (1.0 - p) / len(rest)
        # As the proxy learns: a failed call its health; the evidence about an answer its quality,
        # recorded under the domain the policy reads the request's quality in (learned_domain: for
        # a question of no domain, the contextual strategy's `_other` record), never a failure; a
        # success nobody spoke about no quality (its logged reward is the estimate of its day).
        graded = e.success and e.evidence > 0
        engine.record(name, Outcome(e.chosen, success=e.success, quality=e.reward if graded else None),
                      domain=e.domain, evidence_domain=learned_domain(d))
        return out

    return target
