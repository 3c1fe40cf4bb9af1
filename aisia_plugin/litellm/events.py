"""LiteLLM's per-attempt logging events as the core's Outcomes.

One success or failure event arrives per attempt (a retry is a new attempt of the same
``litellm_call_id``); a stream's success event arrives when the stream has completed."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any, Iterable, Mapping, Optional

from .. import blame
from ..breaker import exception_names, exception_status, parse_retry_after
from ..outcome import Outcome

_MESSAGE_CHARS = 300  # enough for the classifier's phrases; an upstream body can be huge


def _seconds(a: Any, b: Any) -> Optional[float]:
    if isinstance(a, datetime) and isinstance(b, datetime):
        return max(0.0, (b - a).total_seconds())
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return max(0.0, float(b) - float(a))
    return None


def is_mapping(v: Any) -> bool:
    """Whether `v` is a mapping; a plain dict or None (what LiteLLM hands over) is told without
    the Mapping ABC's ``isinstance``, which costs some thousands of instructions a call."""
    return type(v) is dict or (v is not None and isinstance(v, Mapping))


def _dict(v: Any) -> Mapping:
    """`v` when it is a mapping, else an empty one."""
    return v if is_mapping(v) else {}


def deployment_id(kwargs: Mapping) -> Optional[str]:
    info = _dict(_dict(kwargs.get("litellm_params")).get("model_info"))
    dep = info.get("id") or _dict(kwargs.get("standard_logging_object")).get("model_id")
    return str(dep) if dep else None


def model_group(kwargs: Mapping) -> Optional[str]:
    meta = _dict(_dict(kwargs.get("litellm_params")).get("metadata"))
    group = meta.get("model_group") or _dict(kwargs.get("standard_logging_object")).get("model_group")
    return str(group) if group else None


def call_id(kwargs: Mapping) -> Optional[str]:
    cid = kwargs.get("litellm_call_id") or _dict(kwargs.get("litellm_params")).get("litellm_call_id")
    return str(cid) if cid else None


def is_stream(kwargs: Mapping) -> bool:
    return bool(kwargs.get("stream") or _dict(kwargs.get("optional_params")).get("stream"))


def time_to_first_token(kwargs: Mapping, start_time: Any) -> Optional[float]:
    return _seconds(start_time, kwargs.get("completion_start_time"))


