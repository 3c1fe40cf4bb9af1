"""The judge's calls (docs/quality.md#the-judge): a background worker that grades sampled alias
answers through the proxy's own LiteLLM Router, after they were sent.

``JudgeRunner.offer(served)`` is all the request side does: a synchronous, non-blocking call
that draws the sample (``quality.judge.sample_rate``), checks the day's cap and appends the
answer to a bounded queue (full: the sample is dropped and counted). The worker, a task started
on the first offer in the running loop, takes one answer at a time: the rubric in the prompt's
language, one call of the judge deployment through ``Router.acompletion`` (so LiteLLM bills and
logs it as the operator's own, like any call of that model), its cost counted against the day's
cap, and the grade recorded as ``judge`` evidence (``Engine.record_quality``). A judge that
errors, times out or answers out of format teaches nothing. What is decided and parsed is the
pure ``aisia_plugin/judging.py``; what is here is the I/O."""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import time
from collections import deque
from typing import Callable, Optional

from ..judging import (AgreementBook, DailyCap, ServedAnswer, call_cost, judge_messages, new_tag, parse_grade,
                       prompt_language, rubric_for, sampled)
from ..conversation import answer_fingerprint
from ..decision import learned_domain
from ..signals import content_text

log = logging.getLogger("aisia_plugin.litellm")

# A judge call's outcomes, as aisia_judge_calls_total counts them (metrics.JUDGE_OUTCOMES).
GRADED, UNPARSED, ERROR, TIMEOUT = "graded", "unparsed", "error", "timeout"
QUEUE_FULL, OVER_CAP, NO_RUBRIC = "queue_full", "over_cap", "no_rubric"
# What marks a judge call in LiteLLM's logs: request metadata, not a tag (with tag filtering on,
# LiteLLM would refuse a tag no deployment declares: router_strategy/tag_based_routing.py).
JUDGE_METADATA = {"aisia_judge": True}


def proxy_router():
    """The running proxy's Router (None outside a proxy), read where LiteLLM keeps it."""
    ps = sys.modules.get("litellm.proxy.proxy_server")
    return getattr(ps, "llm_router", None) if ps is not None else None


