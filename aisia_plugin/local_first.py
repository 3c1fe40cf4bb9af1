"""Local-first with escalation (docs/local-first.md): which candidates an alias call may use at
each of its two sides, and what became of a local answer. Plain data, no LiteLLM: the proxy's
step is litellm/escalation.py, the confidence rule confidence.py.

A local-first call is first routed among the alias's local candidates (``Deployment.local``:
``locality: local``, declared or inferred from the provider, deployments.py); when every local
candidate is left out (failed, refused, open breaker) the call falls over to the rest as any
alias call. Its escalation is a second call of the same alias routed among the cloud candidates
only; it is never escalated again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

LOCAL = "local"  # the call answers from the alias's local candidates first
CLOUD = "cloud"  # the escalation of a local answer: the alias's cloud candidates only

LOCAL_FIRST = "local-first: the local candidates answer first"
ESCALATED = "local-first: escalated past the local answer"

# What became of a local answer (the metrics' results).
KEPT = "kept"
ESCALATED_RESULT = "escalated"
ESCALATION_FAILED = "escalation_failed"
NOT_LOCAL = "not_local"  # a cloud candidate answered the local side (every local one was left out)
RESULTS = (KEPT, ESCALATED_RESULT, ESCALATION_FAILED, NOT_LOCAL)


@dataclass(slots=True)
class Side:
    """A call's side of local-first: LOCAL or CLOUD; `added_logprobs`: the plugin asked the local
    deployment for log-probabilities the client did not ask for (removed from the answer);
    `note`: what became of the local answer, one line (the ``x-aisia-reason`` header's start);
    `kept`: whether the client got the local answer (None until it is known); `judge_sample`: the
    local answer's sample for the judge, held until it is known to be kept (a judge grades what a
    user read)."""

    side: str
    added_logprobs: bool = False
    note: Optional[str] = None
    kept: Optional[bool] = None
    judge_sample: Optional[object] = None


def side_of(settings, stream: bool) -> Optional[str]:
    """The side a new call of an alias with these ``local_first`` settings starts on: LOCAL, or
    None when local-first does not apply (off, or a stream under ``streams: skip``)."""
    if settings is None or not settings.enabled:
        return None
    if stream and settings.streams == "skip":
        return None
    return LOCAL


def left_out(deployments: Iterable, side: Optional[str], excluded: Mapping[str, str]) -> dict:
    """The deployments a call's side leaves out of its decision, id -> why: on the LOCAL side the
    cloud candidates while a local one is still allowed (not in `excluded`; when none is, the
    call falls over to the cloud ones as any alias call); on the CLOUD side every local
    candidate (an escalation whose cloud candidates all failed fails, and the client keeps the
    local answer)."""
    deps = [d for d in deployments if d.id not in excluded]
    if side == CLOUD:
        return {d.id: ESCALATED for d in deps if d.local}
    if side != LOCAL or not any(d.local for d in deps):
        return {}
    return {d.id: LOCAL_FIRST for d in deps if not d.local}


def escalation_note(local_id: str, explained: str, cloud_id: Optional[str]) -> str:
    """The reason's start for an escalated call."""
    return f"local-first: {local_id} {explained}: escalated to {cloud_id or 'a cloud candidate'}"


def kept_note(local_id: str, explained: str) -> str:
    return f"local-first: {local_id} kept, {explained}"
