"""Whose failure is it: the one rule that says whether a failed call counts against the
deployment that was called (its breaker, its learned arms) or not. docs/failures.md states it for
an operator; the proxy (``litellm/callback.py``) and the replay (``replay/runner.py``) both judge
every failure here, so the replay tests the rule the proxy applies.

A failure counts against a deployment only when the provider caused it. Not the deployment's:

* a failure the caller caused: a 4xx, a context window or content policy error (the breaker's
  kinds, ``breaker.classify_failure``), a timeout the client set itself (LiteLLM marks such a
  request ``client_side_timeout``), a client that went away;
* LiteLLM's own refusals and guards (its router finding no deployment, the repeated-chunk guard
  that stops a stream repeating one chunk): no provider failed;
* a failure the same request meets again on a deployment of another provider (any status,
  connection errors included): two independent providers failing the same request at once is
  the request's doing; or the same failure (status, class and message, the deployment's own names
  blanked) on a second deployment, unless it plainly comes from the provider's side (two regions
  of one provider down at once);
* a failure from one API key on a deployment that serves the other keys' calls
  (:func:`outlier_verdict`, the peers' check before a breaker opens).

A request judged the caller's is answered with a 4xx naming why and is not tried on another
deployment. Everything here is plain data in, a :class:`Verdict` out: no clock, no store, no
LiteLLM."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from .breaker import FailureKind, classify_failure

# Whose fault a failure is.
PROVIDER = "provider"  # the deployment's: it counts (or, a rate limit, backs the deployment off)
CALLER = "caller"  # the request's or the client's
LITELLM = "litellm"  # LiteLLM's own refusal or guard: no provider failed

# Why (Verdict.reason): the names the explain log and the client's error carry.
PROVIDER_ERROR = "provider_error"
RATE_LIMITED = "rate_limited"
NOT_COUNTED = "not_counted"  # a kind the policy does not count (count_timeouts / count_connection_errors false)
BROKEN_ANSWER = "broken_after_answer"  # the answer had begun (a stream broken midway)
CLIENT_ERROR = "client_error"
CLIENT_TIMEOUT = "client_timeout"
CLIENT_ABORT = "client_abort"
LITELLM_REFUSAL = "litellm_refusal"
LITELLM_GUARD = "litellm_guard"
SAME_FAILURE = "same_failure_elsewhere"
OTHER_PROVIDER = "failed_on_another_provider"
KEY_OUTLIER = "key_outlier"


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """One failed attempt, as the rule reads it. ``provider`` is the deployment's provider
    (LiteLLM's prefix, or the policy's annotation: ``Deployment.provider``); ``signature`` what
    makes two failures "the same" (:func:`signature`); ``elapsed_s`` how long the
    attempt ran (None: unknown); ``answered`` whether the answer had begun (a stream broken
    after its first chunk)."""

    deployment_id: str
    provider: str = ""
    status_code: Optional[int] = None
    error_type: Any = None  # an exception class name, or the names along its MRO
    message: str = ""
    signature: tuple = ()
    elapsed_s: Optional[float] = None
    answered: bool = False


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the request itself says about its failures: a timeout the client set (``timeout``,
    ``request_timeout``, ``stream_timeout``, header ``x-litellm-timeout``; its value in seconds
    when known) and whether the client went away."""

    client_timeout: bool = False
    client_timeout_s: Optional[float] = None
    client_aborted: bool = False