class JudgeRunner:
    """The judge of one process. `engine_of()` gives the current engine (its policy's
    ``quality.judge`` is read on every offer and call, so a reload applies at once; the grade
    is recorded through it); `router_of()` the LiteLLM Router that calls the judge deployment
    (the proxy's by default); `metrics` a ``RouterMetrics`` (None: not counted); `deployment_of(name)`
    the judge deployment's ``Deployment`` record, whose price counts a call LiteLLM reports no
    cost for or does not price (``Deployment.counted_usd``; None: such a call counts 0); `evidence_log` is told each grade recorded
    (``Observer.evidence``: its decision-log line); `clock` and `rng` as ``time.time`` and
    ``random.Random``."""

    def __init__(self, engine_of: Callable, router_of: Callable = proxy_router, metrics=None,
                 deployment_of: Optional[Callable] = None, clock: Callable[[], float] = time.time,
                 rng: Optional[random.Random] = None, evidence_log: Optional[Callable] = None):
        self.engine_of = engine_of
        self.router_of = router_of
        self.metrics = metrics
        self.evidence_log = evidence_log
        self.deployment_of = deployment_of
        self.rng = rng if rng is not None else random.Random()
        self.cap = DailyCap(0.0, clock)
        self.agreement = AgreementBook()
        self.queue: deque[ServedAnswer] = deque()
        self._wake: Optional[asyncio.Event] = None
        self._worker: Optional[asyncio.Task] = None
        self._busy = False  # an answer is being graded
        self.counts: dict[str, int] = {}  # outcome -> count, for a reader without Prometheus

    def settings(self):
        return self.engine_of().policy.quality.judge

    # -- the request side ---------------------------------------------------------------------------
    def offer(self, served: ServedAnswer) -> bool:
        """Offer an answer that was sent to its client. Returns whether it was queued for the
        judge. Never raises, never waits: the request it comes from is already answered."""
        try:
            s = self.settings()
            if s.deployment is None or not sampled(s.sample_rate, self.rng):
                return False
            self.cap.cap_usd = s.daily_usd_cap
            if not self.cap.open():
                self._count(OVER_CAP)
                return False
            if len(self.queue) >= s.queue_size or not self._running():
                self._count(QUEUE_FULL)
                return False
            self.queue.append(served)
            self._wake.set()
            return True
        except Exception:
            log.exception("aisia: offering an answer to the judge failed")
            return False

    def signalled(self, answer_key: Optional[str], weight: float) -> None:
        """A conversation signal of `weight` judged the answer `answer_key` (the conversation's
        ``Turn.answer_fingerprint``): counted as agreeing or not with the judge's grade of it."""
        try:
            self._agreed(self.agreement.signalled(answer_key, weight))
        except Exception:
            log.exception("aisia: comparing a signal with the judge failed")

    # -- the worker ---------------------------------------------------------------------------------
    def _running(self) -> bool:
        """Start the worker in the running loop if it is not running (False: no loop)."""
        if self._worker is not None and not self._worker.done():
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._wake = asyncio.Event()
        self._worker = loop.create_task(self._work(), name="aisia-judge")
        return True

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.queue:
                served = self.queue.popleft()
                self._busy = True
                try:
                    self._count(await self.grade(served))
                except asyncio.CancelledError:
                    raise
                except Exception:  # a bug here must not end the worker
                    log.exception("aisia: the judge failed on an answer")
                    self._count(ERROR)
                finally:
                    self._busy = False

    async def drain(self) -> None:
        """Wait until every queued answer is graded (tests, a shutdown that flushes)."""
        while self.queue or self._busy:
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        """Stop the worker; the answers still queued are not graded."""
        task, self._worker = self._worker, None
        self.queue.clear()
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def grade(self, served: ServedAnswer) -> str:
        """Grade one answer with the judge and record the grade; returns the call's outcome."""
        s = self.settings()
        if s.deployment is None:
            return NO_RUBRIC
        self.cap.cap_usd = s.daily_usd_cap
        if not self.cap.open():  # the cap was reached while this answer waited
            return OVER_CAP
        user = [m for m in served.messages if isinstance(m, dict) and m.get("role") == "user"]
        language = prompt_language(content_text(user[-1].get("content")) if user else "", s.languages,
                                   s.default_language)
        rubric = rubric_for(s, served.domain, language)
        router = self.router_of()
        if rubric is None or router is None:
            return NO_RUBRIC if rubric is None else ERROR
        messages = judge_messages(rubric, served, new_tag(self.rng), s.max_chars)
        try:
            response = await asyncio.wait_for(
                router.acompletion(model=s.deployment, messages=messages, temperature=0,
                                   max_tokens=s.max_output_tokens, timeout=s.timeout_s, num_retries=0,
                                   metadata=dict(JUDGE_METADATA)),
                s.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the judge's failure: nothing is learned, the answer stays ungraded
            timed_out = isinstance(exc, asyncio.TimeoutError) or "timeout" in type(exc).__name__.lower()
            log.info("aisia: the judge %s failed: %s", s.deployment, type(exc).__name__)
            return TIMEOUT if timed_out else ERROR
        self._spent(s.deployment, response)
        grade = parse_grade(_reply_text(response))
        if grade is None:
            return UNPARSED
        engine = self.engine_of()
        # The caller's key: its prompt was written to the judge as much as to the deployment.
        recorded = engine.record_quality(served.deployment_id, served.alias, served.domain, grade, "judge",
                                         context=served.context, key=served.caller_key or None)
        if recorded is None:
            return UNPARSED
        if self.evidence_log is not None:
            self.evidence_log(served.request_id, served.deployment_id, alias=served.alias, domain=served.domain,
                              source="judge", value=grade, weight=recorded.weight)
        self._agreed(self.agreement.judged(served.answer_key, grade))
        return GRADED

    def _spent(self, deployment: str, response) -> None:
        hidden = getattr(response, "_hidden_params", None) or {}
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
        reported = hidden.get("response_cost") if isinstance(hidden, dict) else None
        dep = self.deployment_of(deployment) if self.deployment_of is not None else None
        if dep is None:
            cost = call_cost(reported, *tokens, None, None)
        else:
            cost = call_cost(dep.counted_usd(reported, *tokens), *tokens, dep.input_cost_per_1m, dep.output_cost_per_1m)
        self.cap.spend(cost)
        if self.metrics is not None:
            self.metrics.judge_spent(cost)

    def _count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if self.metrics is not None:
            self.metrics.judge_call(outcome)

    def _agreed(self, agreed: Optional[bool]) -> None:
        if agreed is not None and self.metrics is not None:
            self.metrics.judge_agreement(agreed)


def served_answer(kwargs, response, decision, deployment_id: str,
                  request_id: Optional[str] = None, caller_key: Optional[str] = None) -> Optional[ServedAnswer]:
    """The record ``JudgeRunner.offer`` takes, from an alias call's LiteLLM success event
    (``async_log_success_event(kwargs, response_obj, ...)``: the request's messages, the response
    as sent, a stream's assembled) and its ``Decision``. Read before the learning step drops the
    decision's ``context``; `request_id`, the proxy's id of the request; `caller_key`, the hash of
    the key that asked (whose evidence the grade counts as). None when there is no
    text answer to grade (a tool call alone, an embedding): the judge grades what a user read."""
    text = _reply_text(response)
    messages = kwargs.get("messages") if isinstance(kwargs, dict) else None
    if not text or not text.strip() or not isinstance(messages, list) or not deployment_id:
        return None
    return ServedAnswer(deployment_id, decision.alias, learned_domain(decision), messages, text,
                        context=getattr(decision, "context", None), answer_key=answer_fingerprint(text),
                        request_id=request_id, caller_key=caller_key)


def deployment_by_name(deployments_of: Callable) -> Callable:
    """A ``deployment_of`` for ``JudgeRunner``: the deployment a judge name designates (its id,
    else the first of its model_name), among ``deployments_of()`` (the core's ``Deployment``
    records: the router's own prices, its costs table's when LiteLLM has none)."""
    def deployment_of(name: str):
        found = None
        for d in deployments_of():
            if d.id == name:
                return d
            if found is None and d.model_name == name:
                found = d
        return found

    return deployment_of


def _reply_text(response) -> Optional[str]:
    """The text a response gives a user (an alias's answer, the judge's reply): a chat
    completion's first message, a text completion's first choice, or the Responses API's output
    messages' text parts, joined; None when there is none (a tool call alone, an embedding)."""
    choices = getattr(response, "choices", None)
    if choices:
        first = choices[0]
        message = getattr(first, "message", None)
        text = getattr(message, "content", None) if message is not None else getattr(first, "text", None)
        return text if isinstance(text, str) else None
    parts = []
    for item in getattr(response, "output", None) or ():
        if _field(item, "type") != "message":
            continue
        for part in _field(item, "content") or ():
            if _field(part, "type") == "output_text" and isinstance(_field(part, "text"), str):
                parts.append(_field(part, "text"))
    return "".join(parts) if parts else None


def _field(obj, name: str):
    """A field of a response part, an object or a dict (LiteLLM gives both)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
