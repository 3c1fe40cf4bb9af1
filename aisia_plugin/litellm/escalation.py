"""Local-first's step in the proxy (docs/local-first.md): the local answer's confidence read after
it came back, and below the alias's threshold the same request answered by a cloud candidate.

- ``opened`` (the pre-call hook): a call of an alias with ``local_first.enabled`` starts on the
  LOCAL side (``local_first.side_of``: a stream under ``streams: skip`` does not); the local call
  asks for ``logprobs`` unless the client set it (``request_logprobs``). The filter then leaves
  the cloud candidates out while a local one is allowed (deciding.choose, ``left_out``).
- ``after_answer`` (the post-call success hook, non-streaming answers only: LiteLLM calls it
  before the response leaves, and adopts the response it returns): when a local deployment
  answered, its confidence (confidence.py) from the answer's token log-probabilities, its defects
  (the conversation signals' detectors, conversations.answer_defects and ``hedges``) and the
  local deployment's learned quality in the prompt's domain. At or above the threshold the answer
  is returned as is. Below it, the request is sent again through the proxy's Router to the same
  alias as a call of its own on the CLOUD side (the filter leaves the local candidates out; the
  engine chooses among the cloud ones, with failover), billed and logged by LiteLLM as any call
  with the request's key metadata; the client gets that answer only. The escalation is recorded
  as ``signal`` quality evidence against the local deployment (its value: the confidence), in the
  ``x-aisia-reason`` header, the explain entry, the decision log, the metrics and the routing page.
  A cloud call that fails leaves the local answer to the client (said in the reason).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

from ..confidence import confidence, escalates
from ..decision import learned_domain
from ..local_first import (CLOUD, ESCALATED_RESULT, ESCALATION_FAILED, KEPT, LOCAL, NOT_LOCAL, Side,
                           escalation_note, kept_note, side_of)
from ..signals import HEDGING
from . import events
from .conversations import answer_defects, answer_of, answer_view, client_cut

log = logging.getLogger("aisia_plugin.litellm")

# What a request dict sent again through the Router must not carry: the first call's logging
# object and LiteLLM call id (the Router makes new ones).
_NOT_RESENT = ("litellm_logging_obj", "litellm_call_id")


# The call types local-first rates and escalates: chat completions (a text completion or a
# /v1/responses request carries its prompt and answer in other shapes, and is routed as usual).
CHAT_CALL_TYPES = frozenset({"completion", "acompletion"})


def opened(call, ap, data: dict, call_type=None) -> None:
    """The pre-call hook opened `call` for the alias settings `ap`: its local-first side, if any
    (a chat completion only)."""
    settings = ap.local_first
    if not settings.enabled or str(getattr(call_type, "value", call_type) or "") not in CHAT_CALL_TYPES \
            or not isinstance(data.get("messages"), list):
        return  # (most aliases: local-first off)
    side = side_of(settings, events.is_stream(data))
    if side is None:
        return
    mark = Side(side)
    if settings.request_logprobs and not data.get("stream") and data.get("logprobs") is None:
        data["logprobs"] = True
        mark.added_logprobs = True
    call.local_first = mark


def token_logprobs(response) -> list:
    """The log-probabilities of the first choice's tokens, as OpenAI-compatible servers return
    them (``choices[0].logprobs.content[i].logprob``, objects or dicts); [] when there are none."""
    try:
        lp = response.choices[0].logprobs
    except (AttributeError, IndexError, TypeError):
        return []
    content = lp.get("content") if isinstance(lp, dict) else getattr(lp, "content", None)
    out = []
    for item in content or ():
        value = item.get("logprob") if isinstance(item, dict) else getattr(item, "logprob", None)
        if value is not None:
            out.append(value)
    return out


def strip_logprobs(response) -> None:
    """Remove the log-probabilities the plugin asked for and the client did not."""
    for choice in getattr(response, "choices", None) or ():
        if isinstance(choice, dict):
            choice.pop("logprobs", None)
        elif getattr(choice, "logprobs", None) is not None:
            try:
                choice.logprobs = None
            except (AttributeError, TypeError, ValueError):
                pass


def assess(rt, settings, data: dict, response, deployment_id: str, domain: Optional[str]):
    """The local answer's ``confidence.Confidence``."""
    reader = rt.engine.signal_reader
    answer = answer_of(response)
    defects: set = set()
    if answer is None:
        defects.add("empty_answer")
    else:
        view = answer_view(data, response, answer)
        messages = data.get("messages") if isinstance(data.get("messages"), list) else []
        defects.update(s.kind for s in answer_defects(reader, view, client_cut(data), messages))
        if reader.hedges(view.text) is not None:
            defects.add(HEDGING)
    learned = rt.engine.quality_estimate(deployment_id, domain)
    return confidence(token_logprobs(response), learned, defects, token_weight=float(settings.logprob_weight),
                      learned_weight=float(settings.learned_weight), penalties=settings.penalties.model_dump())


