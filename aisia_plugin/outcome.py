"""The outcome of one routed call, and the reward the learner takes from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .numbers import clamp01
from .policy.models import Reward


@dataclass(slots=True)
class Outcome:
    """What one call came to. Treated as immutable (``dataclasses.replace`` makes a changed copy),
    as bandit.ArmStats is, but not frozen: a frozen dataclass's __init__ pays an
    object.__setattr__ per field, and one is built per call (about 16k instructions a request)."""

    deployment_id: str
    success: bool
    latency_s: Optional[float] = None
    status_code: Optional[int] = None
    error_type: Optional[str] = None  # exception class name, for failure classification
    message: str = ""
    quality: Optional[float] = None  # graded score in [0, 1] where known (replays, evaluators): a judge's evidence
    feedback: Optional[float] = None  # explicit user feedback in [0, 1]
    cost_usd: Optional[float] = None
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    retry_after_s: Optional[float] = None
    # A stream's: the seconds of `latency_s` its client held it back (the proxy waited on its
    # reading); None where not measured. What it teaches: answer_time.held_by_client.
    client_held_s: Optional[float] = None


def reward(outcome: Outcome, cfg: Reward, target_p95_ms: float, plain_quality: float) -> float:
    """Always in [0, 1]: failure_reward for a failed call, else the weighted mean of the known
    terms (quality: the graded score, else `plain_quality`, the deployment's quality estimate
    from its prior and the evidence so far -- never 1 for a mere success (docs/quality.md);
    latency against the SLA target; feedback when given)."""
    if not outcome.success:
        return clamp01(cfg.failure_reward)
    parts = [(cfg.quality_weight, clamp01(plain_quality if outcome.quality is None else outcome.quality))]
    if outcome.latency_s is not None and cfg.latency_weight > 0:
        ms = max(outcome.latency_s * 1000.0, 1e-6)
        parts.append((cfg.latency_weight, clamp01(target_p95_ms / ms)))
    if outcome.feedback is not None and cfg.feedback_weight > 0:
        parts.append((cfg.feedback_weight, clamp01(outcome.feedback)))
    total = sum(w for w, _ in parts)
    if total <= 0:
        return 1.0
    return clamp01(sum(w * v for w, v in parts) / total)
