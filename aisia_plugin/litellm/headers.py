"""The ``x-aisia-*`` response headers of an alias request. Every client sees them: by default
``x-aisia-reason`` is short (the strategy, the deployment it picked and one clause) and names no
other candidate and no score; the decision's full reason, with every candidate's id and score,
is sent only when the policy asks for it (``proxy.verbose_reason_header``), and is always in
``GET /aisia/explain`` for the proxy admin."""

from __future__ import annotations

from ..breaker import FailureKind
from ..decision import learned_domain
from .lifecycle import Attempt, Call
from .runtime import one_line

# The built-in strategies whose ranking reads the learned rewards, and so the quality estimate (a
# plain success is scored with it, docs/quality.md): a choice of theirs rests on the declared prior
# alone while the chosen deployment has no quality evidence (cost, latency and sla-aware rank on
# price, latency and health, not on quality).
READS_QUALITY = frozenset({"ucb1", "thompson", "contextual", "rules", "lkgp"})
PRIOR_ONLY = "on its declared prior quality alone (no quality evidence yet)"

# How a failed attempt reads in the reason, by the kind its failure was classified as.
FAILED_AS = {FailureKind.RATE_LIMIT: "was rate limited", FailureKind.CLIENT: "rejected the request",
             FailureKind.PROVIDER: "failed"}


def failed_attempts(call: Call, detail: bool = False) -> list[str]:
    """Each failed attempt of the call: ``a was rate limited`` (with ``(429 RateLimitError)``
    when `detail`)."""
    return [f"{f.deployment_id} {FAILED_AS.get(f.kind, 'failed')}" + (f" ({f.description})" if detail else "")
            for f in call.failures]


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def rests_on_prior(engine, decision, served) -> bool:
    """Whether a decision's choice of `served` rests on its declared prior quality alone: its
    strategy reads quality, and no signal, judge's grade or feedback was recorded about that
    deployment yet in the record its strategy read (when quality is learned per domain, the
    domain the decision read quality in, ``learned_domain``: for the contextual strategy a
    question of no domain reads the `_other` record, not the detected domain's None)."""
    if engine is None or not served or decision.strategy not in READS_QUALITY:
        return False
    read = learned_domain(decision)
    dom = read if (read and engine.policy.bandit.per_domain.enabled) else None
    q = engine.store.quality_of(served, dom)
    return q is None or q.feedback + q.judge + q.signal <= 0.0


def reason_header(call: Call, attempt: Attempt, verbose: bool, prior_only: bool = False) -> str:
    """The ``x-aisia-reason`` value for the call's last attempt; `prior_only`: the choice rests
    on the declared prior alone (``rests_on_prior``), which the reason then says; a local-first
    call's starts with what became of its local answer (escalation.py)."""
    note = call.local_first.note if call.local_first is not None else None
    reason = _reason(call, attempt, verbose, prior_only)
    return one_line(f"{note}; {reason}") if note else reason


def _reason(call: Call, attempt: Attempt, verbose: bool, prior_only: bool) -> str:
    d = attempt.decision
    served = attempt.deployment_id or d.deployment_id  # LiteLLM's checks may have dropped the choice
    if verbose:
        reason = d.reason
        if d.probe:
            reason = f"half-open probe: {reason}"
        if served != d.deployment_id:
            reason = (f"{d.deployment_id} was refused by LiteLLM's checks (tags, limits, context window); "
                      f"next ranked {served} served; {reason}")
        if call.failures:
            reason = f"failover after {', '.join(failed_attempts(call, detail=True))}: {reason}"
        if prior_only:
            reason = f"{reason}; {served} chosen {PRIOR_ONLY}"
        return one_line(reason)
    if call.failures:
        clause = f"after {_and(failed_attempts(call))}"
    elif served != d.deployment_id:
        clause = f"after LiteLLM's checks refused {d.deployment_id}"
    elif d.probe:
        clause = "as a half-open probe of its breaker"
    else:
        n = d.candidates_considered
        clause = f"of {n} candidate{'' if n == 1 else 's'}"
    if prior_only:
        clause = f"{clause}, {PRIOR_ONLY}"
    return one_line(f"{d.strategy} picked {served} {clause}")


# The policy's names as header values, (alias, strategy, domain) -> each one_line'd: a policy has
# few of them, and every request of an alias sends the same three. Bounded all the same (a reload
# may bring new names; the old ones are dropped with the rest when it is full).
_NAMES: dict = {}
_MAX_NAMES = 1024


def _names(alias: str, strategy: str, domain) -> tuple:
    key = (alias, strategy, domain)
    hit = _NAMES.get(key)
    if hit is None:
        if len(_NAMES) >= _MAX_NAMES:
            _NAMES.clear()
        hit = _NAMES[key] = (one_line(alias), one_line(strategy), one_line(domain or "none"))
    return hit


def response_headers(call: Call, attempt: Attempt, verbose: bool, engine=None) -> dict:
    """The headers; with the `engine` that decided, the reason says when the choice rests on the
    declared prior alone."""
    d = attempt.decision
    alias, strategy, domain = _names(call.alias, d.strategy, d.domain)
    prior_only = rests_on_prior(engine, d, attempt.deployment_id or d.deployment_id)
    return {"x-aisia-alias": alias, "x-aisia-strategy": strategy, "x-aisia-domain": domain,
            "x-aisia-reason": reason_header(call, attempt, verbose, prior_only), "x-aisia-request-id": call.request_id}
