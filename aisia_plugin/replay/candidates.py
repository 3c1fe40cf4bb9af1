"""The replay candidates file (``--deployments FILE.yaml``): facts about each trace candidate.

    candidates:
      groq-llama-3.1-8b:
        provider: groq                # default: the name's provider prefix
        model: groq/llama-3.1-8b      # default: the name
        input_cost_per_1m: 0.05       # USD per 1M input tokens (default: the policy's costs)
        output_cost_per_1m: 0.08      # default: input_cost_per_1m
        tier: free                    # ultra | pro | standard | free
        local: false
        tags: [fast]
        specialities: {coding: null}  # domain -> model served for it (null: this model)
        latency:                      # used where a recorded outcome has no latency_ms
          distribution: lognormal     # fixed | normal | lognormal | uniform
          mean_ms: 400                # fixed, normal, lognormal
          stddev_ms: 120              # normal, lognormal
          min_ms: 100                 # uniform
          max_ms: 900                 # uniform
          drift_ms_per_request: 0.5   # added per request index (a slowly degrading provider)
          outages:                    # request index windows [start, end) in which every call fails
            - {start: 100, end: 160, status_code: 503, latency_ms: 30000}

Outage windows apply to every call in them (recorded latency or not): they turn a trace into a
scenario for the circuit breaker and failover."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from ..decision import Deployment
from ..deployments import annotation_for, infer_local, provider_of, resolve_costs

TIERS = ("ultra", "pro", "standard", "free")
DISTRIBUTIONS = ("fixed", "normal", "lognormal", "uniform")
SPEC_FIELDS = ("provider", "model", "input_cost_per_1m", "output_cost_per_1m", "cost_per_1m", "tier", "local",
               "tags", "specialities", "latency")
LATENCY_FIELDS = ("distribution", "mean_ms", "stddev_ms", "min_ms", "max_ms", "drift_ms_per_request", "outages")
OUTAGE_FIELDS = ("start", "end", "status_code", "latency_ms", "error")


class CandidatesError(ValueError):
    """A candidates file that cannot be used; str() lists file:line: message lines."""

    def __init__(self, messages: list[str]):
        self.messages = list(messages)
        super().__init__("\n".join(self.messages))


@dataclass(frozen=True)
class Outage:
    start: int  # first request index
    end: int  # first request index after the window
    status_code: int = 503
    latency_ms: Optional[float] = None
    error: str = "simulated outage"

    def covers(self, index: int) -> bool:
        return self.start <= index < self.end


@dataclass(frozen=True)
class LatencyModel:
    distribution: str = "fixed"
    mean_ms: Optional[float] = None
    stddev_ms: float = 0.0
    min_ms: Optional[float] = None
    max_ms: Optional[float] = None
    drift_ms_per_request: float = 0.0
    outages: tuple[Outage, ...] = ()

    @property
    def samples(self) -> bool:
        """Whether the model can produce a latency at all (it may hold only outages)."""
        if self.distribution == "uniform":
            return self.min_ms is not None and self.max_ms is not None
        return self.mean_ms is not None

    def sample(self, index: int, rng: random.Random) -> Optional[float]:
        """A latency in ms for the call at request `index` (None when the model gives none)."""
        if not self.samples:
            return None
        d = self.distribution
        if d == "fixed":
            base = self.mean_ms
        elif d == "normal":
            base = rng.gauss(self.mean_ms, self.stddev_ms)
        elif d == "lognormal":
            m, s = self.mean_ms, self.stddev_ms
            if m <= 0 or s <= 0:
                base = m
            else:
                sigma2 = math.log(1.0 + (s * s) / (m * m))
                base = rng.lognormvariate(math.log(m) - sigma2 / 2.0, math.sqrt(sigma2))
        else:  # uniform
            base = rng.uniform(self.min_ms, self.max_ms)
        return max(1.0, base + self.drift_ms_per_request * index)

    def outage_at(self, index: int) -> Optional[Outage]:
        for o in self.outages:
            if o.covers(index):
                return o
        return None


@dataclass(frozen=True)
class CandidateSpec:
    provider: Optional[str] = None
    model: Optional[str] = None
    input_cost_per_1m: Optional[float] = None
    output_cost_per_1m: Optional[float] = None
    tier: Optional[str] = None
    local: Optional[bool] = None
    tags: tuple[str, ...] = ()
    specialities: Optional[Mapping[str, Optional[str]]] = None
    latency: LatencyModel = field(default_factory=LatencyModel)

    def to_deployment(self, name: str, policy) -> Deployment:
        """The Deployment the engine routes to for this candidate. What the spec leaves out comes
        from the policy: its deployment annotations, then its costs table (resolve_costs)."""
        model = self.model or name
        ann = annotation_for(policy, name, name, model)
        provider = self.provider or (ann.provider if ann is not None and ann.provider else None) or provider_of(name)
        if self.input_cost_per_1m is not None:
            in_cost = float(self.input_cost_per_1m)
            out_cost = float(self.output_cost_per_1m if self.output_cost_per_1m is not None else in_cost)
        else:
            annotated = (ann.input_cost_per_1m, ann.output_cost_per_1m) if ann is not None else (None, None)
            in_cost, out_cost = resolve_costs(policy, model, provider, None, annotated)
            if self.output_cost_per_1m is not None:
                out_cost = float(self.output_cost_per_1m)
        tier = self.tier if self.tier is not None else (ann.tier if ann is not None else None)
        local = self.local
        if local is None:
            local = ann.local if ann is not None and ann.local is not None else infer_local(model, {})
        tags = tuple(dict.fromkeys([*self.tags, *(ann.tags if ann is not None else [])]))
        if self.specialities is not None:
            specialities = dict(self.specialities)
        else:
            specialities = dict(ann.specialities) if ann is not None else {}
        return Deployment(id=name, model_name=name, model=model, provider=provider, tier=tier, local=local, tags=tags,
                          input_cost_per_1m=in_cost, output_cost_per_1m=out_cost, specialities=specialities)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_candidates(data: Any, where) -> tuple[dict[str, CandidateSpec], list[str]]:
    """Check the decoded document; `where(path)` gives "file:line" for a key path."""
    problems: list[str] = []

    def bad(path, message):
        problems.append(f"{where(path)}: {'.'.join(map(str, path)) or '<document>'}: {message}")

    if not isinstance(data, dict) or "candidates" not in data:
        bad((), "expected a mapping with a 'candidates' key")
        return {}, problems
    extra = sorted(set(data) - {"candidates"})
    if extra:
        bad((extra[0],), f"unknown top-level key(s) {', '.join(extra)}; only 'candidates' is known")
    raw_all = data["candidates"]
    if raw_all is None:
        return {}, problems
    if not isinstance(raw_all, dict):
        bad(("candidates",), "must map candidate names to their facts")
        return {}, problems
    specs: dict[str, CandidateSpec] = {}
    for name, raw in raw_all.items():
        base = ("candidates", name)
        if raw is None:
            specs[name] = CandidateSpec()
            continue
        if not isinstance(raw, dict):
            bad(base, "must be a mapping")
            continue
        n_before = len(problems)
        for k in sorted(set(raw) - set(SPEC_FIELDS)):
            bad(base + (k,), f"unknown field; known: {', '.join(SPEC_FIELDS)}")
        for k in ("provider", "model"):
            if raw.get(k) is not None and not isinstance(raw[k], str):
                bad(base + (k,), "must be a string")
        for k in ("input_cost_per_1m", "output_cost_per_1m", "cost_per_1m"):
            if raw.get(k) is not None and (not _num(raw[k]) or raw[k] < 0):
                bad(base + (k,), "must be a number >= 0 (USD per 1M tokens)")
        if raw.get("tier") is not None and raw["tier"] not in TIERS:
            bad(base + ("tier",), f"must be one of {', '.join(TIERS)}")
        if raw.get("local") is not None and not isinstance(raw["local"], bool):
            bad(base + ("local",), "must be true or false")
        tags = raw.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            bad(base + ("tags",), "must be a list of strings")
            tags = []
        specs_raw = raw.get("specialities")
        if specs_raw is not None and (not isinstance(specs_raw, dict)
                                      or not all(v is None or isinstance(v, str) for v in specs_raw.values())):
            bad(base + ("specialities",), "must map domains to a model (or null for this model)")
        latency = _parse_latency(raw.get("latency"), base + ("latency",), bad)
        if len(problems) > n_before:
            continue
        in_cost = raw.get("input_cost_per_1m", raw.get("cost_per_1m"))
        out_cost = raw.get("output_cost_per_1m", raw.get("cost_per_1m"))
        specs[name] = CandidateSpec(
            provider=raw.get("provider"), model=raw.get("model"),
            input_cost_per_1m=None if in_cost is None else float(in_cost),
            output_cost_per_1m=None if out_cost is None else float(out_cost),
            tier=raw.get("tier"), local=raw.get("local"), tags=tuple(tags),
            specialities=dict(specs_raw) if isinstance(specs_raw, dict) else None,
            latency=latency or LatencyModel(),
        )
    return specs, problems


def _parse_latency(raw, path, bad) -> Optional[LatencyModel]:
    if raw is None:
        return None
    if _num(raw):  # shorthand: a fixed latency
        return LatencyModel("fixed", mean_ms=float(raw)) if raw >= 0 else bad(path, "must be >= 0 ms")
    if not isinstance(raw, dict):
        bad(path, "must be a mapping (distribution, mean_ms, ...) or a number of ms")
        return None
    ok = True
    for k in sorted(set(raw) - set(LATENCY_FIELDS)):
        bad(path + (k,), f"unknown field; known: {', '.join(LATENCY_FIELDS)}")
        ok = False
    dist = raw.get("distribution", "fixed")
    if dist not in DISTRIBUTIONS:
        bad(path + ("distribution",), f"must be one of {', '.join(DISTRIBUTIONS)}")
        return None
    for k in ("mean_ms", "stddev_ms", "min_ms", "max_ms"):
        if raw.get(k) is not None and (not _num(raw[k]) or raw[k] < 0):
            bad(path + (k,), "must be a number >= 0 (milliseconds)")
            ok = False
    drift = raw.get("drift_ms_per_request", 0.0)
    if not _num(drift):
        bad(path + ("drift_ms_per_request",), "must be a number (ms added per request)")
        ok = False
    if not ok:
        return None
    if dist == "uniform":
        lo, hi = raw.get("min_ms"), raw.get("max_ms")
        if (lo is None) != (hi is None):
            bad(path, "a uniform distribution needs both min_ms and max_ms")
            return None
        if lo is not None and lo > hi:
            bad(path + ("min_ms",), "must not exceed max_ms")
            return None
    elif dist in ("normal", "lognormal") and raw.get("mean_ms") is None and raw.get("stddev_ms") is not None:
        bad(path, f"a {dist} distribution needs mean_ms")
        return None
    outages = _parse_outages(raw.get("outages") or [], path + ("outages",), bad)
    if outages is None:
        return None
    return LatencyModel(
        distribution=dist,
        mean_ms=None if raw.get("mean_ms") is None else float(raw["mean_ms"]),
        stddev_ms=float(raw.get("stddev_ms") or 0.0),
        min_ms=None if raw.get("min_ms") is None else float(raw["min_ms"]),
        max_ms=None if raw.get("max_ms") is None else float(raw["max_ms"]),
        drift_ms_per_request=float(drift),
        outages=outages,
    )


def _parse_outages(raw_out, path, bad) -> Optional[tuple]:
    """The outage windows at `path`; None when any of them is wrong (each problem reported)."""
    if not isinstance(raw_out, list):
        bad(path, "must be a list of windows {start, end}")
        return None
    parsed = [_parse_outage(o, path + (i,), bad) for i, o in enumerate(raw_out)]
    return None if any(o is None for o in parsed) else tuple(parsed)


def _parse_outage(o, op, bad) -> Optional[Outage]:
    """One outage window: {start, end[, status_code, latency_ms, error]} or [start, end]."""
    if isinstance(o, list) and len(o) == 2:
        o = {"start": o[0], "end": o[1]}
    if not isinstance(o, dict):
        bad(op, "must be {start, end} (request indices) or [start, end]")
        return None
    unknown = sorted(set(o) - set(OUTAGE_FIELDS))
    for k in unknown:
        bad(op + (k,), f"unknown field; known: {', '.join(OUTAGE_FIELDS)}")
    s, e = o.get("start"), o.get("end")
    if not (_num(s) and _num(e) and float(s) == int(s) and float(e) == int(e) and 0 <= s < e):
        bad(op, "start and end must be request indices with 0 <= start < end")
        return None
    sc = o.get("status_code", 503)
    if not (_num(sc) and float(sc) == int(sc) and 100 <= sc <= 599):
        bad(op + ("status_code",), "must be an HTTP status (100-599)")
        return None
    lat = o.get("latency_ms")
    if lat is not None and (not _num(lat) or lat < 0):
        bad(op + ("latency_ms",), "must be a number >= 0")
        return None
    err = o.get("error", "simulated outage")
    if not isinstance(err, str):
        bad(op + ("error",), "must be a string")
        return None
    return None if unknown else Outage(int(s), int(e), int(sc), None if lat is None else float(lat), err)


def load_candidates(path, *, trace_names=None, policy=None) -> dict[str, CandidateSpec]:
    """Read a candidates file. Raises CandidatesError (file:line: messages) or OSError.

    With `trace_names` (the trace's candidates), a name that is not one of them is an error: its
    facts would be ignored silently and a typo would change the figures. With `policy`, a
    speciality naming a domain the policy lacks is one, as `aisia validate` says of a policy."""
    from ..policy.yamlpos import load_yaml_with_positions, position_of

    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    data, locations, issues = load_yaml_with_positions(text, str(path))
    if issues:
        raise CandidatesError([f"{i.file}:{i.line}: {i.message}" for i in issues])

    def where(p):
        pos = position_of(locations, tuple(p), key=True)
        return f"{path}:{pos.line if pos else 0}"

    specs, problems = parse_candidates(data, where)
    if not problems:
        problems = _cross_check(specs, where, trace_names, policy)
    if problems:
        raise CandidatesError(problems)
    return specs


def _cross_check(specs, where, trace_names, policy) -> list[str]:
    import difflib

    out = []
    if trace_names is not None:
        known = list(trace_names)
        for name in specs:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                hint = f"; did you mean '{close[0]}'?" if close else f"; the trace's candidates: {', '.join(known)}"
                out.append(f"{where(('candidates', name))}: candidates.{name}: not a candidate of the trace{hint}")
    if policy is not None:
        domains = list(policy.domains.definitions)
        for name, spec in specs.items():
            for domain in spec.specialities or {}:
                if domain not in domains:
                    close = difflib.get_close_matches(domain, domains, n=1, cutoff=0.5)
                    hint = f"; did you mean '{close[0]}'?" if close else f"; the policy's domains: {', '.join(domains)}"
                    out.append(f"{where(('candidates', name, 'specialities', domain))}: "
                               f"candidates.{name}.specialities.{domain}: unknown domain '{domain}'{hint}")
    return out


def write_candidates(path, cands: Mapping[str, Mapping], *, source: str) -> None:
    """A candidates file with each candidate's provider and prices (``cands``: name -> those
    three fields), headed by a comment naming what generated it."""
    lines = [f"# generated by {source}", "candidates:"]
    for name, c in cands.items():
        lines += [f"  {name}:", *(f"    {k}: {c[k]}" for k in ("provider", "input_cost_per_1m", "output_cost_per_1m"))]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def price_specs(cands: Mapping[str, Mapping]) -> dict[str, CandidateSpec]:
    """The specs of candidates known by provider and prices only (what write_candidates writes)."""
    return {n: CandidateSpec(provider=c["provider"], input_cost_per_1m=c["input_cost_per_1m"],
                             output_cost_per_1m=c["output_cost_per_1m"]) for n, c in cands.items()}
