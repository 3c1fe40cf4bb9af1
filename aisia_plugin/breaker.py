"""Per-deployment circuit breaker (docs/design.md#circuit-breaker), as a pure state machine.

Nothing in here reads a clock or a store: every method takes the current state and ``now``
(seconds, float) and returns a *new* :class:`BreakerState`.  That keeps the logic deterministic
and testable, and lets the state live anywhere (process memory, a Redis hash written by a Lua
script) without the state machine caring how it is persisted.  Reading and writing a stored breaker
is the stores' business (``state/records.py``, which imports this module, never the reverse).

States (seed diagram)::

    CLOSED --(net failures >= failure_threshold)--> OPEN
    OPEN   --(now - last_failure_time > timeout_s)--> HALF_OPEN
    HALF_OPEN --(half_open_max_calls successes)--> CLOSED
    HALF_OPEN --(one provider failure)--> OPEN  (new timeout from that failure)
    CLOSED: each success decrements failures (self-healing)

"Consecutive failures" in the seed is really **net failures**: a success in CLOSED only
decrements the counter, it does not reset it (docs/design.md#sources).  So
4 failures, 1 success, 1 failure leaves the breaker CLOSED with failures=4, and one more failure
opens it.

Additions to the seed, each because a real gateway needs it:

* Failures are classified (:func:`classify_failure`).  A 400/401/404/422 or a context-window
  error is the caller's fault and says nothing about the provider's health, so it never counts.
* 429 is a rate limit, not an outage: it is tracked apart (``rate_limited_until``), honouring
  ``Retry-After`` (capped by ``max_retry_after_s``), and does not move the breaker state.
* Half-open probes are *reserved* (``probes_in_flight``), so at most ``half_open_max_calls``
  requests test a recovering provider at once instead of the whole traffic rushing in.
* A probe lease: if reserved probes never resolve (a crashed worker, a lost callback), the
  deployment would stay HALF_OPEN with every probe slot taken forever.  Probes older than the
  lease (``max(timeout_s, 60 s)`` by default) are considered lost and their slots can be taken again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from enum import Enum
from typing import Any, Iterable, Optional

CLOSED, HALF_OPEN, OPEN = "CLOSED", "HALF_OPEN", "OPEN"
STATES = (CLOSED, HALF_OPEN, OPEN)
# Seed: ai_circuit_breaker_state{provider="xxx"} = 0|1|2
PROMETHEUS_CODE = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One deployment's breaker.  The first four fields are the seed's Redis hash
    ``cb:{provider_id} -> {state, failures, last_failure_time, success_count}``."""

    state: str = CLOSED
    failures: int = 0  # net provider failures (see module docstring)
    last_failure_time: float = 0.0  # when the last provider failure happened; OPEN times out from it
    success_count: int = 0  # successes seen in HALF_OPEN
    probes_in_flight: int = 0  # half-open probes reserved and not yet resolved
    rate_limited_until: float = 0.0  # 429 handling, counted apart from failures
    rate_limits: int = 0  # how many 429s were seen (observability only)
    probe_reserved_at: float = 0.0  # time of the latest probe reservation (probe lease)


class FailureKind(str, Enum):
    PROVIDER = "provider"  # counts against the breaker
    CLIENT = "client"  # says nothing about the provider (also: kinds disabled in the config)
    RATE_LIMIT = "rate_limit"  # 429: back off, but the provider is not broken


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------
# Substrings of lower-cased exception class names.  LiteLLM maps every provider's errors onto
# OpenAI-style classes (litellm.Timeout, APIConnectionError, ContextWindowExceededError, ...);
# httpx/aiohttp/builtin names are covered too because a plugin may see raw transport errors.
_TIMEOUT_NAMES = ("timeout",)  # Timeout, APITimeoutError, ReadTimeout, ConnectTimeout, TimeoutError
_CONNECTION_NAMES = ("connect", "disconnect", "remoteprotocol", "brokenpipe", "networkerror",
                     "connectionreset", "connectionrefused")
_CONTEXT_NAMES = ("contextwindowexceeded", "contextlengthexceeded")
_CONTENT_POLICY_NAMES = ("contentpolicyviolation", "contentfilter")
_CLIENT_NAMES = ("badrequest", "authentication", "permissiondenied", "notfound", "unprocessableentity",
                 "invalidrequest", "unsupportedparams", "budgetexceeded", "rejectedrequest",
                 "invalidapikey", "requesttoolarge", "payloadtoolarge") + _CONTEXT_NAMES + _CONTENT_POLICY_NAMES
