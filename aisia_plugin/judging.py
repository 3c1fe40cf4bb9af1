"""The judge's pure part (docs/quality.md#the-judge): which served answers are graded, under
what daily spend, with which rubric in which language, and what the grader's reply is worth.

An optional judge -- a deployment of the LiteLLM config, never an alias -- grades a sampled
share of alias answers after they were sent. Its grade becomes the answer's quality evidence
(``Engine.record_quality(..., source="judge")``). This module decides and reads; the call
itself is made by ``aisia_plugin/litellm/judge.py`` through the proxy's own Router. Plain data
and functions: the clock and the random source are injected, nothing here does I/O.

What keeps a grade honest:
- the graded answer and its prompt are quoted as data, between markers carrying a fresh random
  tag (``new_tag``) the quoted text cannot close, and the instructions say so;
- only the grader's own reply is parsed, strictly (``parse_grade``): one JSON object
  ``{"score": N}``, N a finite number from 0 to 10, else no grade: a grader that rambles,
  refuses, errors or times out teaches nothing."""

from __future__ import annotations

import json
import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from .signals import bounded, content_text

SCORE_MAX = 10  # the grader's scale: {"score": 0} .. {"score": 10}, read as 0 .. 1
MAX_REPLY_CHARS = 200  # a reply longer than this is no grade: the format asks for ~15 characters
DAY_S = 86400.0
DEFAULT_RUBRIC = "default"


@dataclass(frozen=True)
class ServedAnswer:
    """An alias answer as it was sent to its client, offered to the judge: which deployment
    answered for which alias, in which domain, the request's messages and the answer's text,
    the decision's ``Decision.context`` (the contextual strategy's request vector, None for the
    other strategies), ``answer_key``, what names this answer for the agreement with the
    conversation signals (the conversation's ``Turn.answer_fingerprint``; None: not compared),
    ``request_id``, the proxy's id of the request it answered (its grade's decision-log line), and
    ``caller_key``, the hash of the API key that asked: the judge reads the caller's prompt, which
    may be written to sway it, so its grade is weighed as that key's evidence (key_share.py)."""

    deployment_id: str
    alias: str
    domain: Optional[str]
    messages: Sequence[Mapping]
    answer: str
    context: Any = None
    answer_key: Optional[str] = None
    request_id: Optional[str] = None
    caller_key: Optional[str] = None


# -- the judge's deployment -----------------------------------------------------------------------

def judge_target(name: str, deployments: Sequence) -> Optional[str]:
    """What the judge's calls ask the Router for: `name` itself when it is a deployment's id or
    a model_name of the config (not a wildcard pattern), else None. `deployments` are the
    config's deployments as the core sees them (``Deployment`` records)."""
    for d in deployments:
        if name == d.id or (name == d.model_name and "*" not in d.model_name):
            return name
    return None


def alias_as_judge(name: str) -> str:
    """Why an alias cannot be the judge."""
    return (f"'{name}' is an alias: the judge must name a deployment of the LiteLLM config (a model_name or a "
            "model_info.id), so that its calls are neither routed by the router nor learned as an alias's")


def judge_missing(name: str, deployments: Sequence, aliases: Mapping) -> str:
    """Why `name` cannot be the judge (``judge_target`` found no deployment), with the closest
    name the config has."""
    import difflib

    if name in aliases:
        return alias_as_judge(name)
    names = sorted({d.model_name for d in deployments if "*" not in d.model_name} | {d.id for d in deployments})
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else (f"; it has {', '.join(names[:8])}" if names else "")
    return (f"names no deployment of the LiteLLM config (neither a model_name nor a model_info.id of its "
            f"{len(deployments)} deployments): the judge would grade nothing{hint}")


# -- sampling and spend --------------------------------------------------------------------------

def sampled(rate: float, rng) -> bool:
    """Whether one answer is drawn for the judge: with probability `rate` (0: never, 1: always).
    `rng` is a ``random.Random`` (or anything with ``random()`` in [0, 1))."""
    if not rate > 0.0:
        return False
    return rate >= 1.0 or rng.random() < rate


