"""LiteLLM's per-attempt logging events as the core's Outcomes.

One success or failure event arrives per attempt (a retry is a new attempt of the same
``litellm_call_id``); a stream's success event arrives when the stream has completed."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, Optional

from ..breaker import exception_names, exception_status, parse_retry_after
from ..outcome import Outcome

_MESSAGE_CHARS = 300  # enough for the classifier's phrases; an upstream body can be huge


def _seconds(a: Any, b: Any) -> Optional[float]:
    if isinstance(a, datetime) and isinstance(b, datetime):
        return max(0.0, (b - a).total_seconds())
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return max(0.0, float(b) - float(a))
    return None


def _dict(v: Any) -> Mapping:
    return v if isinstance(v, Mapping) else {}


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


def from_retry_record(crumb: Mapping) -> Outcome:
    """A failed attempt from the Router's retry record (``metadata["previous_models"]``): the
    exception's class name and text, no status, latency or headers."""
    name = crumb.get("exception_type")
    return Outcome(str(crumb.get("deployment_id") or ""), False, error_type=[str(name)] if name else None,
                   message=str(crumb.get("exception_string") or "")[:_MESSAGE_CHARS])


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
    """LiteLLM's own "no deployment available" (every candidate cooling down): no upstream was
    called, so it is no attempt's outcome."""
    try:
        text = str(exc)
    except Exception:
        return False
    return "No deployments available" in text


def describe_failure(outcome: Outcome) -> str:
    """One line for the client's error and the explain log: '500 InternalServerError'."""
    names = outcome.error_type
    name = names[0] if isinstance(names, (list, tuple)) and names else (names or "error")
    return f"{outcome.status_code} {name}" if outcome.status_code else str(name)
