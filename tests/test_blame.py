"""The one rule for whose failure it is (aisia_plugin/blame.py), case by case: every failure kind
alone, with a client-set timeout, after a failure on another deployment (same provider or
another), an answer already under way, LiteLLM's own refusals and guards, and the peers' check
by key. The failures are built from LiteLLM's own exception objects where the proxy sees those."""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

import litellm  # noqa: E402
import pytest  # noqa: E402

from aisia_plugin import blame  # noqa: E402
from aisia_plugin.blame import AttemptFailure, OutlierRule, PeerCalls, RecentCalls, RequestFacts  # noqa: E402
from aisia_plugin.breaker import FailureKind  # noqa: E402
from aisia_plugin.litellm import events  # noqa: E402
from aisia_plugin.policy import load_policy  # noqa: E402

CB = load_policy().circuit_breaker
DEFAULT_RULE = OutlierRule.of(CB)  # the schema's numbers: 10 s, 5 peer calls, 80 %


def rule(**changes) -> OutlierRule:
    return replace(DEFAULT_RULE, **changes)


def failed(exc: BaseException, dep: str = "d1", provider: str = "openai", elapsed: float | None = None,
           answered: bool = False) -> AttemptFailure:
    """A failed attempt as the proxy builds it from LiteLLM's exception."""
    return events.attempt_failure(events.from_exception(dep, exc, elapsed), provider, (dep,), answered)


def server_error(text: str = "upstream exploded") -> BaseException:
    return litellm.InternalServerError(text, llm_provider="openai", model="m")


def dropped() -> BaseException:
    return litellm.APIConnectionError("Connection error: server disconnected without sending a response",
                                      llm_provider="openai", model="m")


def timeout() -> BaseException:
    return litellm.Timeout("Request timed out", model="m", llm_provider="openai")


CLIENT_TIMEOUT = RequestFacts(client_timeout=True, client_timeout_s=0.001)


# -- one failure alone --------------------------------------------------------------------------
@pytest.mark.parametrize("exc", [
    server_error(), dropped(), timeout(),
    litellm.ServiceUnavailableError("down", llm_provider="openai", model="m"),
    litellm.BadGatewayError("bad gateway", llm_provider="openai", model="m"),
], ids=["500", "connection", "timeout", "503", "502"])
def test_a_provider_failure_alone_counts_and_is_tried_elsewhere(exc):
    v = blame.judge(CB, failed(exc))
    assert (v.fault, v.reason, v.kind, v.counts, v.retry_elsewhere, v.callers) == \
        ("provider", "provider_error", FailureKind.PROVIDER, True, True, False)


def test_a_rate_limit_backs_off_without_counting():
    v = blame.judge(CB, failed(litellm.RateLimitError("slow down", llm_provider="openai", model="m")))
    assert (v.fault, v.reason, v.kind, v.counts, v.retry_elsewhere) == \
        ("provider", "rate_limited", FailureKind.RATE_LIMIT, False, True)


@pytest.mark.parametrize("exc", [
    litellm.BadRequestError("bad", model="m", llm_provider="openai"),
    litellm.ContextWindowExceededError("too long", model="m", llm_provider="openai"),
    litellm.AuthenticationError("key", llm_provider="openai", model="m"),
], ids=["400", "context-window", "401"])
def test_a_client_error_is_the_callers_as_litellm_reports_it(exc):
    v = blame.judge(CB, failed(exc))
    assert (v.fault, v.reason, v.counts) == ("caller", "client_error", False)
    assert v.client_status is None  # LiteLLM's own 4xx reaches the client as it is


def test_a_kind_the_policy_does_not_count_is_the_providers_uncounted():
    cfg = CB.model_copy(update={"count_timeouts": False, "count_connection_errors": False})
    for exc in (timeout(), dropped()):
        v = blame.judge(cfg, failed(exc))
        assert (v.fault, v.reason, v.counts, v.retry_elsewhere) == ("provider", "not_counted", False, True)


# -- what the request says of itself -------------------------------------------------------------
@pytest.mark.parametrize("exc", [timeout(), litellm.APIError(408, "Request Timeout", llm_provider="openai", model="m")],
                         ids=["Timeout", "408"])
def test_a_timeout_the_client_set_is_the_callers_a_408_and_not_retried(exc):
    v = blame.judge(CB, failed(exc, elapsed=0.002), CLIENT_TIMEOUT, alias="auto")
    assert (v.fault, v.reason, v.kind, v.counts, v.retry_elsewhere) == \
        ("caller", "client_timeout", FailureKind.CLIENT, False, False)
    assert v.client_status == 408 and "timeout this request set (0.001 s)" in v.client_message
    assert "'auto'" in v.client_message