NO_FACTS = RequestFacts()


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whose fault one failure is (``fault``: PROVIDER, CALLER or LITELLM) and why (``reason``);
    ``kind``, what the breaker records (PROVIDER counts; RATE_LIMIT backs off; CLIENT is not
    counted and only frees a probe slot); whether the request may be tried on another
    deployment; ``acquits``, earlier failed deployments of the request this failure shows were not
    at fault either; and, for a request judged the caller's, the 4xx status and message the
    client gets."""

    fault: str
    reason: str
    kind: FailureKind
    retry_elsewhere: bool
    acquits: tuple = ()
    client_status: Optional[int] = None
    client_message: str = ""

    @property
    def counts(self) -> bool:
        """Whether the failure counts against the deployment: its breaker and its arms
        (``learning.learns_from`` of its kind)."""
        return self.kind is FailureKind.PROVIDER

    @property
    def callers(self) -> bool:
        """Whether the request ends here with the 4xx ``client_status`` (the caller's, or stopped
        by LiteLLM's guard): no further attempt."""
        return self.client_status is not None


# LiteLLM's own refusals before any provider is called (its RouterErrors texts, the pre-call
# checks' context window and rate limit, tag routing): nothing was sent, no deployment failed.
LITELLM_REFUSALS = (
    "No deployments available", "Deployment over user-defined ratelimit", "max_parallel_requests slots in use",
    "are in cooldown", "Not allowed to access model due to tags configuration", "crossed budget",
    "no healthy deployments", "litellm._pre_call_checks", "No deployments with tag",
)
# LiteLLM's guards on an answer under way: a stream that repeats one chunk
# REPEATED_STREAMING_CHUNK_LIMIT times is stopped with an InternalServerError (streaming_handler.py,
# safety_checks). The content asked for it as often as the model looped: not an outage either way.
LITELLM_GUARDS = ("The model is repeating the same chunk",)


def is_litellm_refusal(message: str) -> bool:
    return any(phrase in (message or "") for phrase in LITELLM_REFUSALS)


def is_litellm_guard(message: str) -> bool:
    return any(phrase in (message or "") for phrase in LITELLM_GUARDS)


_PROVIDER_SIDE_STATUS = (408, 429, 502, 503, 504)  # not 500: LiteLLM raises its own errors on a request with 500
_PROVIDER_SIDE_NAMES = ("timeout", "internalserver", "serviceunavailable", "badgateway", "ratelimit", "overloaded")
_PROVIDER_SIDE_TEXT = ("connect", "refused", "reset by peer", "timed out", "timeout", "network", "name resolution",
                       "ssl", "eof", "broken pipe", "unavailable", "overloaded")
# Exception class names as LiteLLM prefixes them ("litellm.APIConnectionError: OpenAIException - "):
# not what the failure says.
_CLASS_NAMES = re.compile(r"[\w.]*(?:Error|Exception)\b\s*[:-]?\s*")
_ABORT_NAMES = ("cancellederror", "clientdisconnect")


def _names(error_type: Any) -> list[str]:
    if error_type is None:
        return []
    items = [error_type] if isinstance(error_type, str) else list(error_type) if isinstance(error_type, (list, tuple)) \
        else [error_type]
    return [str(n).lower().replace("_", "") for n in items if n]


def plainly_provider_side(failure: AttemptFailure) -> bool:
    """Whether a failure plainly comes from the provider's side (its 5xx answer other than a
    bare 500, a timeout, a rate limit, a network error): the same such failure on two
    deployments of one provider is that provider's (two regions down at once). What remains (an
    error LiteLLM raised itself on the request, an unknown exception) may be the request's own."""
    if failure.status_code in _PROVIDER_SIDE_STATUS:
        return True
    if any(part in n for n in _names(failure.error_type) for part in _PROVIDER_SIDE_NAMES):
        return True
    text = _CLASS_NAMES.sub("", failure.message or "").lower()
    return any(part in text for part in _PROVIDER_SIDE_TEXT)


def is_timeout(failure: AttemptFailure) -> bool:
    """A timeout by its class (LiteLLM's Timeout, openai's APITimeoutError, httpx's) or its 408."""
    return failure.status_code == 408 or any("timeout" in n for n in _names(failure.error_type))


def _client_timeout_fired(failure: AttemptFailure, request: RequestFacts) -> bool:
    """A timeout on a request whose client set one is the client's, unless it came before the
    client's timeout could fire (then the provider's own 408: LiteLLM's ``is_caller_timeout_408``
    reads it the same way)."""
    if not (request.client_timeout and is_timeout(failure)):
        return False
    limit, took = request.client_timeout_s, failure.elapsed_s
    return limit is None or took is None or took >= limit * 0.99  # (clock granularity)


def _caller(reason: str, status: int, message: str, acquits: tuple = ()) -> Verdict:
    return Verdict(CALLER, reason, FailureKind.CLIENT, False, acquits, status, message)


def judge(cfg, failure: AttemptFailure, request: RequestFacts = NO_FACTS,
          earlier: Sequence[AttemptFailure] = (), alias: str = "") -> Verdict:
    """The verdict on one failed attempt, given what the request says of itself and the
    request's `earlier` failed attempts (on other deployments, in order). `cfg` is the policy's
    ``circuit_breaker`` (which kinds count). In order:

    1. the client went away -> the caller's;
    2. LiteLLM's refusal (not counted, LiteLLM's answer as it gave it) or guard (not counted, a
       422, not retried);
    3. a timeout the client set -> the caller's (408);
    4. the breaker's kinds: a rate limit backs the deployment off; a kind the policy does not
       count (``count_timeouts``, ``count_connection_errors``) is the provider's, not counted;
    5. a failure that counts, after one that counts on a deployment of another provider; or the
       same failure as on another deployment, unless plainly provider-side -> the caller's (a
       4xx, no further attempt), those earlier ones acquitted;
    6. a client error (a 4xx, a context window) -> the caller's, as LiteLLM reports it;
    7. else the provider's: counted; the request is tried elsewhere unless its answer had begun
       (a stream broken midway)."""
    name = f"alias {alias!r}: " if alias else ""
    names = _names(failure.error_type)
    if request.client_aborted or any(a in n for n in names for a in _ABORT_NAMES):
        return _caller(CLIENT_ABORT, 499, f"{name}the client closed the request")
    if is_litellm_guard(failure.message):
        return Verdict(LITELLM, LITELLM_GUARD, FailureKind.CLIENT, False, (), 422,
                       f"{name}LiteLLM stopped the answer of {failure.deployment_id}: {failure.message}; the request is "
                       f"not tried on another deployment (a prompt asking for one word repeated makes any model do it)")
    if is_litellm_refusal(failure.message):
        return Verdict(LITELLM, LITELLM_REFUSAL, FailureKind.CLIENT, False)
    if _client_timeout_fired(failure, request):
        limit = f" ({request.client_timeout_s:g} s)" if request.client_timeout_s is not None else ""
        return _caller(CLIENT_TIMEOUT, 408, f"{name}the timeout this request set{limit} expired on "
                       f"{failure.deployment_id}; no other deployment is tried (send a longer timeout, or none)")
    kind = classify_failure(cfg, status_code=failure.status_code, error_type=failure.error_type,
                            message=failure.message)
    if kind is FailureKind.RATE_LIMIT:
        return Verdict(PROVIDER, RATE_LIMITED, kind, True)
    if kind is FailureKind.CLIENT and _counted_kind_switched_off(cfg, failure):
        return Verdict(PROVIDER, NOT_COUNTED, kind, not failure.answered)
    return _judged_with_earlier(cfg, failure, kind, earlier, name)


def _counted_kind_switched_off(cfg, failure: AttemptFailure) -> bool:
    """A timeout or connection error that the policy's count_timeouts / count_connection_errors
    leaves uncounted: classified CLIENT by the breaker, yet nobody's fault but the provider's."""
    if not cfg.count_timeouts and is_timeout(failure):
        return True
    return not cfg.count_connection_errors and any(
        part in n for n in _names(failure.error_type) for part in ("connect", "disconnect", "remoteprotocol"))


def _judged_with_earlier(cfg, failure: AttemptFailure, kind: FailureKind, earlier: Sequence[AttemptFailure],
                         name: str) -> Verdict:
    others = [e for e in earlier if e.deployment_id != failure.deployment_id]
    elsewhere = [e for e in others if failure.provider and e.provider and e.provider != failure.provider
                 and kind is FailureKind.PROVIDER and _counted(cfg, e)]
    if elsewhere:
        first = elsewhere[0]
        return _caller(OTHER_PROVIDER, 422, f"{name}the request failed on {first.deployment_id} ({first.provider}) and "
                       f"on {failure.deployment_id} ({failure.provider}), two providers: it is the request that fails, so "
                       f"no other deployment is tried: {failure.message or describe(failure)}",
                       tuple(e.deployment_id for e in elsewhere))
    if failure.signature and (kind is FailureKind.CLIENT or not plainly_provider_side(failure)):
        alike = [e for e in others if e.signature == failure.signature]
        if alike:
            status = failure.status_code if failure.status_code and 400 <= failure.status_code < 500 else 400
            return _caller(SAME_FAILURE, status, f"{name}the request failed the same way on {alike[0].deployment_id} and "
                           f"{failure.deployment_id}, so no other deployment is tried: {failure.message or describe(failure)}",
                           tuple(e.deployment_id for e in alike))
    if kind is FailureKind.CLIENT:
        # The caller's error as LiteLLM reports it (a 400, a context window...); whether another
        # deployment is tried is LiteLLM's to say (a 404 of one deployment may be served by another).
        return Verdict(CALLER, CLIENT_ERROR, kind, not failure.answered)
    if failure.answered:  # a stream broken after its first chunk: nothing to try again
        return Verdict(PROVIDER, BROKEN_ANSWER, kind, False)
    return Verdict(PROVIDER, PROVIDER_ERROR, kind, True)


def _counted(cfg, failure: AttemptFailure) -> bool:
    return classify_failure(cfg, status_code=failure.status_code, error_type=failure.error_type,
                            message=failure.message) is FailureKind.PROVIDER and not is_litellm_guard(failure.message)



def signature(status_code: Optional[int], error_type: Any, message: str, names=()) -> tuple:
    """What makes two failures "the same" on two deployments: status, class and message, with
    the deployment's own names (`names`: id, model, group) blanked out of the message."""
    message = message or ""
    spelled = {str(n) for n in names if n} | {str(n).split("/", 1)[1] for n in names if n and "/" in str(n)}
    for name in sorted(spelled, key=len, reverse=True):  # "gpt-4o-mini" before "gpt-4o"
        message = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", "*", message)
    kind = error_type[0] if isinstance(error_type, (list, tuple)) and error_type else error_type
    return (status_code, kind, message)


def describe(failure: AttemptFailure) -> str:
    """One line for a client's error: '500 InternalServerError'."""
    names = failure.error_type
    first = names[0] if isinstance(names, (list, tuple)) and names else (names or "error")
    return f"{failure.status_code} {first}" if failure.status_code else str(first)


# --------------------------------------------------------------------------------------------
# The peers' check before a breaker opens
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OutlierRule:
    """A key's failure on a deployment is withheld from its breaker (and its arms) when, over the
    deployment's last ``window_s`` seconds, the *other* keys made at least ``min_peer_calls``
    calls to it and at least ``min_peer_success_rate`` of them succeeded: the deployment serves
    everyone else, so what fails is that key's traffic (Envoy's outlier detection and
    resilience4j count failures against peers the same way). ``max_calls`` bounds what is kept
    per deployment. With no peers (one key, or too few calls) every failure counts as before.
    The numbers are the policy's ``circuit_breaker.outlier`` (defaults in the schema)."""

    enabled: bool
    window_s: float
    min_peer_calls: int
    min_peer_success_rate: float
    max_calls: int

    @classmethod
    def of(cls, cfg) -> "OutlierRule":
        """From the policy's ``circuit_breaker.outlier`` (its defaults are the schema's)."""
        o = cfg.outlier
        return cls(bool(o.enabled), float(o.window_s), int(o.min_peer_calls), float(o.min_peer_success_rate),
                   int(o.max_calls))


@dataclass(frozen=True, slots=True)
class PeerCalls:
    """A deployment's recent calls as one key's failure is weighed against them: the calls of the
    other keys, and how many of them succeeded."""

    calls: int = 0
    successes: int = 0


def outlier_verdict(verdict: Verdict, peers: PeerCalls, rule: OutlierRule, deployment_id: str = "") -> Verdict:
    """`verdict` unless it counts against the deployment while the other keys' calls to it
    succeed (``OutlierRule``): then the key's own (not counted, not learned; the request is still
    tried elsewhere, since the failure was not shown to be the request's)."""
    if not (verdict.counts and key_outlier(peers, rule)):
        return verdict
    return replace(verdict, fault=CALLER, reason=KEY_OUTLIER, kind=FailureKind.CLIENT)


def key_outlier(peers: PeerCalls, rule: OutlierRule) -> bool:
    """Whether the other keys' calls (`peers`) show the deployment serving them (``OutlierRule``):
    a key's failure there is then that key's."""
    return rule.enabled and peers.calls >= rule.min_peer_calls \
        and peers.successes >= rule.min_peer_success_rate * peers.calls


class RecentCalls:
    """Each deployment's recent calls by key (time, key, success), at most ``rule.max_calls`` per
    deployment and none older than ``rule.window_s``: what :func:`outlier_verdict` reads. Plain
    data; ``now`` is given by the caller."""

    __slots__ = ("rule", "_calls")

    def __init__(self, rule: OutlierRule):
        self.rule = rule
        self._calls: dict[str, deque] = {}

    def note(self, deployment_id: str, key: Optional[str], success: bool, now: float) -> None:
        calls = self._calls.get(deployment_id)
        if calls is None:
            if len(self._calls) >= 4096:  # deployments come from the config: a bound, never reached
                self._calls.clear()
            calls = self._calls[deployment_id] = deque(maxlen=max(1, self.rule.max_calls))
        calls.append((now, key or "", bool(success)))

    def forget(self, deployment_id: str) -> None:
        """An operator reset the deployment (it is fixed): its recent calls are no evidence."""
        self._calls.pop(deployment_id, None)

    def peers(self, deployment_id: str, key: Optional[str], now: float) -> PeerCalls:
        calls = self._calls.get(deployment_id)
        if not calls:
            return PeerCalls()
        since = now - self.rule.window_s
        while calls and calls[0][0] < since:
            calls.popleft()
        mine = key or ""
        theirs = [ok for t, k, ok in calls if k != mine]
        return PeerCalls(len(theirs), sum(theirs))



__all__ = [
    "AttemptFailure", "RequestFacts", "NO_FACTS", "Verdict", "judge", "plainly_provider_side",
    "is_litellm_refusal", "is_litellm_guard", "is_timeout", "signature", "describe", "OutlierRule", "PeerCalls",
    "outlier_verdict", "key_outlier", "RecentCalls", "PROVIDER", "CALLER", "LITELLM",
]
