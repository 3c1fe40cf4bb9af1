"""Issue 35, acceptance 2: with two tenant keys and Redis state, a flood from tenant A of 1,000
requests (client-set timeouts, inputs that crash every upstream, some with ``num_retries: 0`` so
that only one deployment sees them, and streams that fail: LiteLLM's repeated-chunk guard, a
connection dropped midway) leaves every breaker CLOSED and serves tenant B every one of its
requests, sent at the same time: on one proxy, and on two proxies sharing one Redis. LiteLLM's own cooldown
is on, as LiteLLM ships it and operators run it: the plugin spares it the failures that are not a
deployment's (docs/failures.md#litellms-own-cooldown), so it cools nothing down either.

What protects the breakers: the one rule (aisia_plugin/blame.py) for the timeouts, the inputs that
fail on two providers and the guard; the peers' check (``circuit_breaker.outlier``, its counts shared by the
replicas through the store) for what only one deployment sees (a single attempt, a stream broken midway) while tenant B's calls to it succeed.
The figures (A's statuses, B's count, what was learned) are printed (pytest -s)."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from fault_helpers import admin_get
from hostile_tenant import (LITELLM_COOLDOWNS_ON, NAMES, REDIS_STATE, TENANT_A, TenantB, breakers, flood, flood_job,
                            policy, post, reset, start_tenant_proxy, upstream_specs, wait_answering)
from proxy_harness import upstreams_fixture
from redis_server import RedisServer

pytestmark = pytest.mark.proxy

FLOOD = 1000


upstreams = upstreams_fixture(upstream_specs())


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    srv = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def proxies(tmp_path_factory, upstreams, redis):
    """Two proxies sharing one Redis (started together: each takes a while)."""
    env = {"AISIA_REDIS_URL": redis.url}
    with ThreadPoolExecutor(max_workers=2) as pool:
        started = list(pool.map(lambda i: start_tenant_proxy(tmp_path_factory.mktemp(f"flood-{i}"), upstreams,
                                                             policy(REDIS_STATE), env=env,
                                                             router_settings=LITELLM_COOLDOWNS_ON), range(2)))
    try:
        for p in started:  # each one answers before any flood
            wait_answering(p)
        yield started
    finally:
        for p in started:
            p.stop()


# one proxy; two sharing Redis behind a balancer that spreads both tenants over them; two behind one
# that pins each key to its replica (A's on the first, B's on the second: only the shared peer counts
# tell the first that B is served).
LAYOUTS = {"one": (1, False), "spread": (2, False), "pinned": (2, True)}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_flood_from_one_tenant_opens_no_breaker_and_the_other_is_always_served(proxies, upstreams, layout):
    replicas, pinned = LAYOUTS[layout]
    serving = proxies[:replicas]
    a_to, b_to = (serving[:1], serving[1:]) if pinned else (serving, serving)
    for p in proxies:
        reset(p)
    for u in upstreams.values():
        u.reset()
    with TenantB(b_to) as b:
        b.served_some()

        def send(k: int) -> int:
            body, headers = flood_job(k)
            try:
                return post(a_to[k % len(a_to)], TENANT_A, body, headers=headers).status_code
            except Exception:  # noqa: BLE001 - a dropped stream may end the response abruptly
                return -1

        started = time.monotonic()
        statuses = Counter(flood(send, list(range(FLOOD)), workers=16))
        took = time.monotonic() - started
    learned = breakers(serving[0])
    reasons = Counter((e["deployment_id"], (e["outcome"].get("failure") or {}).get("reason"))
                      for p in serving for e in admin_get(p, "/aisia/explain", limit=100000)["decisions"]
                      if e.get("outcome") and not e["outcome"].get("success", True))
    print("failed attempts in the explain log's last entries, by deployment and reason:", dict(reasons))
    b_failed = [r for r in b.results if r not in NAMES]
    b_served = Counter(r for r in b.results if r in NAMES)
    print(f"\n{layout}: {replicas} proxy(ies): tenant A {FLOOD} requests in {took:.1f} s, statuses {dict(statuses)}; "
          f"tenant B {len(b.results)} requests, {len(b_failed)} failed, served by {dict(b_served)}; upstream calls "
          f"{ {n: u.stats()['calls'] for n, u in upstreams.items()} }; (breaker, outcomes, failures) {learned}")
    assert sum(statuses.values()) == FLOOD
    assert b_failed == [], b_failed[:5]
    assert len(b.results) >= 10
    # The cost strategy sends B to the cheapest deployment; B is served elsewhere only when it is
    # refused there: cooled down by LiteLLM, or its breaker open. Neither happened.
    assert set(b_served) == {NAMES[0]}, b_served
    # Nothing learned against a deployment from A's failures (the breakers' net failures, shared).
    assert {n: row[2] for n, row in learned.items()} == {n: 0 for n in NAMES}, learned
    for p in serving:  # every replica reads the shared breakers as CLOSED
        assert {n: row[0] for n, row in breakers(p).items()} == {n: "CLOSED" for n in NAMES}, breakers(p)
