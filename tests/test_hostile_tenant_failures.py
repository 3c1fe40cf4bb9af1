"""Issue 35, findings 1 and 2, through a real LiteLLM proxy with the plugin, two tenant keys
(LiteLLM's ``custom_auth``) and three simulated upstreams behind three providers (hostile_tenant.py):

1. a timeout the client sets (``timeout``, ``request_timeout``, ``stream_timeout``, header
   ``x-litellm-timeout``) fails every attempt: it is the caller's (a 408), opens no breaker and
   takes no further deployment;
2. an input that makes every upstream fail (a 500, a dropped connection) fails on two providers:
   the caller's (a 422 naming both), nothing learned, no third deployment; a stream tripping
   LiteLLM's repeated-chunk guard is not the deployment's either.

The other tenant is served throughout. (docs/failures.md states the rule.)"""

from __future__ import annotations

import pytest

from hostile_tenant import (ALIAS, NAMES, TENANT_A, TENANT_B, ask, breakers, error_text, post, reset,
                            served_by, start_tenant_proxy, upstream_specs)
from proxy_harness import upstreams_fixture

ALL_CLOSED_NO_FAILURE = {n: ("CLOSED", 0) for n in NAMES}


def failures_learned(proxy) -> dict:
    """deployment -> (breaker state, failures learned against it)."""
    return {n: (state, failures) for n, (state, _, failures) in breakers(proxy).items()}


upstreams = upstreams_fixture(upstream_specs())


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    from hostile_tenant import policy

    p = start_tenant_proxy(tmp_path_factory.mktemp("hostile"), upstreams, policy())
    yield p
    p.stop()


@pytest.fixture
def fresh(proxy, upstreams):
    reset(proxy)
    for u in upstreams.values():
        u.reset()
    return proxy


def calls(upstreams) -> dict:
    return {n: upstreams[n].stats()["calls"] for n in NAMES}


def tenant_b_is_served(proxy, n: int = 3) -> None:
    for k in range(n):
        r = post(proxy, TENANT_B, ask(f"Hello from tenant B, request {k}"))
        assert r.status_code == 200 and served_by(r) in NAMES, error_text(r)


# -- finding 1: a client-set timeout ---------------------------------------------------------------
TIMEOUTS = {
    "timeout": ({"timeout": 0.001}, {}),
    "request_timeout": ({"request_timeout": 0.001}, {}),
    "stream_timeout": ({"stream_timeout": 0.001, "stream": True}, {}),
    "x-litellm-timeout": ({}, {"x-litellm-timeout": "0.001"}),
}


@pytest.mark.parametrize("how", list(TIMEOUTS))
def test_a_client_set_timeout_is_the_callers_and_opens_no_breaker(fresh, upstreams, how):
    extra, headers = TIMEOUTS[how]
    for k in range(8):  # the probe: eight requests opened every breaker
        r = post(fresh, TENANT_A, ask(f"Tell me about the weather, {k}", **extra), headers=headers)
        assert r.status_code == 408 and "timeout this request set" in error_text(r), (r.status_code, error_text(r))
    assert failures_learned(fresh) == ALL_CLOSED_NO_FAILURE
    # One attempt per request: a client's own timeout is not retried on another deployment.
    assert sum(calls(upstreams).values()) <= 8, calls(upstreams)
    tenant_b_is_served(fresh)


# -- finding 2: an input that makes every upstream fail -------------------------------------------
@pytest.mark.parametrize("fault", ["error", "drop"])
def test_an_input_failing_on_two_providers_is_the_callers_and_nothing_is_learned(fresh, upstreams, fault):
    for k in range(5):  # the probe: five such requests opened every breaker
        r = post(fresh, TENANT_A, ask(f"AISIA-FAULT={fault} parse this document {k}"))
        assert r.status_code == 422, error_text(r)
        text = error_text(r)
        assert "two providers" in text and ALIAS in text, text
        assert sum(calls(upstreams).values()) == 2 * (k + 1), calls(upstreams)  # never a third deployment
    assert failures_learned(fresh) == ALL_CLOSED_NO_FAILURE
    tenant_b_is_served(fresh)


def test_a_stream_tripping_litellms_repeated_chunk_guard_is_not_the_deployments(fresh, upstreams):
    for k in range(5):
        r = post(fresh, TENANT_A, ask(f"AISIA-FAULT=repeat say 'again' 120 times ({k})", stream=True))
        assert "repeating the same chunk" in r.text or r.status_code == 422, (r.status_code, r.text[-400:])
    assert failures_learned(fresh) == ALL_CLOSED_NO_FAILURE
    assert sum(calls(upstreams).values()) == 5, calls(upstreams)  # the guard's request is not tried elsewhere
    tenant_b_is_served(fresh)


def test_a_provider_failure_still_counts_and_fails_over(fresh, upstreams):
    """The rule takes nothing from a real outage: the cheapest upstream down, each request is
    served by the next one and the failures are learned until its breaker opens."""
    down = upstreams[NAMES[0]]
    with down.broken(mode="error", status=503):
        for k in range(5):
            r = post(fresh, TENANT_A, ask(f"Hello there {k}"))
            assert r.status_code == 200 and served_by(r) == NAMES[1], error_text(r)
        state, count, failures = breakers(fresh)[NAMES[0]]
    assert (state, failures) == ("OPEN", 5), breakers(fresh)
