"""What an alias request leaves to Python's cyclic garbage collector: nothing of the plugin's.
Its record (the call, its attempts, their decisions and explain entries) is freed by reference
counting once its last hook has run and the explain log has dropped it. A reference cycle in it
would keep all of that alive until a full collection; under concurrent traffic those records
reach the oldest generation first, and each full collection walks the proxy's whole heap
(benchmarks/results/proxy_profile.md, "Concurrency and the garbage collector"). What stays
alive longer (the explain log's entries, the served requests awaiting feedback) keeps almost
nothing the collector tracks: each such object is promoted to the oldest generation and walked by
every full collection until it goes.

Driven as the proxy drives a Router (pre-call hook, ``Router.acompletion``, headers hook), with
LiteLLM's mocked answer instead of an upstream."""

from __future__ import annotations

import asyncio
import gc

import pytest

from router_harness import PluginRouters

POLICY = """\
version: 1
proxy: {explain_history: 2}
aliases:
  gc/pair:
    description: two deployments
    strategy: ucb1
    candidates: {models: [gc-a, gc-b]}
"""
HELLO = [{"role": "user", "content": "Write a Python function that merges two sorted lists"}]


class _Key:
    token = "hashed-key"
    api_key = None


def _deployment(name: str) -> dict:
    return {"model_name": name, "litellm_params": {"model": f"openai/{name}", "api_base": "http://127.0.0.1:9/v1",
                                                   "api_key": "sk-x"},
            "model_info": {"id": name, "input_cost_per_token": 1e-7, "output_cost_per_token": 1e-7}}


@pytest.fixture(autouse=True)
def _collector_walks_only_this_tests_objects():
    """What was alive before the test (the suite's whole heap: LiteLLM, the modules, earlier
    tests' leftovers) is moved to the collector's permanent generation (gc.freeze): a collection
    then walks only what the test made, and gc.get_objects lists only that. Every object a request
    makes (its record, decisions, explain entries) is made after the freeze, so what is freed or
    left to the collector is counted as before, in milliseconds instead of half a second a walk."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _request(router, plugin) -> None:
    data = await plugin.async_pre_call_hook(_Key(), None, {"model": "gc/pair", "messages": HELLO}, "acompletion")
    response = await router.acompletion(**data, mock_response="one two three")
    await plugin.async_post_call_response_headers_hook(data, _Key(), response)


async def _settled(plugin, learned: int) -> None:
    """LiteLLM's logging worker has delivered every success event and the plugin has run what it
    queued after its hooks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while loop.time() < deadline:
        rt = plugin.runtime
        if sum(r["count"] for r in rt.store.stats().values()) >= learned and not rt.calls and rt.after.pending == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the requests' success events were not all learned")


async def test_an_alias_request_leaves_nothing_of_the_plugins_to_the_cyclic_collector(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    routers = PluginRouters([policy])
    try:
        router, plugin = routers.make([_deployment("gc-a"), _deployment("gc-b")])
        await _request(router, plugin)
        await _settled(plugin, 1)
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage
        try:
            for _ in range(6):  # more than explain_history: the log has dropped the first ones
                await _request(router, plugin)
            await _settled(plugin, 7)
            gc.collect()
            left = sorted({type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("aisia_plugin")})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert left == []
        assert len(plugin.runtime.explain) == 2
    finally:
        routers.close()


def _tracked() -> set:
    # Twice: a collection stops tracking a tuple whose items it has already found untracked (it
    # walks its list in order), so a tuple of tuples of atoms may take two.
    gc.collect()
    gc.collect()
    return {id(o) for o in gc.get_objects()}


# The tracked objects an explain entry keeps, per strategy: itself, its decision and the
# decision's facts record (decision.Facts: a slots dataclass, which CPython always tracks); rules
# and sla-aware also the tuple in their record holding their per-candidate dicts of numbers.
# (The facts were a plain tuple of atoms, untracked, until issue 36 named their fields: one more each.)
KEPT = {"ucb1": 3, "thompson": 3, "contextual": 3, "cost": 3, "latency": 3, "lkgp": 3, "rules": 4, "sla-aware": 4}


@pytest.mark.parametrize("strategy", sorted(KEPT))
async def test_an_explain_entry_keeps_three_or_four_objects_the_cyclic_collector_tracks(tmp_path, strategy):
    """An entry stays in the explain log for `explain_history` requests (200 by default), long
    enough to reach the collector's oldest generation, which every full collection walks. It keeps
    three or four tracked objects (KEPT): a successful outcome is a dict of numbers, the deployments
    tried a tuple of strings, the decision's explanation a facts record of atoms rendered when read
    (decision.Explainer), its learning context released once learned. Kept as closures over the
    pool's columns, it was 30 to 59 (ucb1 48, contextual 59)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.replace("explain_history: 2", "explain_history: 20").replace("ucb1", strategy))
    routers = PluginRouters([policy])
    try:
        router, plugin = routers.make([_deployment("gc-a"), _deployment("gc-b")])
        for k in range(24):  # both tried (UCB1), then learned: the log full of scored decisions
            await _request(router, plugin)
        await _settled(plugin, 24)
        log = plugin.runtime.explain
        assert len(log) == 20 and all(e["outcome"] and e["outcome"]["success"] for e in log)
        before = _tracked()
        log.clear()
        freed = before - _tracked()
        assert len(freed) <= KEPT[strategy] * 20 + 2  # (+2: the count's own objects: a list, a function)
    finally:
        routers.close()


async def test_a_served_request_awaiting_feedback_is_nothing_the_cyclic_collector_tracks(tmp_path):
    """A served request's record waits 24 hours for feedback (up to 50000 of them): a dict of
    strings, kept without a tracked object of its own."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    routers = PluginRouters([policy])
    try:
        router, plugin = routers.make([_deployment("gc-a"), _deployment("gc-b")])
        for _ in range(10):
            await _request(router, plugin)
        await _settled(plugin, 10)
        served = plugin.runtime.store.served
        assert len(served) == 10
        before = _tracked()
        for rid in list(served._table):
            served.drop(rid)
        assert len(before - _tracked()) == 0
    finally:
        routers.close()
