"""How long a deployment takes for an answer, whatever lengths a client asked for
(docs/design.md#latency-and-answer-length).

An answer's time grows with its length and its prompt's: a fixed part (the provider's queue, the
first token) plus a time per output token and a time per prompt token. Both lengths are the
client's to choose (its ``max_tokens``, what it asks for, what it sends), and the learned latency
is every tenant's: a key's long answers or huge prompts on the faster of two deployments made it
the slower one for every other tenant's ``auto/fast`` (tests/test_answer_time.py). So an answer
longer than the output cap (``bandit.latency_length_cap_tokens``), or to a prompt longer than the
prompt cap (``bandit.latency_prompt_cap_tokens``), teaches the time it would have taken at the caps
there: the deployment's time at the caps (its plane, below) plus the answer's distance from the
plane scaled by ``k``, the smallest ``cap / tokens`` of a length past its cap. Put otherwise: its
measured time scaled by ``k``, plus what that scaling took off the parts that do not grow past a
cap (the fixed part, a length within its cap). An answer on the plane then counts as one at the
caps, however long it and its prompt are; what lies off the plane (a stream read slowly past the
sockets' buffers, benchmarks/slow_reader.py) counts scaled by ``k``, not in full (the design's
figures: docs/design.md#latency-and-answer-length). Answers within both caps teach their time as
measured.

The plane is a least-squares fit of an answer's seconds on its output tokens and its prompt's
tokens, per deployment over its recent answers (each weighs ``1 - 1 / FIT_MEMORY`` of the one
after it); a length's time per token is read only once its lengths spread over at least
``MIN_SPREAD_TOKENS`` (their standard deviation), and the fixed part is what the times per token
leave of the mean time. Both lengths are in one plane because each takes time: fitted on the
answers' lengths alone, a key's huge prompts with short answers (slow, and short: eight of 130,000
tokens to each of its answers of 4,000) flattened the line to 0, its fixed part became their mean
time, and its long answers counted in full (tests/test_answer_time.py). Where
only one length spreads, its line is read; where the two move together (too closely to tell
apart), the line of the answers' lengths alone; where neither spreads, the mean time. An answer
fits before it is read against the fit, so a deployment's first long answer is read against the
line it makes with the shorter ones; one whose prompt's length is unknown does not fit. A stream
fits too (most chat clients stream: a key's long streams must be capped as its whole answers are).

Whatever the plane, the result is kept between the answer's time scaled by ``k`` and its measured
time: for any fixed part and times per token of zero or more, the true time at the caps lies
there. So a plane fitted wrong (too few answers, prompts that grow with their answers) moves a
sample no further than that.

Pure: plain data, no clock; the engine keeps one ``TokenTimes`` per process (the runtime shares it
between its engines)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

FIT_MEMORY = 200.0  # answers: the fit's weights halve every ~139 answers of the deployment
MIN_SPREAD_TOKENS = 16.0  # a length's standard deviation (answers' or prompts') below which its line is not read
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


class TimeLine(NamedTuple):
    """A deployment's answer time as the plane fitted on its recent answers: a fixed part plus
    seconds per output token and per prompt token (each 0 or more)."""

    fixed_s: float
    output_s: float
    prompt_s: float


class LengthCaps(NamedTuple):
    """The output and prompt tokens beyond which an answer teaches the time of one of those lengths
    (``bandit.latency_length_cap_tokens``, ``bandit.latency_prompt_cap_tokens``; 0: that cap off)."""

    output: int
    prompt: int


def _slope(value: float) -> float:
    return value if value > 0.0 and math.isfinite(value) else 0.0


def time_line(fit: TokenTimeFit, min_spread: float = MIN_SPREAD_TOKENS) -> Optional[TimeLine]:
    """The fit's plane (None before any answer): the plane where both lengths spread and do not
    move together; else the line of the one that spreads (the answers' where both do), the other's
    seconds per token 0; a flat line (the mean time) until a length spreads enough. The fixed part
    is what the slopes leave of the mean time (0 or more)."""
    w = fit.weight
    if w <= 0.0:
        return None
    mi, mo, my = fit.inputs / w, fit.outputs / w, fit.seconds / w
    coo = fit.outputs_sq / w - mo * mo
    cii = fit.inputs_sq / w - mi * mi
    floor = min_spread * min_spread
    outputs_spread, inputs_spread = w > 1.0 and coo >= floor, w > 1.0 and cii >= floor
    coy = fit.outputs_seconds / w - mo * my
    ciy = fit.inputs_seconds / w - mi * my
    cio = fit.inputs_outputs / w - mi * mo
    det = cii * coo - cio * cio
    if outputs_spread and inputs_spread and det > (1.0 - _TOGETHER) * cii * coo:
        output_s, prompt_s = _slope((cii * coy - cio * ciy) / det), _slope((coo * ciy - cio * coy) / det)
    elif outputs_spread:  # the prompts' lengths do not vary, or move with the answers': the answers' alone
        output_s, prompt_s = _slope(coy / coo), 0.0
    elif inputs_spread:
        output_s, prompt_s = 0.0, _slope(ciy / cii)
    else:
        output_s = prompt_s = 0.0
    fixed = my - output_s * mo - prompt_s * mi
    return TimeLine(fixed if fixed > 0.0 and math.isfinite(fixed) else 0.0, output_s, prompt_s)


def at_length_cap(seconds: float, outputs: Optional[float], inputs: Optional[float], line: Optional[TimeLine],
                  caps: LengthCaps) -> float:
    """An answer's time as it teaches latency: as measured within both caps (or where a length is
    unknown, or its cap 0: off, or no answer has fitted yet); beyond them, the plane's time at the
    caps plus the answer's distance from the plane scaled by `k`, the smallest ``cap / tokens`` of
    a length past its cap: its time scaled by `k`, plus what that scaling took off the parts that
    do not grow past a cap (the fixed part, a length within its cap). Kept between ``seconds x k``
    and `seconds` (module docstring)."""
    if line is None or not math.isfinite(seconds):
        return seconds
    outputs, inputs = outputs or 0, inputs or 0
    k, outputs_kept, inputs_kept = 1.0, outputs, inputs
    if 0 < caps.output < outputs:
        k, outputs_kept = caps.output / outputs, caps.output
    if 0 < caps.prompt < inputs:
        k, inputs_kept = min(k, caps.prompt / inputs), caps.prompt
    if k == 1.0:
        return seconds
    taught = (k * seconds + (1.0 - k) * line.fixed_s + line.output_s * (outputs_kept - k * outputs)
              + line.prompt_s * (inputs_kept - k * inputs))
    return min(max(taught, seconds * k), seconds)


# A stream whose client held it back for this share of its time or more teaches no latency.
CLIENT_HELD_SHARE = 0.5


def held_by_client(seconds: Optional[float], held_s: Optional[float]) -> bool:
    """Whether a stream of `seconds` whose client held it back `held_s` of them (litellm/streams.py:
    the proxy waited on the client's reading) teaches no latency: held for ``CLIENT_HELD_SHARE`` of
    its time or more. Its time then says how the client read, not how the provider answered:
    subtracting the hold would not give the provider's time either, since the provider writes
    ahead into the buffers while the client holds the stream (its time would read too short, and a
    client reading slowly would make a deployment look fast). A stream held for less counts as
    measured, so what a client's reading adds to a stream that teaches is less than the rest of its
    time: less than the time the proxy spent on the provider's side, never more than twice it
    (docs/design.md#a-stream-its-client-holds)."""
    return held_s is not None and seconds is not None and held_s > 0.0 and held_s >= CLIENT_HELD_SHARE * seconds


class TokenTimes:
    """Each deployment's fit, in this process."""

    def __init__(self):
        self._fits: dict[str, TokenTimeFit] = {}

    def at_length_cap(self, deployment_id: str, seconds: Optional[float], inputs: Optional[int],
                      outputs: Optional[int], caps: LengthCaps) -> Optional[float]:
        """`seconds` of an answer of `outputs` tokens to a prompt of `inputs` tokens as it teaches
        latency (``at_length_cap``), once it has fitted the deployment's plane."""
        if seconds is None or not math.isfinite(seconds) or seconds < 0 or (caps.output <= 0 and caps.prompt <= 0):
            return seconds
        fit = self._fits.get(deployment_id)
        if outputs is not None and outputs > 0 and inputs is not None and inputs >= 0:
            if fit is None and len(self._fits) >= MAX_DEPLOYMENTS:
                self._fits.clear()
            fit = self._fits[deployment_id] = fitted(fit or TokenTimeFit(), float(inputs), float(outputs), seconds)
        return at_length_cap(seconds, outputs, inputs, self.time_line(deployment_id), caps)

    def time_line(self, deployment_id: str) -> Optional[TimeLine]:
        fit = self._fits.get(deployment_id)
        return time_line(fit) if fit is not None else None

    def forget(self, deployment_id: str) -> None:
        self._fits.pop(deployment_id, None)
