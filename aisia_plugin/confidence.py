"""How confident the proxy may be in a local deployment's answer: local-first's rule
(docs/local-first.md). Pure functions over plain numbers and names: no LiteLLM, no policy
loader, no clock; each part is computed and testable alone.

    confidence = defect_factor * (w_lp * token_part + w_q * learned_part) / (w_lp + w_q)

- ``token_part`` (``token_confidence``): the exponential of the answer's mean token
  log-probability, its geometric-mean token probability, in [0, 1]; left out of the mean (its
  weight with it) when the deployment returned no log-probabilities.
- ``learned_part``: what the router has learned of the local deployment for such prompts, its
  quality estimate in the prompt's domain (quality.py: the declared prior moved by evidence).
- ``defect_factor`` (``defect_factor``): the product of ``1 - penalty`` over the answer's
  defects (refusal, empty answer, truncated, invalid JSON, hedging), as the conversation signals'
  detectors read them (signals.py); 1 without defects.

An answer whose confidence is below the alias's ``local_first.min_confidence`` (0.75 by default)
is escalated (``escalates``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from .numbers import clamp01

# The defects the rule reads, in the order a reason names them.
DEFECTS = ("refusal", "empty_answer", "truncated", "invalid_json", "hedging")


@dataclass(frozen=True, slots=True)
class Confidence:
    """A local answer's confidence and its parts (None: the part was not known)."""

    value: float
    token_part: Optional[float]
    learned_part: Optional[float]
    defects: tuple
    defect_factor: float
    tokens: int = 0  # how many token log-probabilities the token part was read from

    def explain(self, threshold: float) -> str:
        """One line: the value against the threshold and each part."""
        parts = [f"tokens {self.token_part:.2f} over {self.tokens}" if self.token_part is not None
                 else "no log-probabilities"]
        if self.learned_part is not None:
            parts.append(f"learned quality {self.learned_part:.2f}")
        if self.defects:
            parts.append(f"defects {'+'.join(self.defects)} x{self.defect_factor:.2f}")
        side = "<" if self.value < threshold else ">="
        return f"confidence {self.value:.2f} {side} {threshold:.2f} ({', '.join(parts)})"


def token_confidence(logprobs: Sequence) -> Optional[float]:
    """The geometric-mean probability of the answer's tokens, ``exp(mean(logprob))``, from their
    log-probabilities (natural log, as OpenAI-compatible servers return them); values that are
    no finite number are skipped, positive ones read as 0. None when no token is left."""
    values = finite_logprobs(logprobs)
    if not values:
        return None
    return clamp01(math.exp(sum(values) / len(values)))


def finite_logprobs(logprobs: Sequence) -> list:
    """The log-probabilities that are finite numbers, each at most 0."""
    return [min(float(lp), 0.0) for lp in logprobs
            if not isinstance(lp, bool) and isinstance(lp, (int, float)) and math.isfinite(lp)]


def defect_factor(defects: Iterable[str], penalties: Mapping[str, float]) -> float:
    """The product of ``1 - penalty`` over the distinct defects found (a defect without a
    penalty takes nothing off); in [0, 1]."""
    factor = 1.0
    for kind in set(defects):
        factor *= 1.0 - clamp01(float(penalties.get(kind, 0.0)))
    return clamp01(factor)


def combine(token_part: Optional[float], learned_part: Optional[float], token_weight: float,
            learned_weight: float) -> float:
    """The weighted mean of the parts that are known (a missing part and its weight are left
    out); 0 when no part with a positive weight is known."""
    num = den = 0.0
    for part, weight in ((token_part, token_weight), (learned_part, learned_weight)):
        if part is not None and weight > 0.0:
            num += weight * clamp01(part)
            den += weight
    return num / den if den > 0.0 else 0.0


def confidence(logprobs: Sequence, learned: Optional[float], defects: Iterable[str], *, token_weight: float,
               learned_weight: float, penalties: Mapping[str, float]) -> Confidence:
    """A local answer's confidence from its token log-probabilities (empty: none returned), the
    local deployment's learned quality for the prompt (None: unknown) and its defects."""
    seen = set(defects)
    found = tuple(d for d in DEFECTS if d in seen)
    values = finite_logprobs(logprobs)
    token_part = token_confidence(values)
    factor = defect_factor(found, penalties)
    value = clamp01(factor * combine(token_part, learned, token_weight, learned_weight))
    return Confidence(value, token_part, learned, found, factor, len(values))


def escalates(conf: Confidence, min_confidence: float) -> bool:
    """Whether the answer goes to a cloud candidate instead: its confidence is below the
    threshold."""
    return conf.value < min_confidence
