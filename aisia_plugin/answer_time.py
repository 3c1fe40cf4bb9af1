"""How long a deployment takes for an answer, whatever length a client asked for
(docs/design.md#latency-and-answer-length).

An answer's time grows with its length: a fixed part (the provider's queue, the prompt, the first
token) plus a time per output token. The length is the client's to choose (its ``max_tokens``,
what it asks for), and the learned latency is every tenant's: one key's 30 answers of 4,000 tokens
on the faster of two deployments took its latency from 0.99 s to 20.3 s, and every other tenant's
``auto/fast`` choice left it (tests/test_answer_time.py). So an answer longer than the cap
(``bandit.latency_length_cap_tokens``) teaches the time an answer of the cap's length would have
taken there: its measured time less the deployment's time per token times the tokens beyond the
cap. A key's answers then move a deployment's latency at most to what the cap's length takes
there, however long they are; answers within the cap teach their time as measured.

The time per token is a least-squares line of an answer's seconds on its output tokens, fitted per
deployment over its recent answers (each weighs ``1 - 1 / FIT_MEMORY`` of the one after it), read
only once the answers' lengths spread over at least ``MIN_SPREAD_TOKENS`` (their standard
deviation). An answer fits the line before it is read against it, so a deployment's first long
answer is read against the line it makes with the shorter ones. Only whole answers fit it (not a
stream, whose last chunk waits on the client's reading).

Whatever the line, a long answer's time at the cap is kept between its time scaled to the cap
(``seconds x cap / tokens``) and its measured time: for any fixed part and time per token of zero
or more, the true one lies there. So a line fitted wrong (too few answers, prompts that grow with
their answers) moves a sample no further than that, and no line leaves it as measured.

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


def at_length_cap(seconds: float, tokens: Optional[float], per_token: float, cap: float) -> float:
    """An answer's time as it teaches latency: as measured within the `cap` (or when its length is
    unknown, or the cap is 0: off); beyond it, `seconds` less `per_token` times the tokens past
    the cap, kept between ``seconds x cap / tokens`` and `seconds` (module docstring)."""
    if not tokens or cap <= 0 or tokens <= cap or not math.isfinite(seconds):
        return seconds
    return min(max(seconds - per_token * (tokens - cap), seconds * cap / tokens), seconds)


class TokenTimes:
    """Each deployment's fit, in this process."""

    def __init__(self):
        self._fits: dict[str, TokenTimeFit] = {}

    def at_length_cap(self, deployment_id: str, seconds: Optional[float], tokens: Optional[int], whole: bool,
                      cap: int) -> Optional[float]:
        """`seconds` of an answer of `tokens` output tokens as it teaches latency
        (``at_length_cap``); a `whole` answer (not a stream) fits the deployment's line first."""
        if seconds is None or not math.isfinite(seconds) or seconds < 0 or cap <= 0:
            return seconds
        fit = self._fits.get(deployment_id)
        if whole and tokens is not None and tokens > 0:
            if fit is None and len(self._fits) >= MAX_DEPLOYMENTS:
                self._fits.clear()
            fit = self._fits[deployment_id] = fitted(fit or TokenTimeFit(), float(tokens), seconds)
        if fit is None or not tokens or tokens <= cap:
            return seconds
        return at_length_cap(seconds, tokens, per_token_s(fit), cap)

    def per_token_s(self, deployment_id: str) -> float:
        fit = self._fits.get(deployment_id)
        return per_token_s(fit) if fit is not None else 0.0

    def forget(self, deployment_id: str) -> None:
        self._fits.pop(deployment_id, None)
