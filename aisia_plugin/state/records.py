"""The one reader of stored records (a snapshot file's JSON, a Redis hash's strings), and their
writer.

Lenient by design: whatever a hand-edited file or a corrupted key holds, the record read is one
the arithmetic of a decision can use. A field that is missing, of the wrong kind (a boolean, a
list, an unparsable string), not finite, or out of its range takes the field's default; a few
values are clamped instead, where the nearest valid value is clearly what was meant (a reward
total above the pulls it came from, failures above the pulls). Breaker states are read
case-insensitively, or as their Prometheus codes (0, 1, 2).

Bounds: a count above ``MAX_COUNT`` or a time above ``MAX_TIME`` (seconds since the epoch, the
year 5138) is no real history: a breaker whose last failure is dated 1e300 would stay OPEN
forever, a rate limit ``until`` 1e300 would bench a deployment for good. A stored arm's pulls are
0 or at least 1 (every update adds one whole observation to the decayed count): pulls between
them (1e-300 would give UCB1 an exploration term near 1e150) are no record this package wrote.

Given a ``notes`` list, a reader appends one line per value it replaced or clamped
("pulls: 1e-300 is not 0 or a count of at least 1: read as 0.0"); the caller names the record
and the file (a store's edge: ``MemoryState.load`` says "bandit 'a-1': ...")."""

from __future__ import annotations

from typing import Any, Mapping

from ..bandit import ArmStats
from ..breaker import CLOSED, PROMETHEUS_CODE, BreakerState
from ..pacing import MAX_CARRY, PACE_FIELDS, PaceState
from ..quality import QUALITY_FIELDS, QualityStats
from ..schema_defaults import range_of

MAX_COUNT = 1e15
MAX_TIME = 1e11
MAX_LATENCY_S = 1e6

_STATE_BY_CODE = {v: k for k, v in PROMETHEUS_CODE.items()}

ARM_FIELDS = ("pulls", "total_reward", "alpha", "beta", "avg_latency", "latency_var", "failures", "count", "tick")
BREAKER_FIELDS = ("state", "failures", "last_failure_time", "success_count", "probes_in_flight",
                  "rate_limited_until", "rate_limits", "probe_reserved_at")


def _text(v: Any) -> Any:
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else v


def number(v: Any, lo: float, hi: float) -> float | None:
    """``v`` as a finite float within [lo, hi], else None. Strings and bytes (a Redis reply) are
    parsed; booleans are not numbers."""
    if type(v) is not float:
        if v is None or isinstance(v, bool):
            return None
        try:
            v = float(v)  # int, str, bytes
        except (TypeError, ValueError, OverflowError):
            return None
    return v if lo <= v <= hi else None  # NaN fails both comparisons, infinities one


def _mapping(raw: Any) -> dict[str, Any] | None:
    if type(raw) is dict and all(type(k) is str for k in raw):
        return raw  # already what the readers look up (a snapshot's JSON, a decoded Redis reply)
    if not isinstance(raw, Mapping):
        return None
    try:
        return {str(_text(k)): v for k, v in raw.items()}
    except Exception:  # a mapping whose items() breaks is no record
        return None


def breaker_state_name(v: Any) -> str:
    """A stored breaker state: CLOSED, HALF_OPEN or OPEN in any case ("open", "half-open"), or a
    Prometheus code; anything else reads as CLOSED (failing open: routing to a deployment beats
    benching it on a corrupt record)."""
    v = _text(v)
    if isinstance(v, str):
        t = v.strip().upper().replace("-", "_")
        if t in PROMETHEUS_CODE:
            return t
        v = number(t, 0, 2)
    elif isinstance(v, bool):
        return CLOSED
    if isinstance(v, (int, float)) and float(v).is_integer():
        return _STATE_BY_CODE.get(int(v), CLOSED)
    return CLOSED


def _note(notes: list | None, name: str, raw: Any, why: str, got: Any) -> None:
    if notes is not None:
        notes.append(f"{name}: {raw!r} {why}: read as {got!r}")


def _fields(raw: Any, notes: list | None, instead: str) -> dict[str, Any] | None:
    """A stored record's fields; None (noted, unless there is no record) when it is no mapping."""
    d = _mapping(raw)
    if d is None and raw is not None:
        _note(notes, "record", raw, "is not a mapping of fields", instead)
    return d


def read_arm(raw: Any, notes: list | None = None) -> ArmStats:
    """An arm record from a stored mapping (see the module docstring for the rules)."""
    d = _fields(raw, notes, "a fresh record")
    base = ArmStats()
    if d is None:
        return base

    def get(name, lo, hi):
        r = d.get(name)
        v = number(r, lo, hi)
        if v is None:
            v = getattr(base, name)
            if r is not None:
                _note(notes, name, _text(r), f"is not a number in [{lo:g}, {hi:g}]", v)
        return v

    pulls = get("pulls", 0.0, MAX_COUNT)
    if 0.0 < pulls < 1.0:
        _note(notes, "pulls", pulls, "is not 0 or a count of at least 1", 0.0)
        pulls = 0.0

    def at_most_pulls(name):
        # Rewards lie in [0, 1] and failures count calls: neither sum can exceed the pulls.
        v = get(name, 0.0, MAX_COUNT)
        if v > pulls:
            _note(notes, name, v, f"exceeds the pulls ({pulls:g})", pulls)
            v = pulls
        return v

    count = get("count", 0.0, MAX_COUNT)
    return ArmStats(
        pulls=pulls,
        total_reward=at_most_pulls("total_reward"),
        alpha=get("alpha", 1.0, MAX_COUNT + 1.0),
        beta=get("beta", 1.0, MAX_COUNT + 1.0),
        avg_latency=get("avg_latency", 0.0, MAX_LATENCY_S),
        latency_var=get("latency_var", 0.0, MAX_LATENCY_S * MAX_LATENCY_S),
        failures=at_most_pulls("failures"),
        count=int(count),
        tick=get("tick", 0.0, MAX_COUNT),
    )


