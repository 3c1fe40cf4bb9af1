"""Redis faults under a real LiteLLM proxy with the plugin and the Redis store: redis-server
killed and restarted mid-traffic (from its AOF, and once empty), a slow and a hung Redis (a
loopback TCP proxy in between, `tcp_delay.py`), and the proxy itself crashed (SIGKILL). The
client must see no failed request, and the outcomes counted in Redis must equal the calls the
upstreams received: nothing lost, nothing counted twice."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time

import pytest

from fault_helpers import chat, client_of, start_plugin_proxy, stats, wait_for
from proxy_harness import start_upstreams, stop_upstreams
from redis_server import RedisServer
from tcp_delay import DelayProxy

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

NAMES = ["rd-a", "rd-b"]
IO_TIMEOUT_MS = 8000
POLICY = f"""\
version: 1
defaults: false
state:
  backend: redis
  cache_ttl_ms: 200
  timeout_ms: 50
  io_timeout_ms: {IO_TIMEOUT_MS}
  flush_ms: 100
  reconnect_max_ms: 500
aliases:
  r/main:
    description: Redis faults
    strategy: ucb1
    candidates: {{models: [rd-a, rd-b]}}
"""


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    srv = RedisServer(tmp_path_factory.mktemp("redis"), aof=True).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def slow(redis):
    with DelayProxy(redis.port) as d:
        yield d


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0} for n in NAMES])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams, slow):
    p = start_plugin_proxy(tmp_path_factory.mktemp("redis-faults"), upstreams, POLICY,
                           env={"AISIA_REDIS_URL": f"redis://127.0.0.1:{slow.port}/0"})
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(proxy):
    return client_of(proxy)


def redis_counts(redis) -> dict:
    c = redis.client()
    try:
        return {n: int(c.hget("{aisia}:bandit:" + n, "count") or 0) for n in NAMES}
    finally:
        c.close()


def calls(upstreams) -> dict:
    return {n: upstreams[n].stats()["calls"] for n in NAMES}


def assert_counts_reconcile(redis, upstreams):
    """Every upstream call is counted exactly once in Redis (once the last batch is written)."""
    expected = calls(upstreams)
    wait_for(lambda: redis_counts(redis) == expected, "Redis's counts to equal the upstream calls", limit_s=60,
             detail=lambda: {"redis": redis_counts(redis), "upstream calls": expected})


class Traffic:
    """Sequential requests from a background thread until stopped: (latency, served or error)."""

    def __init__(self, client):
        self.client, self.results, self._stop = client, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(120)

    def _run(self):
        k = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                served, _ = chat(self.client, "r/main", f"hello {k}")
                out = served or "no reply"
            except Exception as exc:  # noqa: BLE001 - a client error is what the test counts
                out = f"error: {type(exc).__name__}: {exc}"
            self.results.append((time.monotonic() - started, out))
            k += 1

    def errors(self):
        return [r for _, r in self.results if r not in NAMES]


def test_traffic_flows_and_counts_reconcile(proxy, client, redis, upstreams):
    for k in range(6):
        assert chat(client, "r/main", f"warm {k}")[0] in NAMES
    assert_counts_reconcile(redis, upstreams)


@pytest.mark.parametrize("empty", [False, True], ids=["aof", "restarted-empty"])
def test_redis_killed_and_restarted_mid_traffic_loses_and_doubles_nothing(proxy, client, redis, upstreams, empty):
    with Traffic(client) as t:
        wait_for(lambda: len(t.results) >= 5, "traffic before the kill")
        redis.kill()
        if empty:
            redis.wipe()
        n = len(t.results)
        wait_for(lambda: len(t.results) >= n + 5, "traffic while Redis is down")
        redis.start()
        n = len(t.results)
        wait_for(lambda: len(t.results) >= n + 5, "traffic after the restart")
    assert t.errors() == [], t.errors()[:5]
    assert_counts_reconcile(redis, upstreams)
    assert sum(stats(proxy)[n]["count"] for n in NAMES) == sum(calls(upstreams).values())


def test_a_slow_redis_never_holds_a_request_for_its_round_trip(proxy, client, redis, slow, upstreams):
    def latencies(n):
        out = []
        for k in range(n):
            started = time.monotonic()
            assert chat(client, "r/main", f"latency {k}")[0] in NAMES
            out.append(time.monotonic() - started)
            time.sleep(0.25)  # past cache_ttl_ms: every decision finds its copy stale
        return out

    fast = latencies(8)
    delay_s = 1.5
    slow.set_delay(delay_s)  # each way: a refresh's round trip takes 3 s, far past timeout_ms (50 ms)
    try:
        slowed = latencies(8)
    finally:
        slow.set_delay(0)
    # A decision that waited for Redis would take the whole round trip; the bound is generous
    # on purpose (a loaded machine): the precise figures are the soak run's.
    assert statistics.median(slowed) < statistics.median(fast) + delay_s, (fast, slowed)
    assert sum(x < 2 * delay_s for x in slowed) >= len(slowed) - 1, slowed
    assert_counts_reconcile(redis, upstreams)


def test_a_hung_redis_is_an_outage_the_requests_do_not_wait_for(proxy, client, redis, slow, upstreams):
    slow.stall()  # connections stay open, nothing is answered
    try:
        with Traffic(client) as t:
            wait_for(lambda: len(t.results) >= 10, "traffic while Redis hangs", limit_s=120)
    finally:
        slow.resume()
    assert t.errors() == [], t.errors()[:5]
    lat = sorted(x for x, _ in t.results)
    assert lat[len(lat) // 2] < IO_TIMEOUT_MS / 1000.0, lat  # the typical request did not wait for the I/O timeout
    assert_counts_reconcile(redis, upstreams)


def test_a_crashed_proxy_restarts_with_the_shared_state(proxy, client, redis, upstreams):
    """SIGKILL, the worst case of a restart (a clean one also writes its queue on the way out: the
    memory store's snapshot test in test_faults_proxy.py exercises that shutdown path)."""
    for k in range(5):
        assert chat(client, "r/main", f"before the crash {k}")[0] in NAMES
    # Every outcome written to Redis before the crash (flush_ms: 100; a crash loses at most the last batch).
    assert_counts_reconcile(redis, upstreams)
    os.killpg(proxy.pid, signal.SIGKILL)
    proxy._proc.wait(30)
    proxy.restart()
    assert_counts_reconcile(redis, upstreams)
    assert {n: stats(proxy)[n]["count"] for n in NAMES} == redis_counts(redis)