async def after_answer(plugin, data: dict, response) -> Optional[Any]:
    """The post-call success hook's step: None to keep LiteLLM's response (what happens to most
    requests), else the response the client gets instead (the cloud candidate's)."""
    rt = plugin.runtime
    first = rt.call(events.request_id(data)) if rt is not None and rt.calls else None
    mark = first.local_first if first is not None else None
    if mark is None or mark.side != LOCAL or not first.attempts:
        return None
    ap = rt.scopes.policy(first.layer).aliases.get(first.alias)  # the call's layer's settings (docs/teams.md)
    attempt = first.current.attempts[-1] if first.current.attempts else first.attempts[-1]
    dep = rt.known(attempt.deployment_id)
    if ap is None or dep is None or not dep.local:
        plugin.observer.local_first(first, attempt, NOT_LOCAL, None, None)
        return _kept(plugin, mark, response)
    settings = ap.local_first
    conf = assess(rt, settings, data, response, dep.id, learned_domain(attempt.decision))
    explained = conf.explain(settings.min_confidence)
    if not escalates(conf, settings.min_confidence):
        mark.note = kept_note(dep.id, explained)
        plugin.observer.local_first(first, attempt, KEPT, conf, None)
        return _kept(plugin, mark, response)
    if settings.evidence_weight > 0:  # evidence against the local deployment for that prompt
        rt.after(_evidence, plugin, first.request_id, dep.id, first.alias, learned_domain(attempt.decision),
                 conf.value, float(settings.evidence_weight), first.key)
    escalation, cloud = await _cloud_answer(plugin, first, data, mark)
    if cloud is None:
        mark.note = f"local-first: {dep.id} {explained}: the escalation failed, the local answer is kept"
        plugin.observer.local_first(first, attempt, ESCALATION_FAILED, conf, None)
        return _kept(plugin, mark, response)
    served = escalation.attempts[-1].deployment_id if escalation.attempts else None
    mark.note = escalation.local_first.note = escalation_note(dep.id, explained, served)
    first.turn_noted = True  # the client never saw the local answer: the conversation keeps the cloud one
    mark.kept, mark.judge_sample = False, None  # nor does the judge grade it
    first.latest = escalation  # the response headers (and feedback) are the cloud call's
    plugin.observer.local_first(first, attempt, ESCALATED_RESULT, conf, escalation)
    return cloud


def judge_when_read(plugin, call, served, stream: bool) -> None:
    """Offer the judge `served`, an answer of `call`, once the client is known to read it: at
    once, but for a local-first call's local answer, which an escalation may replace: when
    ``after_answer`` keeps it (it may decide before or after LiteLLM's success event arrives)."""
    mark = call.local_first
    if mark is None or mark.side != LOCAL or stream or mark.kept:
        plugin.judge.offer(served)
    elif mark.kept is None:
        mark.judge_sample = served  # offered by _kept; dropped by an escalation


def _kept(plugin, mark: Side, response):
    mark.kept = True
    if mark.judge_sample is not None and plugin.judge is not None:
        plugin.judge.offer(mark.judge_sample)
    mark.judge_sample = None
    if mark.added_logprobs:
        strip_logprobs(response)
    return None


def _evidence(plugin, request_id: str, deployment_id: str, alias: str, domain: Optional[str], value: float,
              weight: float, key: Optional[str]) -> None:
    """The local answer's confidence as signal evidence against its deployment, and its decision-log
    line. Weighed as the caller's (`key`, its hash): a client choosing prompts the local model
    answers unsure of moves its quality within one key's bound (docs/security.md#tenants)."""
    recorded = plugin.runtime.engine.record_quality(deployment_id, alias, domain, value, "signal", weight, key=key)
    if recorded is not None:
        plugin.observer.evidence(request_id, deployment_id, alias=alias, domain=domain, source="signal",
                                 value=value, weight=recorded.weight, kind="local_first_escalated")


async def _cloud_answer(plugin, first, data: dict, mark: Side) -> tuple:
    """(the escalation call, the cloud answer) of the request `data`, sent again to its alias
    on the CLOUD side through the proxy's Router; (the call, None) when it failed."""
    rt = plugin.runtime
    router = plugin._installed_router or _proxy_router()
    rid = events.new_request_id()
    request = {k: v for k, v in data.items() if k not in _NOT_RESENT}
    for key in ("litellm_metadata", "metadata"):  # the request's key metadata kept: billed to the same key
        meta = data.get(key)
        if isinstance(meta, dict) and events.REQUEST_ID_KEY in meta:
            request[key] = {**meta, events.REQUEST_ID_KEY: rid}
    if mark.added_logprobs:
        request.pop("logprobs", None)
    escalation = rt.open_call(rid, first.alias, first.session)
    # the same caller: who may give feedback, whose team's spend it paces, its conversation, and
    # what it may use (its tenant's models, its policy layer, its request's limits)
    escalation.key, escalation.pace, escalation.conversation = first.key, first.pace, first.conversation
    escalation.tenant, escalation.layer, escalation.limits = first.tenant, first.layer, first.limits
    escalation.local_first = Side(CLOUD)
    started = time.monotonic()
    try:
        if router is None:
            raise RuntimeError("no Router to escalate through")
        response = await router.acompletion(**request)
    except Exception as exc:  # the client keeps the local answer
        log.warning("aisia: local-first escalation of %s failed after %.2fs: %s", first.alias,
                    time.monotonic() - started, exc)
        rt.close_call(escalation)
        return escalation, None
    return escalation, response


def _proxy_router():
    import sys

    return getattr(sys.modules.get("litellm.proxy.proxy_server"), "llm_router", None)
