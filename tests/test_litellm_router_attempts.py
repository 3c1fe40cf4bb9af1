"""The plugin's per-attempt learning inside a real ``litellm.Router`` (in this process, no proxy,
so no pre-call hook screens the request), in front of simulated upstreams over HTTP.

A request LiteLLM refuses inside the provider call (an unknown user content part: LiteLLM raises
it as a connection error with status 500, before anything is sent) fails the same way on every
deployment it is retried on. The second such failure makes it the caller's: no further
deployment is tried and nothing is learned against any of them. A provider failure, by contrast,
is learned and failed over."""

from __future__ import annotations

import asyncio

import pytest
from router_harness import PluginRouters

from aisia_plugin.litellm.callback import Refused
from proxy_harness import deployment, start_upstreams, stop_upstreams

POLICY = """\
version: 1
aliases:
  r/three:
    description: three healthy deployments
    strategy: cost
    candidates: {models: [ra, rb, rc]}
    failover: {attempts: 2}
"""


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in (("ra", 0.1), ("rb", 0.2), ("rc", 0.3))])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture
def routed(tmp_path, upstreams):
    """(a Router with the plugin as its callback and the alias installed, the plugin)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    routers = PluginRouters([policy])
    for u in upstreams.values():
        u.reset()
    try:
        yield routers.make([deployment(n, u) for n, u in upstreams.items()], num_retries=2)
    finally:
        routers.close()


def _learned(plugin) -> dict:
    return {dep: (row["count"], row["error_rate"], row["breaker"]) for dep, row in plugin.runtime.store.stats().items()}


def test_the_same_refusal_on_two_deployments_is_the_callers_and_nothing_is_learned(routed, upstreams):
    router, plugin = routed
    weird = [{"role": "user", "content": [{"type": "weird"}]}]
    with pytest.raises(Refused) as err:
        asyncio.run(router.acompletion(model="r/three", messages=weird))
    assert err.value.status_code == 400
    assert "failed the same way" in err.value.text and "Invalid user message" in err.value.text
    assert err.value.tried == ["ra", "rb"]  # the third deployment was not tried
    assert sum(u.stats()["calls"] for u in upstreams.values()) == 0
    assert all(count == 0 and rate == 0 for count, rate, _ in _learned(plugin).values()), _learned(plugin)


def test_a_provider_failure_is_learned_against_that_provider_and_failed_over(routed, upstreams):
    router, plugin = routed
    upstreams["ra"].control(mode="error", status=500)
    try:
        reply = asyncio.run(router.acompletion(model="r/three", messages=[{"role": "user", "content": "hi"}]))
    finally:
        upstreams["ra"].control(mode="ok")
    assert reply._hidden_params["model_id"] == "rb"
    # Learned as soon as the next attempt was answered (its own success arrives with its logging
    # event, in the background).
    learned = _learned(plugin)
    assert learned["ra"][:2] == (1, 1.0), learned


def test_a_responses_request_is_routed_on_its_input(routed):
    """The Responses API hands the filter no messages (the prompt is in ``input``): the decision
    still reads it (the simulated upstreams serve chat only, so the call itself fails)."""
    router, plugin = routed
    with pytest.raises(Exception):
        asyncio.run(router.aresponses(model="r/three", input="Write a Python function that merges two sorted lists"))
    decisions = [e["decision"] for e in plugin.runtime.explain]
    assert decisions and decisions[0].domain == "coding"


def test_a_request_with_its_own_timeout_takes_no_half_open_probe(routed, upstreams):
    """A half-open probe is only given to a request that could have succeeded (docs/failures.md):
    one carrying a client-set timeout (LiteLLM's ``client_side_timeout`` mark, which the proxy
    sets) goes to a deployment that is not recovering, and leaves the probe slot free."""
    from aisia_plugin.breaker import OPEN, BreakerState

    router, plugin = routed
    store = plugin.runtime.store
    hi = [{"role": "user", "content": "hi"}]
    store.put_breaker("ra", BreakerState(state=OPEN, failures=5, last_failure_time=plugin.runtime.engine.clock() - 1e5))
    reply = asyncio.run(router.acompletion(model="r/three", messages=hi, client_side_timeout=True, timeout=30))
    assert reply._hidden_params["model_id"] == "rb"
    assert upstreams["ra"].stats()["calls"] == 0 and store.breaker("ra").probes_in_flight == 0
    reply = asyncio.run(router.acompletion(model="r/three", messages=hi))  # a plain request probes it
    assert reply._hidden_params["model_id"] == "ra" and upstreams["ra"].stats()["calls"] == 1
