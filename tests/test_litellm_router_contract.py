"""The plugin's contract with LiteLLM's Router, in this process (no proxy), in front of simulated
upstreams over HTTP: what the plugin relies on in every LiteLLM generation it supports
(``scripts/test_litellm_versions.sh --router-only VERSION`` runs this module against a plain
``litellm==VERSION``).

- the aliases are priority routing groups of the Router: an alias is callable, and the filter
  routes it among its members;
- failover across candidates: a deployment that failed is not tried again for the request, the
  next-ranked one serves;
- learning from each attempt: the failing deployment is learned as failed and the serving one as
  served, once each;
- the breaker opens after repeated failures, and an open deployment is no longer sent anything;
- LiteLLM's fallbacks: an alias whose candidates all fail falls back to another alias;
- ranking through ``order``: a candidate LiteLLM's own checks drop (a tag the request does not
  allow, with ``enable_tag_filtering``) leaves the next-ranked one to serve, without a retry and
  without anything learned against the dropped one."""

from __future__ import annotations

import asyncio

import pytest
from router_harness import PluginRouters

from aisia_plugin.litellm.callback import Refused
from proxy_harness import deployment, start_upstreams, stop_upstreams

POLICY = """\
version: 1
circuit_breaker: {failure_threshold: 2, timeout_s: 3600}
aliases:
  c/pool:
    description: three deployments, the cheapest first
    strategy: cost
    candidates: {models: [ca, cb, cc]}
    failover: {attempts: 2}
  c/fails:
    description: both candidates fail; LiteLLM falls back to c/backup
    strategy: cost
    candidates: {models: [fa, fb]}
    failover: {attempts: 1}
  c/backup:
    description: its cheaper candidate fails too
    strategy: cost
    candidates: {models: [ka, kb]}
    failover: {attempts: 1}
  c/tags:
    description: the two cheapest candidates carry no eu tag
    strategy: cost
    candidates: {models: [us-a, us-b, eu-c, eu-d]}
"""

# name -> (input $/1M, tags)
UPSTREAMS = {"ca": (0.1, None), "cb": (0.2, None), "cc": (0.3, None),
             "fa": (0.1, None), "fb": (0.2, None), "ka": (0.1, None), "kb": (0.2, None),
             "us-a": (0.1, ["us"]), "us-b": (0.2, ["us"]), "eu-c": (0.3, ["eu"]), "eu-d": (0.4, ["eu"])}
HELLO = [{"role": "user", "content": "Hello, how are you today?"}]


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, (c, _) in UPSTREAMS.items()])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture
def make_router(tmp_path, upstreams):
    """make_router(**router_settings) -> (a Router with the plugin as its callback and the aliases
    installed, the plugin). LiteLLM's own cooldowns are off unless a test asks for them, so that
    what keeps a deployment out is the plugin's doing."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    routers = PluginRouters([policy])
    for u in upstreams.values():
        u.reset()
    model_list = [deployment(name, u, litellm_params={"tags": UPSTREAMS[name][1]} if UPSTREAMS[name][1] else None)
                  for name, u in upstreams.items()]
    try:
        yield lambda **settings: routers.make(model_list, **{"num_retries": 2, "disable_cooldowns": True, **settings})
    finally:
        routers.close()


def calls(upstreams) -> dict:
    return {name: u.stats()["calls"] for name, u in upstreams.items() if u.stats()["calls"]}


def learned(plugin) -> dict:
    """(outcomes learned, error rate, breaker) per deployment the plugin learned anything of."""
    return {dep: (row["count"], row["error_rate"], row["breaker"])
            for dep, row in plugin.runtime.store.stats().items() if row["count"] or row["breaker"] != "CLOSED"}


async def settled(plugin, expected_count: int, timeout_s: float = 20.0) -> dict:
    """What the plugin learned once it counts `expected_count` outcomes (LiteLLM logs a success
    in the background, after the response), or what it is when the time is up."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        now = learned(plugin)
        if sum(c for c, _, _ in now.values()) >= expected_count or loop.time() > deadline:
            return now
        await asyncio.sleep(0.02)


def served_by(reply) -> str:
    return reply._hidden_params["model_id"]


async def test_an_alias_is_a_routing_group_the_filter_routes_among_its_members(make_router, upstreams):
    router, plugin = make_router()
    groups = {g["group_name"]: g for g in router.get_settings().get("routing_groups") or []}
    assert set(groups["c/pool"]["models"]) == {"ca", "cb", "cc"}
    replies = [await router.acompletion(model="c/pool", messages=HELLO) for _ in range(3)]
    # The cost strategy's choice, every time: the cheapest member.
    assert [served_by(r) for r in replies] == ["ca"] * 3
    assert calls(upstreams) == {"ca": 3}
    decisions = [e["decision"] for e in plugin.runtime.explain]
    assert len(decisions) == 3
    assert {row.id for row in decisions[0].scores} == {"ca", "cb", "cc"}
    assert await settled(plugin, 3) == {"ca": (3, 0.0, "CLOSED")}
    # A member's own name is still the user's model, routed by LiteLLM alone.
    assert served_by(await router.acompletion(model="cc", messages=HELLO)) == "cc"
    assert len(plugin.runtime.explain) == 3


