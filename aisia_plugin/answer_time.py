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

The time per token is a least-squares plane of an answer's seconds on its output tokens and its
prompt's tokens, fitted per deployment over its recent answers (each weighs ``1 - 1 / FIT_MEMORY``
of the one after it), read only once the answers' lengths spread over at least
``MIN_SPREAD_TOKENS`` (their standard deviation). The prompt's tokens are in it because a prompt
takes time to read too: fitted on the answers' lengths alone, a key's huge prompts with short
answers (slow, and short: eight of 130,000 tokens to each of its answers of 4,000) flattened the
line to 0, and its long answers then counted in full (tests/test_answer_time.py). Where the two lengths move together (too closely to tell apart), the line of the answers'
lengths alone is read. An answer fits before it is read against the fit, so a deployment's first
long answer is read against the line it makes with the shorter ones; one whose prompt's length is
unknown does not fit. A stream fits too (most chat clients stream: a key's long streams must be
capped as its whole answers are): its time runs to its last chunk, which a client reading slowly
delays, and that only steepens the line, which brings long answers lower, never higher.

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
    """The weighted sums of one deployment's fit over its recent answers: their weight; the
    weighted prompt tokens (i), output tokens (o) and seconds (y); and the weighted i*i, o*o, i*o,
    i*y and o*y."""

    weight: float = 0.0
    inputs: float = 0.0
    outputs: float = 0.0
    seconds: float = 0.0
    inputs_sq: float = 0.0
    outputs_sq: float = 0.0
    inputs_outputs: float = 0.0
    inputs_seconds: float = 0.0
    outputs_seconds: float = 0.0


def fitted(fit: TokenTimeFit, inputs: float, outputs: float, seconds: float,
           memory: float = FIT_MEMORY) -> TokenTimeFit:
    """The fit after one more answer: `outputs` tokens to a prompt of `inputs` tokens, in `seconds`."""
    k = 1.0 - 1.0 / memory
    return TokenTimeFit(fit.weight * k + 1.0, fit.inputs * k + inputs, fit.outputs * k + outputs,
                        fit.seconds * k + seconds, fit.inputs_sq * k + inputs * inputs,
                        fit.outputs_sq * k + outputs * outputs, fit.inputs_outputs * k + inputs * outputs,
                        fit.inputs_seconds * k + inputs * seconds, fit.outputs_seconds * k + outputs * seconds)


# Prompt and answer lengths whose correlation's square is above this are told apart no more: the
# answers' lengths alone are read.
_TOGETHER = 0.99


def per_token_s(fit: TokenTimeFit, min_spread: float = MIN_SPREAD_TOKENS) -> float:
    """The fit's seconds per output token (0 or more), its prompt's tokens held apart; 0 until the
    answers' lengths spread enough."""
    w = fit.weight
    if w <= 1.0:
        return 0.0
    mi, mo, my = fit.inputs / w, fit.outputs / w, fit.seconds / w
    coo = fit.outputs_sq / w - mo * mo
    if not coo >= min_spread * min_spread:
        return 0.0
    cii = fit.inputs_sq / w - mi * mi
    cio = fit.inputs_outputs / w - mi * mo
    coy = fit.outputs_seconds / w - mo * my
    det = cii * coo - cio * cio
    if cii > 0.0 and det > (1.0 - _TOGETHER) * cii * coo:
        slope = (cii * coy - cio * (fit.inputs_seconds / w - mi * my)) / det
    else:  # the prompts' lengths do not vary, or move with the answers': the answers' alone
        slope = coy / coo
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

    def at_length_cap(self, deployment_id: str, seconds: Optional[float], inputs: Optional[int],
                      outputs: Optional[int], cap: int) -> Optional[float]:
        """`seconds` of an answer of `outputs` tokens to a prompt of `inputs` tokens as it teaches
        latency (``at_length_cap``), once it has fitted the deployment's plane."""
        if seconds is None or not math.isfinite(seconds) or seconds < 0 or cap <= 0:
            return seconds
        fit = self._fits.get(deployment_id)
        if outputs is not None and outputs > 0 and inputs is not None and inputs >= 0:
            if fit is None and len(self._fits) >= MAX_DEPLOYMENTS:
                self._fits.clear()
            fit = self._fits[deployment_id] = fitted(fit or TokenTimeFit(), float(inputs), float(outputs), seconds)
        return at_length_cap(seconds, outputs, per_token_s(fit) if fit is not None else 0.0, cap)

    def per_token_s(self, deployment_id: str) -> float:
        fit = self._fits.get(deployment_id)
        return per_token_s(fit) if fit is not None else 0.0

    def forget(self, deployment_id: str) -> None:
        self._fits.pop(deployment_id, None)