def _number(v: Any) -> Optional[float]:
    """`v` as a float when it is a number (not a bool), else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def success(kwargs: Mapping, start_time: Any, end_time: Any) -> Outcome:
    """A served attempt: its latency (a stream's, to its last chunk), LiteLLM's cost, tokens."""
    slo = _dict(kwargs.get("standard_logging_object"))
    latency = _seconds(start_time, end_time)
    if latency is None:
        latency = _number(slo.get("response_time"))
    cost = _number(kwargs.get("response_cost"))
    if cost is None:
        cost = _number(slo.get("response_cost"))
    tokens_in, tokens_out = _number(slo.get("prompt_tokens")), _number(slo.get("completion_tokens"))
    return Outcome(deployment_id(kwargs) or "", True, latency_s=latency, status_code=200, cost_usd=cost,
                   input_tokens=int(tokens_in) if tokens_in is not None else None,
                   output_tokens=int(tokens_out) if tokens_out is not None else None)


def _retry_after(exc: BaseException) -> Optional[float]:
    for holder in (exc, getattr(exc, "response", None)):
        headers = getattr(holder, "litellm_response_headers", None) if holder is exc else getattr(holder, "headers", None)
        if headers is None:
            continue
        try:
            value = headers.get("retry-after") or headers.get("Retry-After")
        except Exception:  # an odd headers object must not break learning
            value = None
        found = parse_retry_after(value)
        if found is not None:
            return found
    return None


def from_exception(deployment: str, exc: BaseException, latency_s: Optional[float] = None) -> Outcome:
    """A failed attempt from its exception: status, class names along the MRO, the start of the
    message (what the failure classifier reads) and the server's Retry-After."""
    try:
        message = str(exc)[:_MESSAGE_CHARS]
    except Exception:
        message = ""
    return Outcome(deployment, False, latency_s=latency_s, status_code=exception_status(exc),
                   error_type=exception_names(exc), message=message, retry_after_s=_retry_after(exc))


def failure(kwargs: Mapping, start_time: Any, end_time: Any) -> Outcome:
    """A failed attempt from its logging event (its exception, else LiteLLM's error record)."""
    exc = kwargs.get("exception")
    latency = _seconds(start_time, end_time)
    if isinstance(exc, BaseException):
        return from_exception(deployment_id(kwargs) or "", exc, latency)
    info = _dict(_dict(kwargs.get("standard_logging_object")).get("error_information"))
    status = _number(info.get("error_code"))
    return Outcome(deployment_id(kwargs) or "", False, latency_s=latency,
                   status_code=int(status) if status is not None else None,
                   error_type=info.get("error_class") or None, message=str(info.get("error_message") or "")[:_MESSAGE_CHARS])


def is_router_refusal(exc: BaseException) -> bool:
    """LiteLLM's own refusal to send the request (every candidate cooling down, at its limit,
    refused by tags or the pre-call checks; ``blame.LITELLM_REFUSALS``): no upstream was called,
    so it is no attempt's outcome."""
    try:
        text = str(exc)
    except Exception:
        return False
    return blame.is_litellm_refusal(text)


def _timeout_seconds(value: Any) -> Optional[float]:
    """A timeout a request carries as seconds (a number, or httpx.Timeout's read timeout)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if value == value and value >= 0 else None
    read = getattr(value, "read", None)
    return float(read) if isinstance(read, (int, float)) and not isinstance(read, bool) else None


_CLIENT_TIMEOUTS = ("timeout", "request_timeout", "stream_timeout")


def request_facts(data: Mapping) -> blame.RequestFacts:
    """What a request says about its own failures (``blame.RequestFacts``): whether its client
    set a timeout, as LiteLLM's proxy marks it (``client_side_timeout``, computed by the proxy
    from the body's ``timeout``, ``request_timeout``, ``stream_timeout`` and the
    ``x-litellm-timeout`` header, a client's own value stripped: litellm_pre_call_utils.py), on
    the request's data or, in a logging event, under ``litellm_params``; and its value."""
    params = _dict(data.get("litellm_params"))
    if not (data.get("client_side_timeout") or params.get("client_side_timeout")):
        return blame.NO_FACTS
    found = [s for s in (_timeout_seconds(data.get(k)) for k in _CLIENT_TIMEOUTS) if s is not None]
    if not found:
        found = [s for s in (_timeout_seconds(params.get(k)) for k in _CLIENT_TIMEOUTS) if s is not None]
    return blame.RequestFacts(client_timeout=True, client_timeout_s=min(found) if found else None)


def attempt_failure(outcome: Outcome, provider: str, names: Iterable[str], answered: bool = False) -> blame.AttemptFailure:
    """A failed attempt's outcome as the rule reads it (``blame.AttemptFailure``); `names`, the
    deployment's own (id, group, model), blanked out of its signature."""
    return blame.AttemptFailure(outcome.deployment_id, provider, outcome.status_code, outcome.error_type,
                                outcome.message, failure_signature(outcome, names), outcome.latency_s, answered)


REQUEST_ID_KEY = "aisia_request_id"  # the plugin's id of a client request, in its metadata


def request_metadata(data: Mapping) -> Mapping:
    """A request's metadata as LiteLLM carries it: ``litellm_metadata`` on the routes that use
    it, else ``metadata``; inside a logging event, under ``litellm_params``."""
    for meta in (data.get("litellm_metadata"), data.get("metadata")):
        if is_mapping(meta):
            return meta
    return _dict(_dict(data.get("litellm_params")).get("metadata"))


def request_id(data: Mapping) -> Optional[str]:
    """The plugin's id of the request, set by its pre-call hook (or by the filter, for a Router
    used without the proxy). Never LiteLLM's call id: a client chooses that one."""
    return request_id_in(request_metadata(data))


def request_id_in(meta: Mapping) -> Optional[str]:
    """``request_id`` of a request whose metadata (``request_metadata``) is already read."""
    rid = meta.get(REQUEST_ID_KEY)
    return str(rid) if rid else None


def new_request_id() -> str:
    """A fresh id of the plugin's: 128 random bits as 32 hex digits (``secrets.token_hex``, the
    bits ``uuid.uuid4().hex`` draws without building a UUID object, about 14k instructions of
    every alias request)."""
    return secrets.token_hex(16)


def stamp_request_id(data: dict) -> str:
    """Give a request the plugin's own id (``new_request_id``), in the metadata LiteLLM hands
    every attempt of it (``litellm_metadata`` where the route uses it, else ``metadata``, made
    when missing)."""
    rid = new_request_id()
    meta = data.get("litellm_metadata")
    if not isinstance(meta, dict):
        meta = data.get("metadata")
        if not isinstance(meta, dict):
            meta = data["metadata"] = {}
    meta[REQUEST_ID_KEY] = rid
    return rid


def failure_signature(outcome: Outcome, names: Iterable[str]) -> tuple:
    """``blame.signature`` of a failed attempt's outcome."""
    return blame.signature(outcome.status_code, outcome.error_type, outcome.message, names)


def describe_failure(outcome: Outcome) -> str:
    """One line for the client's error and the explain log: '500 InternalServerError'."""
    names = outcome.error_type
    name = names[0] if isinstance(names, (list, tuple)) and names else (names or "error")
    return f"{outcome.status_code} {name}" if outcome.status_code else str(name)


def prompt_messages(request: Mapping) -> Optional[list]:
    """The prompt of a request that has no ``messages`` as chat messages, for the features:
    the Responses API's ``input`` (a string or a list of items) or a completion's ``prompt``
    (a string or a list of them)."""
    for key in ("input", "prompt"):
        value = request.get(key)
        if isinstance(value, str):
            return [{"role": "user", "content": value}]
        if isinstance(value, list):
            out = []
            for item in value:
                if isinstance(item, str):
                    out.append({"role": "user", "content": item})
                elif isinstance(item, Mapping) and "content" in item:
                    out.append({"role": item.get("role") or "user", "content": item.get("content")})
            if out:
                return out
    return None


def session_of(data: Mapping, session_header: str, user_api_key_dict) -> Optional[str]:
    """The conversation a request belongs to, as an ``lkgp`` alias keeps it on its last good
    deployment (unhashed): LiteLLM's session id (its ``x-litellm-session-id`` header, or another
    session header LiteLLM reads), else the policy's session header (`session_header`,
    ``x-aisia-session`` by default), else the request's ``user``, else the API key."""
    value = data.get("litellm_session_id")
    meta = data.get("litellm_metadata") or data.get("metadata") or {}
    if meta.get("litellm_session_id_generated"):  # minted per request (missing_session_id: generate)
        value = None
    if not value:
        headers = (data.get("proxy_server_request") or {}).get("headers") or {}
        wanted = session_header.lower()
        for k, v in headers.items():
            if k.lower() == wanted:
                value = v
                break
    if not value:
        value = data.get("user") or None
    if not value:
        value = getattr(user_api_key_dict, "token", None) or getattr(user_api_key_dict, "api_key", None)
    return value or None