def read_quality(d: Mapping[str, Any], prefix: str = "q_", notes: list | None = None) -> QualityStats | None:
    """A quality record from a stored mapping's ``<prefix><field>`` entries (a Redis hash, a
    snapshot's JSON); None when it holds none. Lenient as every stored record's reader
    here: a value that is no finite number in range reads as 0."""
    if not any(f"{prefix}{f}" in d for f in QUALITY_FIELDS):
        return None
    got = {}
    for f in QUALITY_FIELDS:
        raw = d.get(f"{prefix}{f}")
        v = number(raw, 0.0, MAX_COUNT)
        if v is None:
            if raw is not None and notes is not None:
                notes.append(f"{prefix}{f}: {raw!r} is not a number in [0, {MAX_COUNT:g}]: read as 0.0")
            v = 0.0
        got[f] = v
    if got["total"] > got["weight"]:  # values lie in [0, 1]: the weighted sum cannot exceed the weights
        if notes is not None:
            notes.append(f"{prefix}total: {got['total']!r} exceeds the weight ({got['weight']:g}): "
                         f"read as {got['weight']!r}")
        got["total"] = got["weight"]
    return QualityStats(**got)


def read_breaker(raw: Any, notes: list | None = None) -> BreakerState:
    """A breaker record from a stored mapping (see the module docstring for the rules)."""
    d = _fields(raw, notes, "a CLOSED breaker")
    if d is None:
        return BreakerState()

    def count(name):
        r = d.get(name)
        v = number(r, 0.0, MAX_COUNT)
        if v is None:
            if r is not None:
                _note(notes, name, _text(r), f"is not a count in [0, {MAX_COUNT:g}]", 0)
            return 0
        return int(v)

    def when(name):
        r = d.get(name)
        v = number(r, 0.0, MAX_TIME)
        if v is None:
            if r is not None:
                _note(notes, name, _text(r), f"is not a time in [0, {MAX_TIME:g}] (seconds since the epoch)", 0.0)
            return 0.0
        return v

    state = breaker_state_name(d.get("state"))
    if notes is not None and "state" in d and state == CLOSED and not _is_closed(d["state"]):
        _note(notes, "state", _text(d["state"]), "is not CLOSED, HALF_OPEN, OPEN or a code 0-2", state)
    return BreakerState(
        state=state,
        failures=count("failures"),
        last_failure_time=when("last_failure_time"),
        success_count=count("success_count"),
        probes_in_flight=count("probes_in_flight"),
        rate_limited_until=when("rate_limited_until"),
        rate_limits=count("rate_limits"),
        probe_reserved_at=when("probe_reserved_at"),
    )


# The multipliers a policy may allow (the schema's budget.min_multiplier minimum and
# budget.max_multiplier maximum) and the largest spend a record may hold (USD).
MIN_MULTIPLIER = float(range_of("Budget", "min_multiplier")[0])
MAX_MULTIPLIER = float(range_of("Budget", "max_multiplier")[1])
MAX_SPEND_USD = 1e15


def read_pace(raw: Any, notes: list | None = None) -> PaceState:
    """A spend-pacing record from a stored mapping (see the module docstring for the rules)."""
    d = _fields(raw, notes, "a fresh record")
    base = PaceState()
    if d is None:
        return base
    bounds = {"multiplier": MAX_MULTIPLIER, "spend_per_1k": MAX_SPEND_USD, "count": MAX_COUNT,
              "spend_usd": MAX_SPEND_USD, "updated": MAX_TIME, "carry": MAX_CARRY}
    got = {}
    for name in PACE_FIELDS:
        r = d.get(name)
        # The multiplier may be negative (budget.min_multiplier); a decision clamps it to the rule's.
        lo = MIN_MULTIPLIER if name == "multiplier" else 0.0
        v = number(r, lo, bounds[name])
        if v is None:
            v = getattr(base, name)
            if r is not None:
                _note(notes, name, _text(r), f"is not a number in [{lo:g}, {bounds[name]:g}]", v)
        got[name] = v
    return PaceState(**got)


def _is_closed(v: Any) -> bool:
    """Whether a stored state says CLOSED itself (rather than reading as CLOSED for want of sense)."""
    v = _text(v)
    if isinstance(v, str):
        return v.strip().upper() == CLOSED or v.strip() == "0"
    return not isinstance(v, bool) and isinstance(v, (int, float)) and v == 0


def _num(v) -> str:
    # repr() of a float is the shortest string that reads back as the same double.
    return repr(float(v)) if isinstance(v, float) else str(v)


def _flat(s, names) -> list[str]:
    """A record as the flat field/value list of a Redis HSET (values exact)."""
    out = []
    for name in names:
        out += (name, _num(getattr(s, name)))
    return out


def arm_fields(s: ArmStats) -> list[str]:
    return _flat(s, ARM_FIELDS)


def breaker_fields(s: BreakerState) -> list[str]:
    return _flat(s, BREAKER_FIELDS)


def pairs(flat) -> dict:
    """A Redis flat reply [k1, v1, k2, v2, ...] as a mapping."""
    it = iter(flat or ())
    return {(k.decode("utf-8", "replace") if type(k) is bytes else k): v for k, v in zip(it, it)}
