"""The state store on the Redis LiteLLM is configured with, resolved by LiteLLM's own client logic
(litellm/_redis.py): the environment's single server, a Redis Cluster named by
REDIS_CLUSTER_NODES and a Sentinel setup named by REDIS_SENTINEL_NODES, each against real
redis-server processes; the store then learns and shares through it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

import pytest  # noqa: E402

from aisia_plugin.breaker import FailureKind  # noqa: E402
from aisia_plugin.engine import Engine  # noqa: E402
from aisia_plugin.learning import OutcomeRecord  # noqa: E402
from aisia_plugin.litellm.shared_redis import litellm_redis  # noqa: E402
from aisia_plugin.policy import load_policy  # noqa: E402
from aisia_plugin.state import open_store  # noqa: E402
from redis_server import RedisCluster, RedisServer, free_port, redis_binary  # noqa: E402

pytestmark = pytest.mark.proxy  # starts redis-server processes


@pytest.fixture
def redis_env(monkeypatch):
    """No REDIS_* variable but those a test sets, and no store URL of its own."""
    for name in list(os.environ):
        if name.startswith("REDIS_") or name == "AISIA_REDIS_URL":
            monkeypatch.delenv(name)
    return monkeypatch


def _store_learns_through(target) -> dict:
    """Open a Redis store on `target` (as the plugin does: use_url), record outcomes from one
    store, read them from another."""
    base = load_policy(None)
    pol = base.model_copy(update={"state": base.state.model_copy(update={
        "backend": "redis", "key_prefix": f"shared{time.monotonic_ns()}:", "timeout_ms": 5000})})
    rules = Engine(pol, clock=lambda: 0.0).rules

    async def main():
        a, b = open_store(pol, url_later=True), open_store(pol, url_later=True)
        for s in (a, b):
            s.use_url(*target)
            await s.start()
        r = rules
        for i in range(10):
            a.record_outcome(OutcomeRecord("x", 1.0, None if i % 5 else FailureKind.PROVIDER, 0.5, 0.2, "auto",
                                           None), r)
        for _ in range(200):
            if await a.flush() and await b.refresh() and b.stats().get("x", {}).get("count") == 10:
                break
            await asyncio.sleep(0.05)
        stats = b.stats()
        await a.aclose()
        await b.aclose()
        return a, stats

    a, stats = asyncio.run(main())
    assert a.counters["outages"] == 0
    return stats


def test_the_environment_s_single_server(redis_env, tmp_path):
    srv = RedisServer(tmp_path / "one").start()
    try:
        redis_env.setenv("REDIS_HOST", "127.0.0.1")
        redis_env.setenv("REDIS_PORT", str(srv.port))
        target = litellm_redis(None)
        assert (target.url, target.source, target.cluster) == \
            (f"redis://127.0.0.1:{srv.port}", "REDIS_HOST/REDIS_PORT", False)
        assert _store_learns_through(target)["x"]["count"] == 10
    finally:
        srv.stop()


def test_a_cluster_named_by_redis_cluster_nodes(redis_env, tmp_path):
    cluster = RedisCluster(tmp_path / "cluster").start()
    try:
        redis_env.setenv("REDIS_CLUSTER_NODES", json.dumps([{"host": "127.0.0.1", "port": n.port}
                                                            for n in cluster.nodes]))
        target = litellm_redis(None)
        assert target is not None and target.cluster and target.source == "REDIS_CLUSTER_NODES", target
        assert _store_learns_through(target)["x"]["count"] == 10
    finally:
        cluster.stop()


def test_a_cluster_node_whose_bus_port_is_taken_before_it_binds_moves_to_another_port(tmp_path):
    # The race a full run met once: the bus port (port + 10000) free when the helper picked the
    # port, taken by the time redis-server bound it. The helper's first start moves; one it was
    # told to use (a restart on the same port) does not.
    import redis_server as helper

    node = RedisServer(tmp_path / "node", cluster=True)
    picked = node.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", picked + 10000))
        squatter.listen()
        node.start()
        try:
            assert node.port != picked and node.ping()
            moved = node.port
            node.kill()
            node.start()  # a restart keeps the port it ran on
            assert node.port == moved and node.ping()
        finally:
            node.stop()
        fixed = RedisServer(tmp_path / "fixed", cluster=True, port=picked)
        with pytest.raises(helper.RedisServerError, match="Address already in use"):
            fixed.start()


def test_the_master_named_by_redis_sentinel_nodes(redis_env, tmp_path):
    master = RedisServer(tmp_path / "master").start()
    sentinel_dir = tmp_path / "sentinel"
    sentinel_dir.mkdir()
    port = free_port()
    conf = sentinel_dir / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {sentinel_dir}\n"
                    f"sentinel monitor aisia-master 127.0.0.1 {master.port} 1\n")
    sentinel = subprocess.Popen([redis_binary(), str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                if redis.Redis(port=port, socket_timeout=1).sentinel_get_master_addr_by_name("aisia-master"):
                    break
            except redis.RedisError:
                pass
            assert time.monotonic() < deadline, "the sentinel did not start"
            time.sleep(0.1)
        redis_env.setenv("REDIS_SENTINEL_NODES", json.dumps([["127.0.0.1", port]]))
        redis_env.setenv("REDIS_SERVICE_NAME", "aisia-master")
        target = litellm_redis(None)
        assert target is not None and target.url == f"redis://127.0.0.1:{master.port}", target
        assert target.source == "REDIS_SENTINEL_NODES"
        assert _store_learns_through(target)["x"]["count"] == 10
    finally:
        sentinel.kill()
        sentinel.wait(10)
        master.stop()