def utc_day(now: float) -> int:
    """The UTC day (days since the epoch) of a ``time.time()`` value."""
    return int(now // DAY_S)


class DailyCap:
    """The judge's spend per UTC day against its cap (``quality.judge.daily_usd_cap``). The
    clock (``time.time``-like) is injected. Once the day's spend reaches the cap, ``open()`` is
    False until the next UTC day: the call in flight when it is reached is the last one."""

    def __init__(self, cap_usd: float, clock: Callable[[], float]):
        self.cap_usd = float(cap_usd)
        self.clock = clock
        self.day = utc_day(clock())
        self.spent_usd = 0.0

    def _roll(self) -> None:
        today = utc_day(self.clock())
        if today != self.day:
            self.day, self.spent_usd = today, 0.0

    def open(self) -> bool:
        """Whether the judge may be called now."""
        self._roll()
        return self.spent_usd < self.cap_usd

    def spend(self, usd: float) -> None:
        """Count one judge call's cost (a negative or non-finite cost counts as nothing)."""
        self._roll()
        if isinstance(usd, (int, float)) and math.isfinite(usd) and usd > 0.0:
            self.spent_usd += float(usd)


def call_cost(reported, prompt_tokens, completion_tokens, input_per_1m: Optional[float],
              output_per_1m: Optional[float]) -> float:
    """A judge call's cost in USD: as LiteLLM reports it (``response_cost``) when it does, else
    its tokens at the deployment's price per 1M tokens (the router's own price of it, from its
    costs table when LiteLLM has none), else 0."""
    if isinstance(reported, (int, float)) and not isinstance(reported, bool) and math.isfinite(reported) \
            and reported >= 0.0:
        return float(reported)

    def part(tokens, per_1m) -> float:
        ok = isinstance(tokens, int) and tokens > 0 and isinstance(per_1m, (int, float)) and math.isfinite(per_1m)
        return tokens * per_1m / 1e6 if ok and per_1m > 0.0 else 0.0

    return part(prompt_tokens, input_per_1m) + part(completion_tokens, output_per_1m)


# -- language and rubric -------------------------------------------------------------------------

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def prompt_language(text: str, languages: Mapping, default: str, max_chars: int = 2000) -> str:
    """The language a prompt is written in, by a plain rule: the language whose ``words`` occur
    most among the text's words (read within `max_chars`); none, or a tie for the most, gives
    `default`. `languages` is the policy's ``quality.judge.languages``."""
    counts: dict[str, int] = {}
    words = [w.casefold() for w in _WORD.findall(bounded(text, max_chars))]
    for language, spec in languages.items():
        known = {w.casefold() for w in spec.words}
        counts[language] = sum(1 for w in words if w in known)
    best = max(counts.values(), default=0)
    if best == 0:
        return default
    top = [lang for lang, n in counts.items() if n == best]
    return top[0] if len(top) == 1 else default


@dataclass(frozen=True)
class Rubric:
    """What the grader is told: in `language`, the `instructions` (its system message) and the
    `text` of the rubric, found under `domain` (the answer's domain, or ``default``)."""

    language: str
    domain: str
    instructions: str
    text: str


def rubric_for(settings, domain: Optional[str], language: str) -> Optional[Rubric]:
    """The rubric of an answer in `domain` written in `language`: the language's rubric for
    the domain, else its ``default``; a language without instructions or rubrics falls back to
    ``settings.default_language``'s (the whole rubric in one language, never a mix). None when
    neither has instructions and a rubric (a team file removed them: the answer is not graded).
    `settings` is the policy's ``quality.judge``."""
    for lang in dict.fromkeys((language, settings.default_language)):
        spec = settings.languages.get(lang)
        if spec is None or not spec.instructions:
            continue
        for key in dict.fromkeys((domain or DEFAULT_RUBRIC, DEFAULT_RUBRIC)):
            text = spec.rubrics.get(key)
            if text:
                return Rubric(lang, key, spec.instructions, text)
    return None


# -- the prompt ----------------------------------------------------------------------------------

def new_tag(rng) -> str:
    """A fresh marker tag for one judge prompt (16 hex digits from `rng`): the quoted text was
    written before it was drawn, so it cannot close a marker it does not know."""
    return f"{rng.getrandbits(64):016x}"


def _quoted(text: str, tag: str) -> str:
    # Belt and braces: a quoted text that happens to hold the tag loses it.
    return text.replace(tag, "") if tag in text else text


def conversation_text(messages: Sequence[Mapping], max_chars: int) -> str:
    """The conversation the answer replied to, one ``role: text`` paragraph per message (tool
    calls and images are not quoted), within `max_chars` (its start and its end)."""
    parts = []
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        text = content_text(m.get("content")).strip()
        if text:
            parts.append(f"{m.get('role', 'user')}: {text}")
    return bounded("\n\n".join(parts), max_chars)


def judge_messages(rubric: Rubric, served: ServedAnswer, tag: str, max_chars: int) -> list[dict]:
    """The judge's chat messages: its instructions as the system message, then one user message
    holding the rubric and, between ``<<conversation-TAG>>`` and ``<<answer-TAG>>`` markers, the
    conversation and the answer as quoted data (each within `max_chars`). No word of ours is
    added: all of it is in the rubric's language."""
    conversation = _quoted(conversation_text(served.messages, max_chars), tag)
    answer = _quoted(bounded(served.answer, max_chars), tag)
    body = (f"{rubric.text}\n\n"
            f"<<conversation-{tag}>>\n{conversation}\n<</conversation-{tag}>>\n\n"
            f"<<answer-{tag}>>\n{answer}\n<</answer-{tag}>>\n\n"
            '{"score": N}')
    return [{"role": "system", "content": rubric.instructions}, {"role": "user", "content": body}]


# -- the grade -----------------------------------------------------------------------------------

_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n?(.*?)\n?```\Z", re.DOTALL | re.IGNORECASE)


def _no_constant(name: str):
    raise ValueError(f"not a finite number: {name}")


def parse_grade(reply) -> Optional[float]:
    """The grade in [0, 1] the grader's `reply` gives, or None when it gives none. Accepted:
    exactly one JSON object whose only key is ``score``, a finite number from 0 to
    ``SCORE_MAX``, optionally inside one Markdown code fence, within ``MAX_REPLY_CHARS``.
    Everything else is no grade: prose, a second object, a score out of range, NaN or
    Infinity, a huge number, a boolean, a string, an empty reply."""
    if not isinstance(reply, str):
        return None
    text = reply.strip()
    if not text or len(text) > MAX_REPLY_CHARS:
        return None
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError:  # not JSON, NaN/Infinity, an integer too long to read
        return None
    if not isinstance(data, dict) or set(data) != {"score"}:
        return None
    score = data["score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return None
    if not (math.isfinite(score) and 0 <= score <= SCORE_MAX):
        return None
    return float(score) / SCORE_MAX


# -- agreement with the conversation signals -----------------------------------------------------

GOOD_GRADE = 0.5  # a judge's grade at or above it says the answer was good


class AgreementBook:
    """Whether the judge and the conversation signals agree on the answers both spoke about.
    Either may speak first (the judge grades within seconds, the next user turn may come
    later or earlier): each side's verdict waits here, keyed by the answer, bounded to
    `max_answers` (the oldest forgotten). A verdict is good or bad: a grade at or above
    ``GOOD_GRADE``, a signal's weight above 0; a signal of weight 0 says nothing."""

    def __init__(self, max_answers: int = 10000):
        self.max_answers = max_answers
        self._judged: OrderedDict[str, bool] = OrderedDict()
        self._signalled: OrderedDict[str, bool] = OrderedDict()

    def _meet(self, key: str, good: bool, mine: OrderedDict, theirs: OrderedDict) -> Optional[bool]:
        other = theirs.pop(key, None)
        if other is not None:
            mine.pop(key, None)
            return other == good
        mine[key] = good
        mine.move_to_end(key)
        while len(mine) > self.max_answers:
            mine.popitem(last=False)
        return None

    def judged(self, key: Optional[str], grade: float) -> Optional[bool]:
        """The judge graded the answer `key`: True/False once the signals spoke too (they
        agree / disagree), None while they have not."""
        if not key:
            return None
        return self._meet(key, grade >= GOOD_GRADE, self._judged, self._signalled)

    def signalled(self, key: Optional[str], weight: float) -> Optional[bool]:
        """A conversation signal of `weight` (in [-1, 1]) judged the answer `key`."""
        if not key or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight == 0:
            return None
        return self._meet(key, weight > 0, self._signalled, self._judged)
