"""The steps the plugin runs after its hooks (runtime.AfterResponse): a decision's metrics,
routing-page point and log line; an outcome's learning, metrics and log line. Each is queued on
the request path and run once the hook has returned; the reference path ($AISIA_SYNC_AFTER)
runs each where it is queued. Through a LiteLLM Router in this process (as the Router contract
tests do), in front of simulated upstreams over HTTP, the same traffic through both paths must
leave the same things learned (the store's stats), logged (the decision log, in the same order
per deployment) and exported (the metrics' increments)."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import REGISTRY
from router_harness import PluginRouters

from proxy_harness import deployment, start_upstreams, stop_upstreams

POLICY = """\
version: 1
circuit_breaker: {failure_threshold: 2, timeout_s: 3600}
logging:
  decisions: {path: DECISIONS}
aliases:
  after/pool:
    description: two deployments, the cheaper first
    strategy: cost
    candidates: {models: [pa, pb]}
    failover: {attempts: 1}
"""
UPSTREAMS = {"pa": 0.1, "pb": 0.2}
HELLO = [{"role": "user", "content": "Write a Python function that merges two sorted lists"}]
# What depends on the wall clock (latency, and the rewards and means computed from it) or on the
# request's own id is left out of the comparison; everything else must be equal.
CLOCKED = {"ts", "request_id", "latency_s", "reward", "avg_latency", "mean_reward", "score"}


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in UPSTREAMS.items()])
    yield {u.name: u for u in running}
    stop_upstreams(running)


def _aisia_samples() -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in REGISTRY.collect()
            if m.name.startswith("aisia_") for s in m.samples if not s.name.endswith("_created")}


def _unclocked(value):
    if isinstance(value, dict):
        return {k: _unclocked(v) for k, v in value.items() if k not in CLOCKED}
    return value


async def _traffic(router, upstreams) -> None:
    """Three served requests; a failure of the cheaper deployment, failed over to the other; a
    client error (the caller's: LiteLLM does not retry it, nothing is learned, it is logged)."""
    for _ in range(3):
        await router.acompletion(model="after/pool", messages=HELLO)
    with upstreams["pa"].broken(mode="error", status=500):
        await router.acompletion(model="after/pool", messages=HELLO)
    with upstreams["pa"].broken(mode="error", status=400), upstreams["pb"].broken(mode="error", status=400):
        with pytest.raises(Exception):
            await router.acompletion(model="after/pool", messages=HELLO)


async def _run(tmp_path, upstreams, name: str, synchronous: bool) -> dict:
    """The traffic through a fresh plugin on one path: (stats, decision log, metric increments)."""
    log_path = tmp_path / f"{name}.jsonl"
    policy = tmp_path / f"{name}.yaml"
    policy.write_text(POLICY.replace("DECISIONS", json.dumps(str(log_path))))
    routers = PluginRouters([policy])
    for u in upstreams.values():
        u.reset()
    try:
        router, plugin = routers.make([deployment(n, u) for n, u in upstreams.items()], num_retries=1,
                                      disable_cooldowns=True)
        after = plugin.runtime.after
        after.synchronous = synchronous
        before = _aisia_samples()
        await _traffic(router, upstreams)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while sum(r["count"] for r in plugin.runtime.store.stats().values()) < 5 and loop.time() < deadline:
            await asyncio.sleep(0.02)  # LiteLLM logs a success in the background, after the response
        while after.pending and loop.time() < deadline:  # the last event's steps, run after its hooks
            await asyncio.sleep(0.02)
        assert after.pending == 0
        after_samples = _aisia_samples()
        plugin.observer.decision_log.flush()
        lines = [json.loads(line) for line in log_path.read_text().splitlines()]
        increments = {k: v - before.get(k, 0.0) for k, v in after_samples.items()
                      if v != before.get(k, 0.0) and "decision_seconds" not in k[0]}
        decision_timings = sum(v - before.get(k, 0.0) for k, v in after_samples.items()
                               if k[0] == "aisia_decision_seconds_count")
        return {"stats": _unclocked(plugin.runtime.store.stats()), "log": [_unclocked(x) for x in lines],
                "metrics": increments, "decision_timings": decision_timings, "ran": after.ran,
                "explain": [_unclocked(e["outcome"] or {}) for e in plugin.runtime.explain]}
    finally:
        routers.close()


def _per_deployment(lines: list) -> dict:
    out: dict = {}
    for line in lines:
        out.setdefault(line.get("deployment"), []).append(line)
    return out


async def test_what_is_learned_logged_and_exported_is_the_same_after_the_hooks_as_in_them(tmp_path, upstreams):
    reference = await _run(tmp_path, upstreams, "reference", synchronous=True)
    deferred = await _run(tmp_path, upstreams, "deferred", synchronous=False)
    # The traffic did what it says: pa served 3 and failed once (learned), pb served the
    # failover; the caller's 400 learned as nothing.
    assert {dep: (row["count"], row["error_rate"] > 0) for dep, row in reference["stats"].items()} == \
        {"pa": (4, True), "pb": (1, False)}
    assert reference["ran"] == deferred["ran"] > 0
    # Learned: the same stats per deployment (and domain).
    assert deferred["stats"] == reference["stats"]
    # Logged: the same lines, in the same order per deployment (and overall).
    assert _per_deployment(deferred["log"]) == _per_deployment(reference["log"])
    assert [x["type"] for x in deferred["log"]] == [x["type"] for x in reference["log"]]
    assert {x["type"] for x in reference["log"]} == {"decision", "outcome"}
    assert any(x["type"] == "outcome" and x["status"] == 400 for x in reference["log"])
    # Exported: the same increments of every aisia_ metric; each decision timed once.
    assert deferred["metrics"] == reference["metrics"]
    assert reference["metrics"], "the traffic moved no metric"
    assert deferred["decision_timings"] == reference["decision_timings"] == 6
    # The explain log's outcomes, the same.
    assert deferred["explain"] == reference["explain"]


async def test_a_decisions_log_line_and_metrics_are_written_after_the_filter_returns(tmp_path, upstreams):
    """The deferred path really is deferred: when the filter returns, its decision's metrics and
    log line are queued, not written; the event loop runs them at its next turn."""
    log_path = tmp_path / "d.jsonl"
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY.replace("DECISIONS", json.dumps(str(log_path))))
    routers = PluginRouters([policy])
    try:
        router, plugin = routers.make([deployment(n, u) for n, u in upstreams.items()], disable_cooldowns=True)
        healthy = [d for d in router.model_list if d["model_name"] in UPSTREAMS]
        timed = [k for k in _aisia_samples() if k[0] == "aisia_decision_seconds_count"]
        before = sum(_aisia_samples().get(k, 0.0) for k in timed)
        chosen = await plugin.async_filter_deployments("after/pool", healthy, HELLO, request_kwargs={"metadata": {}})
        assert chosen and plugin.runtime.after.pending == 1
        now = _aisia_samples()
        assert sum(now.get(k, 0.0) for k in timed) == before
        await asyncio.sleep(0)
        assert plugin.runtime.after.pending == 0
        timed = [k for k in _aisia_samples() if k[0] == "aisia_decision_seconds_count"]
        assert sum(_aisia_samples().get(k, 0.0) for k in timed) == before + 1
        plugin.observer.decision_log.flush()
        assert [json.loads(x)["type"] for x in log_path.read_text().splitlines()] == ["decision"]
    finally:
        routers.close()


async def test_a_step_that_raises_is_logged_and_the_steps_after_it_still_run(caplog):
    from aisia_plugin.litellm.runtime import AfterResponse

    after, ran = AfterResponse(synchronous=False), []

    def broken():
        raise RuntimeError("boom")

    after(ran.append, 1)
    after(broken)
    after(ran.append, 2)
    assert ran == [] and after.pending == 3
    await asyncio.sleep(0)
    assert ran == [1, 2] and after.pending == 0
    assert "a step run after the hooks failed" in caplog.text and "boom" in caplog.text
