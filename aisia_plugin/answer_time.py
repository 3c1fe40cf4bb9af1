"""How long a deployment takes for an answer of the reference length (docs/design.md#latency-at-the-reference-length).

An answer's time grows with its length: a fixed part (the provider's queue, the prompt, the first
token) plus a time per output token. The length is the client's to choose (its ``max_tokens``,
what it asks for), and the learned latency is every tenant's: one key asking for answers of 4,000
tokens on the faster of two deployments took the other keys' ``auto/fast`` share of it from 98 %
to 7 % (an in-process measurement, 2026-12-07). So the latency a success teaches is the time its
answer would have taken at the reference length (``bandit.latency_reference_tokens``, the
length the cost estimate assumes too): its measured time less the deployment's time per token
times the tokens beyond the reference (plus, for a shorter answer, times the tokens short of it).

The time per token is a least-squares line of an answer's seconds on its output tokens, fitted per
deployment over its recent answers (each weighs ``1 - 1 / FIT_MEMORY`` of the one after it), read
only once the answers' lengths spread over at least ``MIN_SPREAD_TOKENS`` (their standard
deviation): answers all of one length say nothing of it, and need no moving. Only whole answers
a client did not read as they came fit the line (not a stream, whose last chunk waits on the
client's reading).

Whatever the fitted time per token, an answer's time at the reference length is kept between its
measured time and that time scaled to the reference (``seconds x reference / tokens``): for any
fixed part and time per token of zero or more, the true one lies there. So a line fitted wrong
(too few answers, a prompt's length that grows with its answer's) moves a sample no further than
that, and a line not known yet leaves it as measured.

Pure: plain data, no clock; the engine keeps one ``TokenTimes`` per process (the runtime shares it
between its engines)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

FIT_MEMORY = 200.0  # answers: the fit's weights halve every ~139 answers of the deployment
MIN_SPREAD_TOKENS = 16.0  # the answers' lengths' standard deviation below which no line is read
MAX_DEPLOYMENTS = 65536  # fits kept (deployments come from the config: a bound, never reached)


@dataclass(slots=True)
class TokenTimeFit:
    """The weighted sums of one deployment's line: the weight, and the weighted output tokens,
    squared tokens, seconds and tokens x seconds of its recent answers."""

    weight: float = 0.0
    tokens: float = 0.0
    tokens_sq: float = 0.0
    seconds: float = 0.0
    cross: float = 0.0


def fitted(fit: TokenTimeFit, tokens: float, seconds: float, memory: float = FIT_MEMORY) -> TokenTimeFit:
    """The fit after one more answer of `tokens` output tokens that took `seconds`."""
    keep = 1.0 - 1.0 / memory
    return TokenTimeFit(fit.weight * keep + 1.0, fit.tokens * keep + tokens, fit.tokens_sq * keep + tokens * tokens,
                        fit.seconds * keep + seconds, fit.cross * keep + tokens * seconds)


def per_token_s(fit: TokenTimeFit, min_spread: float = MIN_SPREAD_TOKENS) -> float:
    """The line's seconds per output token (0 or more); 0 until the lengths spread enough."""
    if fit.weight <= 1.0:
        return 0.0
    mean_t = fit.tokens / fit.weight
    var_t = fit.tokens_sq / fit.weight - mean_t * mean_t
    if not var_t >= min_spread * min_spread:
        return 0.0
    cov = fit.cross / fit.weight - mean_t * fit.seconds / fit.weight
    slope = cov / var_t
    return slope if slope > 0.0 and math.isfinite(slope) else 0.0


def at_reference_length(seconds: float, tokens: Optional[float], per_token: float, reference: float) -> float:
    """An answer's time at the reference length: `seconds` moved by `per_token` times the tokens
    between its length and the reference, kept between `seconds` and ``seconds x reference /
    tokens`` (module docstring). As measured when its length is unknown, no line is known or the
    reference is 0 (off)."""
    if not tokens or tokens <= 0 or per_token <= 0.0 or reference <= 0 or not math.isfinite(seconds):
        return seconds
    moved = seconds - per_token * (tokens - reference)
    scaled = seconds * reference / tokens
    low, high = (scaled, seconds) if scaled < seconds else (seconds, scaled)
    return min(max(moved, low), high)


class TokenTimes:
    """Each deployment's fit, in this process."""

    def __init__(self):
        self._fits: dict[str, TokenTimeFit] = {}

    def at_reference_length(self, deployment_id: str, seconds: Optional[float], tokens: Optional[int],
                            whole: bool, reference: int) -> Optional[float]:
        """`seconds` of an answer of `tokens` output tokens at the `reference` length; the answer
        fits the deployment's line first when `whole` (not a stream), so that the first long
        answer of a deployment is already read against a line."""
        if seconds is None or not math.isfinite(seconds) or seconds < 0 or reference <= 0:
            return seconds
        fit = self._fits.get(deployment_id)
        if whole and tokens is not None and tokens > 0:
            if fit is None and len(self._fits) >= MAX_DEPLOYMENTS:
                self._fits.clear()
            fit = self._fits[deployment_id] = fitted(fit or TokenTimeFit(), float(tokens), seconds)
        if fit is None:
            return seconds
        return at_reference_length(seconds, tokens, per_token_s(fit), reference)

    def per_token_s(self, deployment_id: str) -> float:
        fit = self._fits.get(deployment_id)
        return per_token_s(fit) if fit is not None else 0.0

    def forget(self, deployment_id: str) -> None:
        self._fits.pop(deployment_id, None)