_RATE_LIMIT_NAMES = ("ratelimit", "toomanyrequests")
_PROVIDER_NAMES = ("internalserver", "serviceunavailable", "badgateway", "overloaded", "apierror",
                   "apiresponsevalidation", "midstream", "servererror")
_CONTEXT_MESSAGES = ("context length", "context_length", "maximum context", "context window",
                     "context_window", "prompt is too long", "too many tokens")
_CONTENT_POLICY_MESSAGES = ("content policy", "content_policy", "content management policy", "content_filter")


def _norm_names(error_type: Any) -> list[str]:
    if error_type is None:
        return []
    if isinstance(error_type, str):
        items: Iterable[str] = [error_type]
    else:
        try:
            items = [str(x) for x in error_type]
        except TypeError:
            items = [str(error_type)]
    out = []
    for name in items:
        # "litellm.exceptions.Timeout" and "Timeout" are the same thing; "_" and "-" are noise.
        n = name.strip().lower().replace("_", "").replace("-", "")
        if n:
            out.append(n)
    return out


def _any(names: list[str], needles: tuple[str, ...]) -> bool:
    return any(needle in n for n in names for needle in needles)


def _status(value: Any) -> Optional[int]:
    try:
        code = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return code if 100 <= code <= 999 else None


def classify_failure(cfg, *, status_code: int | None = None, error_type: Any = None, message: str = "") -> FailureKind:
    """Whose fault is a failed call?

    ``error_type`` is an exception class name (or a list of names, e.g. an exception's MRO).
    Order matters:

    1. 429 / RateLimitError -> RATE_LIMIT (the provider works; we are sending too much).
    2. Context-window and content-policy errors -> CLIENT whatever their status: LiteLLM raises
       them with 400, but some providers report them as 5xx, and resending the same prompt to
       a healthy provider would fail the same way.
    3. Timeouts, then connection errors, by name, before the status: LiteLLM's ``Timeout``
       carries 408 and its ``APIConnectionError`` carries 500, so the name is the better signal
       and ``count_timeouts`` / ``count_connection_errors`` must be able to switch them off.
       (A timeout is tested first because openai's APITimeoutError subclasses
       APIConnectionError.)  Disabled kinds are reported as CLIENT, i.e. "not counted".
    4. Status: ``failure_status_codes`` and any other 5xx -> PROVIDER; 408 follows the timeout
       switch; other 4xx -> CLIENT; any other status on a failure (a 2xx with a broken body)
       -> PROVIDER.
    5. Names without a status (BadRequestError -> CLIENT, ServiceUnavailableError -> PROVIDER).
    6. Anything unknown -> PROVIDER.  Conservative on purpose: a provider failing in a novel
       way (a new SDK exception, a garbled stream) must still be isolated; the cost of a wrong
       guess is bounded, since a false count is undone by the next success (self-healing) and
       a false open lasts one ``timeout_s``.  Guessing CLIENT instead would keep routing traffic
       to a dead provider indefinitely.
    """
    names = _norm_names(error_type)
    code = _status(status_code)
    msg = (message or "").lower()

    if code == 429 or _any(names, _RATE_LIMIT_NAMES):
        return FailureKind.RATE_LIMIT
    if _any(names, _CONTEXT_NAMES + _CONTENT_POLICY_NAMES) or any(m in msg for m in _CONTEXT_MESSAGES + _CONTENT_POLICY_MESSAGES):
        return FailureKind.CLIENT
    if _any(names, _TIMEOUT_NAMES):
        return FailureKind.PROVIDER if cfg.count_timeouts else FailureKind.CLIENT
    if _any(names, _CONNECTION_NAMES):
        return FailureKind.PROVIDER if cfg.count_connection_errors else FailureKind.CLIENT
    if code is not None:
        if code in set(cfg.failure_status_codes) or code >= 500:
            return FailureKind.PROVIDER
        if code == 408:  # Request Timeout: the provider gave up on us
            return FailureKind.PROVIDER if cfg.count_timeouts else FailureKind.CLIENT
        if 400 <= code < 500:
            return FailureKind.CLIENT
        return FailureKind.PROVIDER
    if _any(names, _CLIENT_NAMES):
        return FailureKind.CLIENT
    return FailureKind.PROVIDER  # includes _PROVIDER_NAMES and the unknown (see 6. above)


def exception_names(exc: BaseException) -> list[str]:
    """Class names along an exception's MRO (``litellm.Timeout`` -> Timeout, APITimeoutError, ...)."""
    return [c.__name__ for c in type(exc).__mro__ if c not in (object, BaseException, Exception)]


