"""LiteLLM's exceptions and retry records as the core's outcomes (no proxy: the exception
objects are LiteLLM's own, built as its OpenAI provider builds them)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

import httpx  # noqa: E402
import litellm  # noqa: E402
import pytest  # noqa: E402

from aisia_plugin.breaker import FailureKind, classify_failure  # noqa: E402
from aisia_plugin.litellm import events  # noqa: E402
from aisia_plugin.policy import load_policy  # noqa: E402

CB = load_policy().circuit_breaker
REQUEST = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")


def kind(outcome):
    return classify_failure(CB, status_code=outcome.status_code, error_type=outcome.error_type,
                            message=outcome.message)


def test_a_429_with_retry_after_is_a_rate_limit_with_its_wait():
    exc = litellm.RateLimitError("slow down", llm_provider="openai", model="m",
                                 response=httpx.Response(429, headers={"retry-after": "30"}, request=REQUEST))
    out = events.from_exception("dep", exc)
    assert (out.deployment_id, out.success, out.status_code, out.retry_after_s) == ("dep", False, 429, 30.0)
    assert kind(out) is FailureKind.RATE_LIMIT


@pytest.mark.parametrize("exc,expected", [
    (litellm.InternalServerError("boom", llm_provider="openai", model="m"), FailureKind.PROVIDER),
    (litellm.ServiceUnavailableError("down", llm_provider="openai", model="m"), FailureKind.PROVIDER),
    (litellm.Timeout("slow", model="m", llm_provider="openai"), FailureKind.PROVIDER),
    (litellm.BadRequestError("bad", model="m", llm_provider="openai"), FailureKind.CLIENT),
    (litellm.ContextWindowExceededError("too long", model="m", llm_provider="openai"), FailureKind.CLIENT),
    (litellm.AuthenticationError("key", llm_provider="openai", model="m"), FailureKind.CLIENT),
])
def test_litellm_exceptions_are_classified(exc, expected):
    assert kind(events.from_exception("dep", exc)) is expected


def test_the_plugins_request_id_is_read_from_the_metadata_the_route_uses():
    assert events.request_id({"metadata": {events.REQUEST_ID_KEY: "r1"}, "litellm_call_id": "shared"}) == "r1"
    assert events.request_id({"litellm_metadata": {events.REQUEST_ID_KEY: "r2"}, "metadata": {}}) == "r2"
    assert events.request_id({"litellm_params": {"metadata": {events.REQUEST_ID_KEY: "r3"}}}) == "r3"
    # Never LiteLLM's call id: the client chooses it (x-litellm-call-id).
    assert events.request_id({"metadata": {}, "litellm_call_id": "c1"}) is None


def test_the_same_failure_on_two_deployments_has_one_signature():
    def failed(dep, model):
        exc = litellm.APIConnectionError(f"Invalid user message at index 0 ({model})", llm_provider="openai",
                                         model=model)
        return events.failure_signature(events.from_exception(dep, exc), (dep, model))

    assert failed("a", "openai/gpt-4o") == failed("b", "openai/gpt-4o-mini")
    other = litellm.InternalServerError("upstream exploded", llm_provider="openai", model="m")
    assert events.failure_signature(events.from_exception("a", other), ("a",)) != failed("a", "openai/gpt-4o")


def test_the_routers_own_no_deployment_error_is_no_attempts_outcome():
    exc = litellm.RateLimitError("No deployments available for selected model, Try again in 5 seconds",
                                 llm_provider="", model="auto")
    assert events.is_router_refusal(exc)
    assert not events.is_router_refusal(litellm.InternalServerError("boom", llm_provider="openai", model="m"))
    tags = ValueError("Not allowed to access model due to tags configuration. Passed model=auto and tags=['eu']")
    assert events.is_router_refusal(tags)
