"""The LiteLLM CustomLogger that routes the policy's aliases (``aisia_plugin.litellm.plugin``).

Each hook reads LiteLLM's event (events.py), asks the request's tracker (lifecycle.py: a Call and
its Attempts, their named states) for one transition and acts on what it returns: learn an outcome
(``_learn_attempt``), register an answer for feedback, forget the request. Start-up, the aliases'
Router groups and standing aside are the base class's (startup.ProxyLife). In a request's order:
1. ``async_pre_call_hook``: the alias admitted, the request checked, its call opened;
2. ``async_filter_deployments`` (per attempt): the engine decides (deciding.py): DECIDED;
3. ``async_pre_call_deployment_hook``: SENT; the failure hook and event of an attempt: ``Call.fail``
   judges whose failure it is; the success hook and event: pending failures settled, LEARNED;
4. ``async_post_call_success_hook``: a local-first answer kept or escalated (escalation.py);
   ``async_post_call_response_headers_hook``: ANSWERED, the ``x-aisia-*`` headers, a stream's
   provider side timed as its client reads it (streams.py);
5. ``async_post_call_failure_hook``: a refusal or an exhausted failover becomes one clear error.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Optional

from litellm.integrations.custom_logger import CustomLogger

from ..answer_time import held_by_client
from ..policy.loader import LoadedPolicy
from . import checks, escalation, events, streams
from .deciding import choose, handed_to_litellm
from .headers import response_headers
from .judge import served_answer
from .layering import scope_call
from .lifecycle import CLOSED, SENT, Refused
from .startup import FAIL_CLOSED_ENV, ProxyLife, fail_closed, http_error

__all__ = ["AisiaPlugin", "FAIL_CLOSED_ENV", "Refused", "fail_closed"]

log = logging.getLogger("aisia_plugin.litellm")


class AisiaPlugin(ProxyLife, CustomLogger):
    def __init__(self, loaded: Optional[LoadedPolicy] = None):
        CustomLogger.__init__(self)
        ProxyLife.__init__(self, loaded)

    # -- 1. before routing: the call opened ------------------------------------------------------
    async def async_pre_call_hook(self, user_api_key_dict, cache, data: dict, call_type):
        model = data.get("model")
        if not isinstance(model, str):
            return data
        ap = await self.admit(model)
        if ap is None:
            return data  # not an alias the plugin serves: LiteLLM's own
        problem = checks.request_problem(model, call_type, data)  # the caller's 400, before any deployment
        if problem is not None:
            self.observer.refused(model, problem.reason)
            raise http_error(400, problem.message, "invalid_request_error", param=problem.param)
        # Our own id of the request: LiteLLM's call id is the client's x-litellm-call-id, shared by many.
        rid = events.stamp_request_id(data)
        rt = self.runtime
        call = rt.open_call(rid, model, None)
        if (bad := scope_call(rt, call, user_api_key_dict, data)) is not None:  # tenant, layer, limits, pacing
            raise http_error(bad.status_code, bad.text, bad.kind)
        ap = rt.scopes.policy(call.layer).aliases.get(model, ap)  # the alias as the caller's layer sets it
        # LiteLLM's retries are the alias's failover: each one reaches the filter, which moves on
        # to a deployment not yet tried for this request. A client's own num_retries is kept.
        if data.get("num_retries") is None:
            data["num_retries"] = ap.failover.attempts
        call.session = rt.session(ap, data, user_api_key_dict)  # an lkgp alias's conversation
        rt.conversations.opened(call, data, user_api_key_dict)  # the answer it judges, in the background
        escalation.opened(call, ap, data, call_type)  # local-first
        return data

    # -- 2. the decision, per attempt: DECIDED ---------------------------------------------------
    async def async_filter_deployments(self, model: str, healthy_deployments: list, messages, request_kwargs=None,
                                       parent_otel_span=None) -> list:
        """Decide among the healthy deployments and hand LiteLLM every allowed candidate, ranked
        through ``litellm_params.order`` (1 = the choice): LiteLLM's later steps (pre-call
        checks, tag routing, limits) may still drop one, and its order filter then sends the
        best that is left."""
        rt = self.runtime
        if rt is None:
            return healthy_deployments
        ap = rt.policy.aliases.get(model)
        if ap is None or not healthy_deployments or not self.serves(model):
            return healthy_deployments  # (not served: a model that has the alias's name keeps it)
        kwargs = request_kwargs or {}
        # No pre-call hook ran (a Router used without the proxy): the id is given here.
        rid = events.request_id(kwargs) or events.stamp_request_id(kwargs)
        call = rt.call_for(rid, model, create=True)
        rt.call(rid).decided(call)
        refusal = call.refusal(ap.failover.attempts)  # the caller's fault shown twice, or the budget spent
        if refusal is not None:
            raise refusal
        tried = call.tried  # (a fresh list; read once: the explain entry keeps it)
        if messages is None:  # /v1/responses and /v1/completions carry the prompt elsewhere
            messages = events.prompt_messages(kwargs)
        decision = await choose(rt, self.observer, self._installed_router, call, healthy_deployments, messages,
                                tried=tried, tools=kwargs.get("tools"), request=kwargs,
                                client_timeout=events.request_facts(kwargs).client_timeout)
        ranked = decision.ranking()
        call.decide(decision, tuple(ranked), rt.explain_entry(call, decision, len(tried), tried))
        return handed_to_litellm(healthy_deployments, ranked, decision)

    # -- 3. each attempt: SENT, failed, answered, learned ----------------------------------------
    def _attempt_call(self, data):
        """(the alias call, the deployment id) of a per-attempt hook's request; (None, None) if none."""
        rt = self.runtime
        if rt is None or not rt.calls:
            return None, None
        meta = events.request_metadata(data)  # read once for both: the request's id and its group
        rid = events.request_id_in(meta)
        call = rt.call_for(rid, meta.get("model_group")) if rid else None
        dep = (data.get("model_info") or {}).get("id") if call is not None else None
        return call, (str(dep) if dep is not None else None)

    def _call_of_event(self, kwargs):
        """The alias call of a logging event; None for any other request (its outcome is not read)."""
        rt = self.runtime
        if rt is None or not rt.calls:
            return None
        rid = events.request_id(kwargs)
        return rt.call_for(rid, events.model_group(kwargs)) if rid else None

    async def async_pre_call_deployment_hook(self, kwargs, call_type):
        """LiteLLM has chosen the deployment of an attempt (after its own checks): SENT."""
        rt = self.runtime
        if rt is None or not rt.calls:  # no alias request in flight: nothing to look up, no call made
            return None
        call, dep = self._attempt_call(kwargs)
        if call is not None:
            call.send(dep, time.monotonic())
        return None

    async def async_post_call_failure_deployment_hook(self, request_data, exception, call_type, fallback_depth=None):
        """One failed attempt (the first, each retry, each fallback step)."""
        call, dep = self._attempt_call(request_data)
        attempt = call.sent_attempt(dep) if dep is not None else None
        if attempt is None or attempt.state is not SENT:
            return None
        latency = time.monotonic() - attempt.started if attempt.started is not None else None
        self._fail(call, attempt, events.from_exception(attempt.deployment_id, exception, latency),
                   events.request_facts(request_data), False, request_data, exception)
        return None

    async def async_post_call_success_deployment_hook(self, request_data, response, call_type):
        """An attempt was answered: the failures pending before it were their deployments' (the
        answer itself is learned from its logging event, which has its cost and tokens)."""
        rt = self.runtime
        if rt is None or not rt.calls:
            return None
        call, _ = self._attempt_call(request_data)
        if call is not None:
            self._settle_request(call)
        return None

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        rt = self.runtime
        if rt is None or not rt.calls:
            return
        call = self._call_of_event(kwargs)
        if call is None:
            return
        outcome = events.success(kwargs, start_time, end_time)
        attempt = call.sent_attempt(outcome.deployment_id)
        if attempt is None:
            return
        self._settle_request(call)  # a failure before this success was the deployment's
        if self.judge is not None and self.judge.settings().deployment is not None:
            # A sample for the judge, graded in the background; offered before the learning step
            # releases the decision's contextual features.
            served = served_answer(kwargs, response_obj, attempt.decision, outcome.deployment_id, call.request_id,
                                   call.key)
            if served is not None:
                escalation.judge_when_read(self, call, served, events.is_stream(kwargs))
        if not call.turn_noted:  # (a stream: its answer is whole only here)
            rt.conversations.answered(call, kwargs, response_obj, outcome.deployment_id,
                                      attempt.decision)
        stream = events.is_stream(kwargs)  # (a time to first token is learned for a stream only)
        if stream and attempt.client_hold is not None:  # how long its client held it back (streams.py)
            outcome = replace(outcome, client_held_s=attempt.client_hold.seconds)
        self._learn_attempt(call, attempt, outcome, stream,
                            events.time_to_first_token(kwargs, start_time) if stream else None)

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        """LiteLLM's one failure event per request: an attempt no per-attempt hook reported (a
        stream broken after its first chunk) fails from it."""
        call = self._call_of_event(kwargs)
        if call is None:
            return
        outcome = events.failure(kwargs, start_time, end_time)
        attempt = call.sent_attempt(outcome.deployment_id)
        if attempt is not None and attempt.state is SENT:
            self._fail(call, attempt, outcome, events.request_facts(kwargs), events.is_stream(kwargs), kwargs)
        ap = self.runtime.policy.aliases.get(call.alias)
        if call.pending is not None and call.spent(ap.failover.attempts if ap is not None else None):
            # No attempt of this alias follows (its budget is spent, or every candidate was
            # tried): nothing will show the failure to be the caller's. Through the proxy the
            # failure hook would settle it too; a Router used alone has no such hook.
            self._act(call.settle())

    def _fail(self, call, attempt, outcome, facts, stream: bool, raw, exception=None) -> None:
        rt, dep = self.runtime, attempt.deployment_id
        failure = events.attempt_failure(outcome, rt.deployment_provider(dep), rt.deployment_names(dep), call.answered)
        self._act(call.fail(attempt, outcome, failure, rt.policy.circuit_breaker, facts), attempt if stream else None)
        rt.tell_cooldown(call, raw, exception)  # before LiteLLM's cooldown reads the failure

    def _settle_request(self, call) -> None:
        """An attempt of the request was answered: the failures pending before it were their deployments'."""
        first = self.runtime.calls.get(call.request_id) or call
        if first.pending is not None or first.branches:
            self._act(first.settle_request())

    def _act(self, settled: list, streamed=None) -> None:
        """Carry out what a transition settled: learn each outcome (one that does not count
        against its deployment reaches the store with its verdict only: blame.Verdict).
        `streamed`: the attempt whose failing event was a stream's (learned as one)."""
        for call, attempt, outcome, verdict in settled:
            self._learn_attempt(call, attempt, outcome, attempt is streamed, None, verdict)

    def _learn_attempt(self, call, attempt, outcome, stream: bool, ttft, verdict=None) -> None:
        """LEARNED (or CALLERS, a failure that does not count), once (a per-attempt hook and an
        event may both report it): the answer it served registered for feedback, the request
        forgotten when CLOSED; `verdict`, a failure's ``blame.Verdict``, weighed against the other
        keys' calls (``Runtime.weighed``) before it counts. The learning itself, its log line and
        metrics are a step run after the hook (``_learn``, runtime.AfterResponse)."""
        rt = self.runtime
        try:
            learned = call.learn(attempt, outcome, verdict is None or verdict.counts)
            if learned is None:
                return
            served, closed = learned
            if served is not None:
                rt.note_served(call, served)
            if closed:
                rt.close_call(call)
        except Exception:  # learning must never break serving
            log.exception("aisia: could not learn from an outcome")
        if outcome.success:
            outcome = rt.counted_cost(outcome)
        verdict = rt.weighed(call.key, outcome, verdict)
        rt.after(self._learn, rt.scopes.engine(call.layer), call, attempt, outcome, stream, ttft, verdict, time.time())

    def _learn(self, engine, call, attempt, outcome, stream: bool, ttft, verdict, at: float) -> None:
        try:
            reward = engine.record(attempt.decision, outcome, session=call.session, verdict=verdict, team=call.team)
            # Learned once: what learning needed of the decision (the contextual strategy's request
            # vector, its arrays) is spent; the explain log keeps the decision for hundreds of
            # requests, and nothing it renders reads it.
            attempt.decision.context = None
            result = {"success": outcome.success, "latency_s": outcome.latency_s, "reward": reward,
                      "cost_usd": outcome.cost_usd}
            if stream:
                result["stream"] = True
                result["time_to_first_token_s"] = ttft
                if outcome.client_held_s is not None:
                    result["client_held_s"] = outcome.client_held_s
                    result["latency_learned"] = not held_by_client(outcome.latency_s, outcome.client_held_s)
            if verdict is not None:
                result["failure"] = {"kind": verdict.kind.value, "fault": verdict.fault, "reason": verdict.reason,
                                     "error": events.describe_failure(outcome)}
            attempt.explained["outcome"] = result
            self.observer.learned(call, call.attempts.index(attempt), outcome, reward,
                                  verdict.kind if verdict is not None else None, at)
        except Exception:  # learning must never break serving
            log.exception("aisia: could not learn from an outcome")

    # -- 4. the answer kept, or escalated (local-first), then the response headers: ANSWERED ------
    async def async_post_call_success_hook(self, data, user_api_key_dict, response):
        return await escalation.after_answer(self, data, response) if self.runtime is not None else None

    async def async_post_call_response_headers_hook(self, data, user_api_key_dict, response, request_headers=None,
                                                    litellm_call_info=None):
        rt = self.runtime
        if rt is None or not rt.calls:
            return None
        first = rt.call(events.request_id(data))
        call = first.current if first is not None else None
        if call is None or not call.attempts:
            return None
        self._settle_request(first)  # an answer came: the failures before it were the deployments'
        a = call.attempts[-1]
        if first.answer() | call.answer():  # (both marked) the outcome was learned already: CLOSED
            rt.close_call(first)
        if call.phase is CLOSED:  # (a local-first escalation: a call of its own)
            rt.close_call(call)
        if response is not None:
            # The response is LiteLLM's answer: feedback may follow at once, before the success
            # event (logged in the background) arrives.
            served = call.serve(a.deployment_id, a.decision)
            if served is not None:
                rt.note_served(call, served)
            rt.conversations.answered(call, data, response, a.deployment_id, a.decision)
            if data.get("stream") is True:  # its provider's side timed as the client reads it
                a.client_hold = streams.watch(response)
        return response_headers(call, a, rt.policy.proxy.verbose_reason_header, rt.engine)

    # -- 5. errors: the request forgotten --------------------------------------------------------
    async def async_post_call_failure_hook(self, request_data, original_exception, user_api_key_dict,
                                           traceback_str=None):
        exc = original_exception if isinstance(original_exception, Refused) else None
        rt = self.runtime
        if exc is None and rt is not None and rt.calls:
            first = rt.call(events.request_id(request_data or {}))
            if first is None:
                return None
            rt.close_call(first)  # nothing else is expected for it
            self._settle_request(first)
            exc = first.current.final_error(events.is_router_refusal(original_exception))
        if exc is None:
            return None
        return http_error(exc.status_code, exc.text, exc.kind, alias=exc.alias, tried=exc.tried)