async def test_a_failed_deployment_is_not_retried_the_next_ranked_serves_each_learned_once(make_router, upstreams):
    router, plugin = make_router()
    upstreams["ca"].control(mode="error", status=500)
    reply = await router.acompletion(model="c/pool", messages=HELLO)
    assert served_by(reply) == "cb"
    assert calls(upstreams) == {"ca": 1, "cb": 1}
    assert await settled(plugin, 2) == {"ca": (1, 1.0, "CLOSED"), "cb": (1, 0.0, "CLOSED")}
    # Two attempts, the second deciding without the deployment that failed.
    attempts = list(plugin.runtime.explain)
    assert [e["attempt"] for e in attempts] == [0, 1]
    assert plugin.runtime.render_explain(1)[0]["excluded_after_failure"] == ["ca"]  # (newest first)


async def test_every_candidate_failing_within_the_budget_is_one_clear_error(make_router, upstreams):
    router, plugin = make_router()
    for name in ("ca", "cb", "cc"):
        upstreams[name].control(mode="error", status=503)
    with pytest.raises(Exception) as err:
        await router.acompletion(model="c/pool", messages=HELLO)
    # The alias's failover budget (2 attempts after the first) bounds what LiteLLM sends.
    assert calls(upstreams) == {"ca": 1, "cb": 1, "cc": 1}
    assert "c/pool" in str(err.value) or isinstance(err.value, Refused)
    assert await settled(plugin, 3) == {"ca": (1, 1.0, "CLOSED"), "cb": (1, 1.0, "CLOSED"),
                                        "cc": (1, 1.0, "CLOSED")}


async def test_the_breaker_opens_after_repeated_failures_and_keeps_the_deployment_out(make_router, upstreams):
    router, plugin = make_router()
    upstreams["ca"].control(mode="error", status=500)
    for _ in range(2):  # failure_threshold: 2
        assert served_by(await router.acompletion(model="c/pool", messages=HELLO)) == "cb"
    now = await settled(plugin, 4)
    assert now["ca"] == (2, 1.0, "OPEN"), now
    for _ in range(3):
        assert served_by(await router.acompletion(model="c/pool", messages=HELLO)) == "cb"
    assert calls(upstreams) == {"ca": 2, "cb": 5}
    decision = list(plugin.runtime.explain)[-1]["decision"]
    excluded = {row.id: row.excluded for row in decision.scores}
    assert excluded["ca"] and "OPEN" in excluded["ca"], excluded


async def test_an_alias_falls_back_to_another_alias(make_router, upstreams):
    router, plugin = make_router(fallbacks=[{"c/fails": ["c/backup"]}])
    for name in ("fa", "fb", "ka"):
        upstreams[name].control(mode="error", status=500)
    reply = await router.acompletion(model="c/fails", messages=HELLO)
    assert served_by(reply) == "kb"
    # Each alias spent its own budget (one failover each): every candidate was tried once.
    assert calls(upstreams) == {"fa": 1, "fb": 1, "ka": 1, "kb": 1}
    assert await settled(plugin, 4) == {"fa": (1, 1.0, "CLOSED"), "fb": (1, 1.0, "CLOSED"),
                                        "ka": (1, 1.0, "CLOSED"), "kb": (1, 0.0, "CLOSED")}


async def test_a_candidate_litellm_drops_by_its_tags_leaves_the_next_ranked_to_serve(make_router, upstreams):
    router, plugin = make_router(enable_tag_filtering=True)
    for _ in range(3):
        reply = await router.acompletion(model="c/tags", messages=HELLO, metadata={"tags": ["eu"]})
        # The plugin ranked us-a, us-b, eu-c, eu-d (cost); LiteLLM's tag filter kept the eu ones
        # and its order filter the best of them: served at once, no retry.
        assert served_by(reply) == "eu-c"
    assert calls(upstreams) == {"eu-c": 3}
    assert await settled(plugin, 3) == {"eu-c": (3, 0.0, "CLOSED")}
    # The plugin's first choice for the request was the cheapest, us-a: LiteLLM refused it.
    last = list(plugin.runtime.explain)[-1]["request_id"]
    assert [e["decision"] for e in plugin.runtime.explain if e["request_id"] == last][0].deployment_id == "us-a"


def test_a_litellm_outside_the_declared_range_is_named(monkeypatch):
    """Installed past pip's check (``--no-deps``, LiteLLM upgraded afterwards), the plugin says
    which LiteLLM it found and the range it declares (read from its own installed metadata)."""
    import importlib.metadata

    from aisia_plugin.litellm import compat

    assert compat.outside_declared_range() is None  # the version under test is in the range
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.200.0" if name == "litellm" else real(name))
    message = compat.outside_declared_range()
    assert message is not None and "LiteLLM 1.200.0 is outside" in message and "(litellm<" in message, message