def test_a_client_set_timeout_of_unknown_value_still_makes_a_timeout_the_callers():
    v = blame.judge(CB, failed(timeout()), RequestFacts(client_timeout=True))
    assert v.reason == "client_timeout" and not v.counts


def test_a_provider_timeout_before_the_clients_could_fire_is_the_providers():
    # LiteLLM's is_caller_timeout_408 reads it the same way: 1 s into a 30 s client timeout.
    v = blame.judge(CB, failed(timeout(), elapsed=1.0), RequestFacts(client_timeout=True, client_timeout_s=30.0))
    assert (v.reason, v.counts) == ("provider_error", True)


def test_a_client_set_timeout_changes_nothing_for_other_failures():
    v = blame.judge(CB, failed(server_error(), elapsed=0.5), CLIENT_TIMEOUT)
    assert (v.reason, v.counts) == ("provider_error", True)


def test_a_client_that_went_away_is_the_callers():
    v = blame.judge(CB, failed(timeout()), RequestFacts(client_aborted=True))
    assert (v.fault, v.reason, v.counts, v.client_status) == ("caller", "client_abort", False, 499)
    import asyncio

    assert blame.judge(CB, failed(asyncio.CancelledError())).reason == "client_abort"


# -- LiteLLM's own refusals and guards -----------------------------------------------------------
def test_litellms_repeated_chunk_guard_is_not_the_deployments_even_mid_stream():
    guard = server_error("The model is repeating the same chunk = lorem.")
    for answered in (False, True):
        v = blame.judge(CB, failed(guard, answered=answered))
        assert (v.fault, v.reason, v.counts, v.retry_elsewhere) == ("litellm", "litellm_guard", False, False)
        assert v.client_status == 422 and "repeating the same chunk" in v.client_message


def test_litellms_router_refusal_is_not_the_deployments():
    v = blame.judge(CB, failed(litellm.RateLimitError("No deployments available for selected model",
                                                      llm_provider="", model="auto")))
    assert (v.fault, v.reason, v.counts) == ("litellm", "litellm_refusal", False)


# -- an answer under way -------------------------------------------------------------------------
def test_a_stream_broken_after_its_first_chunk_counts_and_cannot_be_retried():
    v = blame.judge(CB, failed(dropped(), answered=True))
    assert (v.fault, v.reason, v.counts, v.retry_elsewhere) == ("provider", "broken_after_answer", True, False)
    assert blame.judge(CB, failed(timeout(), answered=True), CLIENT_TIMEOUT).reason == "client_timeout"


def test_a_stream_broken_on_a_second_provider_is_the_callers_too():
    # (LiteLLM may retry a stream broken midway elsewhere: MidStreamFallbackError.)
    earlier = failed(dropped(), "vllm-a", "hosted_vllm", answered=True)
    v = blame.judge(CB, failed(dropped(), "studio-b", "lm_studio", answered=True), earlier=[earlier])
    assert (v.reason, v.counts, v.retry_elsewhere, v.acquits) == ("failed_on_another_provider", False, False,
                                                                  ("vllm-a",))


# -- the request's earlier failures ----------------------------------------------------------------
@pytest.mark.parametrize("first,second", [
    (server_error(), server_error()),
    (server_error(), dropped()),
    (dropped(), timeout()),
    (litellm.ServiceUnavailableError("down", llm_provider="openai", model="m"), server_error("other words")),
], ids=["500+500", "500+dropped", "dropped+timeout", "503+500"])
def test_a_failure_on_a_second_provider_makes_the_request_the_callers(first, second):
    earlier = failed(first, "vllm-a", "hosted_vllm")
    v = blame.judge(CB, failed(second, "studio-b", "lm_studio"), earlier=[earlier], alias="auto")
    assert (v.fault, v.reason, v.counts, v.retry_elsewhere) == \
        ("caller", "failed_on_another_provider", False, False)
    assert v.acquits == ("vllm-a",) and v.client_status == 422
    assert "vllm-a" in v.client_message and "studio-b" in v.client_message


def test_the_same_plainly_provider_side_failure_on_one_provider_is_that_providers():
    # Two regions of one provider down at once: both count.
    v = blame.judge(CB, failed(server_error(), "east"), earlier=[failed(server_error(), "west")])
    assert (v.reason, v.counts, v.acquits) == ("provider_error", True, ())