def exception_status(exc: BaseException) -> Optional[int]:
    for attr in ("status_code", "status", "code"):
        code = _status(getattr(exc, attr, None))
        if code is not None:
            return code
    response = getattr(exc, "response", None)
    return _status(getattr(response, "status_code", None)) if response is not None else None


def classify_exception(cfg, exc: BaseException) -> FailureKind:
    """:func:`classify_failure` for an exception object (status, MRO names and message)."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not break classification
        message = ""
    return classify_failure(cfg, status_code=exception_status(exc), error_type=exception_names(exc), message=message)


def parse_retry_after(value: Any, now_epoch: Optional[float] = None) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date (RFC 9110).
    None when absent or unreadable; never negative."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1", "replace")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, float(value)) if math.isfinite(value) else None
    text = str(value).strip()
    try:
        secs = float(text)
        return max(0.0, secs) if math.isfinite(secs) else None
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if now_epoch is None:
        import time

        now_epoch = time.time()
    return max(0.0, when - now_epoch)


# --------------------------------------------------------------------------------------------
# The state machine
# --------------------------------------------------------------------------------------------
class CircuitBreaker:
    """Transitions for one deployment's :class:`BreakerState`.  Stateless itself: one instance
    serves every deployment."""

    __slots__ = ("cfg", "failure_threshold", "timeout_s", "half_open_max_calls", "rate_limit_cooldown_s",
                 "max_retry_after_s", "probe_lease_s")

    def __init__(self, cfg, *, probe_lease_s: Optional[float] = None):
        self.cfg = cfg
        # Defensive floors: a threshold or probe budget of 0 would make the machine degenerate
        # (open on nothing / never close); the schema should already forbid them.
        self.failure_threshold = max(1, int(cfg.failure_threshold))
        self.timeout_s = max(0.0, float(cfg.timeout_s))
        self.half_open_max_calls = max(1, int(cfg.half_open_max_calls))
        self.rate_limit_cooldown_s = max(0.0, float(cfg.rate_limit_cooldown_s))
        self.max_retry_after_s = max(0.0, float(cfg.max_retry_after_s))
        # Lease on half-open probes: at least a minute, since a slow LLM call can take that long
        # and a lease shorter than the call would let extra probes in.
        self.probe_lease_s = (max(self.timeout_s, 60.0) if probe_lease_s is None
                              else max(0.0, float(probe_lease_s)))

    # -- reading ---------------------------------------------------------------------------
    def effective_state(self, s: BreakerState, now: float) -> str:
        """The state as it reads at ``now``: OPEN reads HALF_OPEN once the timeout has expired
        (seed: ``elapsed > timeout_s``, strictly).  The stored state only changes on
        :meth:`reserve` or an outcome, so reading never needs a write."""
        if s.state == OPEN and now - s.last_failure_time > self.timeout_s:
            return HALF_OPEN
        return s.state if s.state in PROMETHEUS_CODE else CLOSED

    def metric_value(self, s: BreakerState, now: float) -> int:
        """Value for ``ai_circuit_breaker_state``."""
        return PROMETHEUS_CODE[self.effective_state(s, now)]

    def is_rate_limited(self, s: BreakerState, now: float) -> bool:
        return now < s.rate_limited_until

    def _probes(self, s: BreakerState, now: float) -> int:
        """Probes still held in HALF_OPEN: none once the lease on the latest one has expired
        (their outcomes are presumed lost), and none when OPEN just timed out (a fresh round)."""
        if s.state != HALF_OPEN:
            return 0
        if s.probes_in_flight > 0 and now - s.probe_reserved_at > self.probe_lease_s:
            return 0
        return max(0, s.probes_in_flight)

    def available(self, s: BreakerState, now: float) -> bool:
        """May this deployment receive a request now?  Not OPEN, not rate limited, and in
        HALF_OPEN only while a probe slot is free."""
        if self.is_rate_limited(s, now):
            return False
        eff = self.effective_state(s, now)
        if eff == OPEN:
            return False
        if eff == HALF_OPEN:
            return self._probes(s, now) < self.half_open_max_calls
        return True

    # -- routing ---------------------------------------------------------------------------
    def reserve(self, s: BreakerState, now: float) -> tuple[bool, BreakerState]:
        """Called when a request is routed to the deployment.  Returns (allowed, new state).

        CLOSED: always allowed, state unchanged (nothing to reserve).  OPEN before the timeout:
        refused.  OPEN past the timeout: the OPEN -> HALF_OPEN transition (success_count 0) and
        this request is the first probe (the seed lets the transitioning request through).
        HALF_OPEN: takes a probe slot, or refuses when ``half_open_max_calls`` are in flight.
        Rate limiting is not checked here: it is a routing filter (:meth:`available`), and a
        caller serving a blocked pool anyway ("degraded") still needs the probe accounted."""
        eff = self.effective_state(s, now)
        if eff == CLOSED:
            return True, s
        if eff == OPEN:
            return False, s
        if s.state == OPEN:  # timed out: start a fresh half-open round
            return True, replace(s, state=HALF_OPEN, success_count=0, probes_in_flight=1, probe_reserved_at=now)
        held = self._probes(s, now)
        if held >= self.half_open_max_calls:
            return False, s
        return True, replace(s, probes_in_flight=held + 1, probe_reserved_at=now)

    def release(self, s: BreakerState) -> BreakerState:
        """Give back a probe slot without an outcome (the request was cancelled)."""
        if s.probes_in_flight <= 0:
            return s
        return replace(s, probes_in_flight=s.probes_in_flight - 1)

    # -- outcomes --------------------------------------------------------------------------
    def on_success(self, s: BreakerState, now: float) -> BreakerState:
        eff = self.effective_state(s, now)
        if eff == CLOSED:
            # Self-healing: a success cancels one failure, it does not wipe the slate
            # ("net failures").  Stray probe counts cannot survive in CLOSED.
            if s.failures <= 0 and s.probes_in_flight == 0 and s.state == CLOSED:
                return s
            return replace(s, state=CLOSED, failures=max(0, s.failures - 1), probes_in_flight=0)
        if eff == OPEN:
            # A request sent before the breaker opened came back fine.  One late success is not
            # the evidence the half-open test asks for; the timeout still runs.
            return s
        # HALF_OPEN (stored, or OPEN past its timeout which reads as HALF_OPEN).
        base = s if s.state == HALF_OPEN else replace(s, state=HALF_OPEN, success_count=0, probes_in_flight=0)
        successes = base.success_count + 1
        if successes >= self.half_open_max_calls:
            return replace(base, state=CLOSED, failures=0, last_failure_time=0.0, success_count=0,
                           probes_in_flight=0, probe_reserved_at=0.0)
        return replace(base, success_count=successes, probes_in_flight=max(0, base.probes_in_flight - 1))

    def on_failure(self, s: BreakerState, now: float, kind: FailureKind = FailureKind.PROVIDER,
                   retry_after_s: Optional[float] = None) -> BreakerState:
        kind = FailureKind(kind)
        if kind is FailureKind.CLIENT:
            # The caller's mistake says nothing about the provider: only the probe is resolved.
            return self.release(s)
        if kind is FailureKind.RATE_LIMIT:
            return self._rate_limited(s, now, retry_after_s)
        eff = self.effective_state(s, now)
        if eff == CLOSED:
            failures = max(0, s.failures) + 1
            if failures >= self.failure_threshold:
                return replace(s, state=OPEN, failures=failures, last_failure_time=now, success_count=0,
                               probes_in_flight=0)
            return replace(s, state=CLOSED, failures=failures, last_failure_time=now)
        if eff == HALF_OPEN:
            # One failed probe is enough: reopen at once, with a new timeout counted from now.
            # Every probe slot is freed: probes still out will resolve against OPEN.
            return replace(s, state=OPEN, failures=max(0, s.failures) + 1, last_failure_time=now, success_count=0,
                           probes_in_flight=0)
        # OPEN: the provider is still failing (a request sent before it opened); the timeout
        # restarts from the latest evidence.
        return replace(s, last_failure_time=max(s.last_failure_time, now))

    def _rate_limited(self, s: BreakerState, now: float, retry_after_s: Optional[float]) -> BreakerState:
        """429: back off for Retry-After (capped, so a hostile or buggy header cannot bench a
        deployment for hours) or the default cooldown, without touching the breaker state."""
        wait = retry_after_s
        if wait is None or not isinstance(wait, (int, float)) or not math.isfinite(wait) or wait <= 0:
            wait = self.rate_limit_cooldown_s
        wait = min(float(wait), self.max_retry_after_s)
        until = max(s.rate_limited_until, now + wait)  # an earlier, longer back-off still holds
        released = self.release(s)
        return replace(released, rate_limited_until=until, rate_limits=max(0, s.rate_limits) + 1)


__all__ = [
    "CLOSED", "HALF_OPEN", "OPEN", "STATES", "PROMETHEUS_CODE", "BreakerState", "FailureKind", "CircuitBreaker",
    "classify_failure", "classify_exception", "exception_names", "exception_status", "parse_retry_after",
]
