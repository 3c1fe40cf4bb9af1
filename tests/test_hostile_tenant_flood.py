"""Issue 35, acceptance 2: with two tenant keys and Redis state, a flood from tenant A of 1,000
requests (client-set timeouts, inputs that crash every upstream, some with ``num_retries: 0`` so
that only one deployment sees them, and streams that fail: LiteLLM's repeated-chunk guard, a
connection dropped midway) leaves every breaker CLOSED and serves tenant B every one of its
requests, sent at the same time: on one proxy, and on two proxies sharing one Redis.

What protects the breakers: the one rule (aisia_plugin/blame.py) for the timeouts, the inputs that
fail on two providers and the guard; the peers' check (``circuit_breaker.outlier``) for what only
one deployment sees (a single attempt, a stream broken midway) while tenant B's calls to it succeed.
The figures (A's statuses, B's count, what was learned) are printed (pytest -s)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from fault_helpers import admin_get
from hostile_tenant import (NAMES, TENANT_A, TENANT_B, ask, breakers, flood, policy, post, reset, served_by,
                            start_tenant_proxy, upstream_specs)
from proxy_harness import start_upstreams, stop_upstreams
from redis_server import RedisServer

FLOOD = 1000
# LiteLLM's own cooldown is blind to whose failure it is: over 50 % failures of a deployment in a
# minute cool it for every tenant. Where one tenant's traffic must not cost another its service,
# the plugin's breakers are the only ones (docs/failures.md).
LITELLM_COOLDOWNS_OFF = {"disable_cooldowns": True}
REDIS_STATE = """\
state:
  backend: redis
  cache_ttl_ms: 200
  flush_ms: 100
"""


def flood_job(k: int) -> tuple[dict, dict]:
    """Tenant A's request `k` (body, headers): 40 % client-set timeouts, 30 % inputs crashing every
    upstream (half of them allowed one attempt only), 30 % failing streams."""
    text = f"Summarise report number {k}"
    kind = k % 10
    if kind < 4:
        return [(ask(text, timeout=0.001), {}), (ask(text), {"x-litellm-timeout": "0.001"}),
                (ask(text, stream=True, stream_timeout=0.001), {}), (ask(text, request_timeout=0.001), {})][k % 4]
    if kind < 7:
        fault = "error" if k % 2 else "drop"
        return (ask(f"AISIA-FAULT={fault} {text}", **({"num_retries": 0} if k % 4 < 2 else {})), {})
    fault = "repeat" if k % 2 else "stream_break"
    return ask(f"AISIA-FAULT={fault} {text}", stream=True), {}


class TenantB:
    """Tenant B's plain requests from `workers` threads, spread over `proxies`, until stopped."""

    def __init__(self, proxies, workers: int = 4):
        self.proxies, self.workers = proxies, workers
        self.results: list = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._lock = threading.Lock()

    def _run(self, w: int) -> None:
        k = 0
        while not self._stop.is_set():
            proxy = self.proxies[(w + k) % len(self.proxies)]
            try:
                r = post(proxy, TENANT_B, ask(f"Hello from tenant B, worker {w}, request {k}"))
                out = served_by(r) if r.status_code == 200 else f"{r.status_code}: {r.text[:200]}"
            except Exception as exc:  # noqa: BLE001 - a failed request is what the test counts
                out = f"error: {type(exc).__name__}: {exc}"
            with self._lock:
                self.results.append(out)
            k += 1

    def __enter__(self):
        self._futures = [self._pool.submit(self._run, w) for w in range(self.workers)]
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for f in self._futures:
            f.result(timeout=120)
        self._pool.shutdown()

    def count(self) -> int:
        with self._lock:
            return len(self.results)


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams(upstream_specs())
    yield {u.name: u for u in running}
    stop_upstreams(running)


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
                                                             router_settings=LITELLM_COOLDOWNS_OFF), range(2)))
    yield started
    for p in started:
        p.stop()


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_flood_from_one_tenant_opens_no_breaker_and_the_other_is_always_served(proxies, upstreams, replicas):
    serving = proxies[:replicas]
    for p in proxies:
        reset(p)
    for u in upstreams.values():
        u.reset()
    with TenantB(serving) as b:
        deadline = time.monotonic() + 60
        while b.count() < 10 and time.monotonic() < deadline:  # B is being served when the flood begins
            time.sleep(0.05)

        def send(k: int) -> int:
            body, headers = flood_job(k)
            try:
                return post(serving[k % replicas], TENANT_A, body, headers=headers).status_code
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
    print(f"\n{replicas} proxy(ies): tenant A {FLOOD} requests in {took:.1f} s, statuses {dict(statuses)}; "
          f"tenant B {len(b.results)} requests, {len(b_failed)} failed; upstream calls "
          f"{ {n: u.stats()['calls'] for n, u in upstreams.items()} }; (breaker, outcomes, failures) {learned}")
    assert sum(statuses.values()) == FLOOD
    assert b_failed == [], b_failed[:5]
    assert len(b.results) >= 10
    for p in serving:  # every replica reads the shared breakers as CLOSED
        assert {n: row[0] for n, row in breakers(p).items()} == {n: "CLOSED" for n in NAMES}, breakers(p)