def test_the_same_failure_litellm_raised_on_the_request_is_the_callers_on_one_provider():
    weird = litellm.APIConnectionError("Invalid user message at index 0", llm_provider="openai", model="m")
    v = blame.judge(CB, failed(weird, "b"), earlier=[failed(weird, "a")])
    assert (v.reason, v.counts, v.client_status, v.acquits) == ("same_failure_elsewhere", False, 400, ("a",))


def test_a_different_failure_on_one_provider_counts_both():
    v = blame.judge(CB, failed(dropped(), "b"), earlier=[failed(server_error(), "a")])
    assert (v.reason, v.counts) == ("provider_error", True)


def test_a_rate_limit_elsewhere_is_no_evidence_against_the_request():
    limited = failed(litellm.RateLimitError("slow", llm_provider="openai", model="m"), "a", "openai")
    v = blame.judge(CB, failed(server_error(), "b", "hosted_vllm"), earlier=[limited])
    assert (v.reason, v.counts) == ("provider_error", True)


def test_an_unknown_provider_never_makes_two_providers():
    v = blame.judge(CB, failed(server_error(), "b", ""), earlier=[failed(dropped(), "a", "")])
    assert v.counts


# -- the peers' check by key ---------------------------------------------------------------------
COUNTS = blame.Verdict("provider", "provider_error", FailureKind.PROVIDER, True)
RULE = DEFAULT_RULE


def test_the_default_numbers_are_the_schemas():
    assert (RULE.enabled, RULE.window_s, RULE.min_peer_calls, RULE.min_peer_success_rate) == (True, 10.0, 5, 0.8)


@pytest.mark.parametrize("peers,withheld", [
    (PeerCalls(5, 5), True), (PeerCalls(10, 8), True),  # the others are served: the key's own
    (PeerCalls(4, 4), False),  # too few peers: counts as without them
    (PeerCalls(10, 7), False), (PeerCalls(5, 0), False),  # the others fail too: an outage
])
def test_a_keys_failure_where_the_other_keys_are_served_does_not_count(peers, withheld):
    v = blame.outlier_verdict(COUNTS, peers, RULE)
    assert (not v.counts) is withheld
    if withheld:
        assert (v.fault, v.reason, v.retry_elsewhere) == ("caller", "key_outlier", True)


def test_the_peers_check_is_off_when_disabled_and_leaves_uncounted_verdicts_alone():
    assert blame.outlier_verdict(COUNTS, PeerCalls(50, 50), rule(enabled=False)) is COUNTS
    caller = blame.judge(CB, failed(timeout()), CLIENT_TIMEOUT)
    assert blame.outlier_verdict(caller, PeerCalls(50, 50), RULE) is caller


def test_recent_calls_keep_the_other_keys_calls_within_the_window_and_the_bound():
    recent = RecentCalls(rule(window_s=10.0, max_calls=8))
    for i in range(4):
        recent.note("d", "tenant-b", True, now=100.0 + i)
        recent.note("d", "tenant-a", False, now=100.0 + i)
    assert recent.peers("d", "tenant-a", now=105.0) == PeerCalls(4, 4)
    assert recent.peers("d", "tenant-b", now=105.0) == PeerCalls(4, 0)
    assert recent.peers("d", "tenant-a", now=112.5) == PeerCalls(1, 1)  # older than 10 s: forgotten
    assert recent.peers("other", "tenant-a", now=105.0) == PeerCalls()
    for i in range(20):
        recent.note("d", f"k{i}", True, now=200.0)
    assert recent.peers("d", "nobody", now=200.0).calls == 8  # at most max_calls per deployment
    recent.forget("d")  # an operator's reset: the deployment is fixed
    assert recent.peers("d", "nobody", now=200.0) == PeerCalls()


# -- what the proxy reads of a request -------------------------------------------------------------
def test_the_request_facts_come_from_litellms_client_side_timeout_mark():
    assert events.request_facts({"client_side_timeout": True, "timeout": 0.001}) == CLIENT_TIMEOUT
    assert events.request_facts({"litellm_params": {"client_side_timeout": True, "stream_timeout": 2,
                                                    "timeout": 600}}).client_timeout_s == 2.0
    assert events.request_facts({"client_side_timeout": True}) == RequestFacts(client_timeout=True)
    # A timeout without LiteLLM's mark is the deployment's own (the config's): not the client's.
    assert events.request_facts({"timeout": 0.001, "litellm_params": {"timeout": 0.001}}) == blame.NO_FACTS
