"""LiteLLM's own request rules, applied to alias traffic before the decision.

LiteLLM checks a chat request's messages only inside the provider call, and reports what it
refuses there as a connection error from the deployment (status 500): learned as such, one
malformed request would count against every deployment it is retried on. And the Router's
``usage-based-routing-v2`` limits (a deployment's ``tpm`` and ``rpm``) are read by its
strategy, which a priority routing group (an alias) does not run. Both are asked here, with
LiteLLM's own data and counters, so that a malformed request is the caller's 400 and a
deployment at its limit is not a candidate."""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping, NamedTuple, Optional

log = logging.getLogger("aisia_plugin.litellm")

try:  # the content part types LiteLLM accepts in a user message (its own validation list)
    from litellm.types.llms.openai import ValidUserMessageContentTypes as _USER_CONTENT_TYPES
except ImportError:  # pragma: no cover - a LiteLLM without the list: OpenAI's types
    _USER_CONTENT_TYPES = ("text", "image_url", "input_audio", "file")
USER_CONTENT_TYPES = frozenset(_USER_CONTENT_TYPES)


# The APIs an alias does not route (its candidates are chosen for prompts): LiteLLM's call types.
NOT_ROUTED_CALL_TYPES = frozenset((
    "embedding", "aembedding", "embeddings", "image_generation", "aimage_generation", "image_edit", "aimage_edit",
    "moderation", "amoderation", "transcription", "atranscription", "audio_transcription", "speech", "aspeech",
    "rerank", "arerank"))


class RequestProblem(NamedTuple):
    """Why an alias request is refused before any deployment is tried: the caller's 400."""

    reason: str  # the metrics' refusal reason
    param: str  # the request's field at fault
    message: str


def request_problem(alias: str, call_type, data: Mapping) -> Optional[RequestProblem]:
    """An API the alias does not route, or messages LiteLLM would refuse inside the provider
    call (and report as that deployment's failure); None when the request may be routed."""
    kind = str(getattr(call_type, "value", call_type) or "")
    if kind in NOT_ROUTED_CALL_TYPES:
        return RequestProblem("unsupported_api", "model", f"alias {alias!r} routes chat, completion and responses "
                              f"requests; a {kind} request goes to an embedding, image or audio model by its own name")
    problem = message_problem(data.get("messages"))
    if problem is not None:
        return RequestProblem("invalid_request", problem[0], problem[1])
    return None


def message_problem(messages: Any) -> Optional[tuple[str, str]]:
    """(field, message) for the first part of `messages` that LiteLLM would refuse inside the
    provider call (a message that is not an object, a user content part of a type it does not
    know), None when the messages are acceptable. Nothing else is judged: whatever LiteLLM sends
    on is the provider's to accept or refuse."""
    if messages is None:
        return None
    if not isinstance(messages, list):
        return "messages", "messages must be a list of message objects"
    for i, m in enumerate(messages):
        if type(m) is not dict and not isinstance(m, Mapping):  # a dict, told without typing's ABC check
            return f"messages[{i}]", f"messages[{i}] must be a message object, not {type(m).__name__}"
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") not in USER_CONTENT_TYPES:
                kind = part.get("type")
                return (f"messages[{i}].content[{j}].type",
                        f"messages[{i}].content[{j}].type: {kind!r} is not a content part type LiteLLM accepts "
                        f"in a user message (one of: {', '.join(sorted(USER_CONTENT_TYPES))})")
    return None


def _limit(deployment: Mapping, name: str) -> Optional[float]:
    """A deployment's tpm or rpm, where LiteLLM's usage-based strategy reads it."""
    for holder in (deployment, deployment.get("litellm_params") or {}, deployment.get("model_info") or {}):
        value = holder.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


async def over_usage_limits(router, deployments: Iterable[Mapping], messages) -> dict[str, str]:
    """The deployments LiteLLM's ``usage-based-routing-v2`` would not pick now, with why: the
    minute's tokens plus this request's over ``tpm``, or the minute's requests at ``rpm`` (the
    strategy's own rule, on its own counters). Empty when the Router runs another strategy, or
    when no deployment declares a limit."""
    if router is None or getattr(router, "routing_strategy", None) != "usage-based-routing-v2":
        return {}
    deps = [d for d in deployments if _limit(d, "tpm") is not None or _limit(d, "rpm") is not None]
    strategy = getattr(router, "lowesttpm_logger_v2", None)
    if not deps or strategy is None:
        return {}
    try:
        tpm_keys, rpm_keys = strategy.usage_counter_keys(deps)
        values = await router.cache.async_batch_get_cache(keys=tpm_keys + rpm_keys) or [None] * (2 * len(deps))
        need_tokens = any(_limit(d, "tpm") is not None for d in deps)
        tokens = 0
        if need_tokens and messages:
            import litellm

            tokens = litellm.token_counter(messages=messages)
    except Exception:  # reading LiteLLM's counters must never fail a request
        log.debug("aisia: could not read LiteLLM's usage counters", exc_info=True)
        return {}
    out = {}
    for k, d in enumerate(deps):
        dep_id = str((d.get("model_info") or {}).get("id") or "")
        used_tpm, used_rpm = values[k] or 0, values[len(deps) + k] or 0
        tpm, rpm = _limit(d, "tpm"), _limit(d, "rpm")
        if tpm is not None and used_tpm + tokens > tpm:
            out[dep_id] = f"at its tpm limit ({used_tpm:g} + {tokens} tokens > {tpm:g} this minute)"
        elif rpm is not None and used_rpm + 1 >= rpm:
            out[dep_id] = f"at its rpm limit ({used_rpm:g} requests of {rpm:g} this minute)"
    return out
