"""Two proxy workers (`--num_workers 2`) with the Redis store: what one worker learns and the
breakers it opens are seen by the other."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from proxy_harness import deployment, parse_reply, start_proxy, start_upstreams, stop_upstreams
from redis_server import redis_module  # noqa: F401  (a fixture)

POLICY = """\
version: 1
state:
  backend: redis
circuit_breaker:
  failure_threshold: 2
  timeout_s: 600
aliases:
  test/shared:
    description: shared learning
    strategy: cost
    candidates: {models: [w-a, w-b]}
"""


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": "w-a", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.1},
                               {"name": "w-b", "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0}])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams, redis_module):  # noqa: F811
    work = tmp_path_factory.mktemp("workers")
    policy = work / "team.yaml"
    policy.write_text(POLICY)
    config = {"model_list": [deployment(n, u) for n, u in upstreams.items()],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}}
    p = start_proxy(config, work, env={"AISIA_POLICY": str(policy), "AISIA_REDIS_URL": redis_module.url},
                    num_workers=2)
    yield p
    p.stop()


def ask(proxy) -> str:
    # A new connection per request, so that both workers take requests.
    with openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0, timeout=30) as c:
        r = c.chat.completions.create(model="test/shared", messages=[{"role": "user", "content": "hello"}])
    return parse_reply(r.choices[0].message.content)[0]


def per_worker(proxy, predicate, what: str, limit_s: float = 60.0) -> dict:
    """Poll (a new connection each time) until two different worker processes have each
    answered with stats satisfying `predicate`; returns {pid: stats}."""
    seen: dict = {}
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with httpx.Client(base_url=proxy.url, headers=proxy.headers, timeout=30) as c:
            # One connection for both reads: the same worker answers them.
            pid = c.get("/aisia/policy").json()["worker_pid"]
            stats = c.get("/admin/bandit/stats").json()
        if predicate(stats):
            seen[pid] = stats
            if len(seen) >= 2:
                return seen
        time.sleep(0.1)
    pytest.fail(f"two workers never both showed {what} (workers that did: {sorted(seen)})")


def test_learning_and_breakers_are_shared_between_workers(proxy, upstreams):
    n = 12
    assert {ask(proxy) for _ in range(n)} == {"w-a"}
    per_worker(proxy, lambda s: s.get("w-a", {}).get("count") == n, f"the {n} outcomes of w-a")
    upstreams["w-a"].control(mode="error", status=500)
    try:
        failed_over = [ask(proxy) for _ in range(4)]
        assert set(failed_over) == {"w-b"}  # no client error: each failure was failed over
        seen = per_worker(proxy, lambda s: s.get("w-a", {}).get("breaker") == "OPEN", "w-a's breaker OPEN")
        assert len(seen) == 2
        calls = upstreams["w-a"].stats()["calls"]
        assert [ask(proxy) for _ in range(6)] == ["w-b"] * 6
        assert upstreams["w-a"].stats()["calls"] == calls  # neither worker tries it any more
    finally:
        upstreams["w-a"].control(mode="ok")
