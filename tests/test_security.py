"""Security and privacy against a real LiteLLM proxy with the plugin and a Redis store reached
with an ACL user and password: the plugin's routes refuse a missing or wrong key; no prompt or
response text reaches Redis, the log, the headers, the metrics or the admin answers; the Redis
password never appears in a log line or an error; policies are data; the feedback endpoint
cannot be abused to move statistics."""

from __future__ import annotations

import logging
import math
import secrets
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from aisia_plugin.policy.errors import PolicyError
from aisia_plugin.policy.loader import load_policy_with_locations
from aisia_plugin.state.redis import RedisStore, StoreConfigError
from fault_helpers import chat, client_of, explain_rows, start_plugin_proxy, stats, wait_for
from proxy_harness import start_upstreams, stop_upstreams
from redis_server import RedisServer

MARKER = "zqx-private-" + secrets.token_hex(6)
PASSWORD = "pw-" + secrets.token_hex(10)
USER = "aisia-router"

POLICY = """\
version: 1
defaults: false
state:
  backend: redis
  reconnect_max_ms: 500
aliases:
  s/main:
    description: privacy
    strategy: cost
    candidates: {models: [sec-a, sec-b]}
  s/lkgp:
    description: sessions
    strategy: lkgp
    candidates: {models: [sec-a, sec-b]}
  s/fb:
    description: feedback
    strategy: cost
    candidates: {models: [fb-a, fb-b]}
"""
# Every route the plugin adds (admin.ROUTES and the observability routes) but /aisia/metrics, which
# any key LiteLLM accepts may read, as its own /metrics, without the per-deployment learning unless
# it is the proxy admin's (its labels are configured names only; the privacy test below reads it;
# tests/test_litellm_observability.py and tests/test_hostile_tenant.py test its auth).
ROUTES = [("GET", "/aisia/bandit/stats"), ("POST", "/aisia/bandit/reset"),
          ("GET", "/admin/bandit/stats"), ("POST", "/admin/bandit/reset"), ("POST", "/aisia/feedback"),
          ("GET", "/aisia/explain"), ("GET", "/aisia/policy"), ("GET", "/aisia/ui"), ("GET", "/aisia/ui/data")]


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    srv = RedisServer(tmp_path_factory.mktemp("redis-acl"), user=USER, password=PASSWORD).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c, "echo": True}
                               for n, c in (("sec-a", 0.1), ("sec-b", 1.0), ("fb-a", 0.1), ("fb-b", 1.0))])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams, redis):
    assert PASSWORD in redis.url
    p = start_plugin_proxy(tmp_path_factory.mktemp("security"), upstreams, POLICY, env={"AISIA_REDIS_URL": redis.url})
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(proxy):
    return client_of(proxy)


# -- the plugin's routes need the proxy admin's key ------------------------------------------------
@pytest.mark.parametrize("method,path", ROUTES)
def test_every_plugin_route_refuses_a_missing_or_wrong_key(proxy, method, path):
    master = proxy.master_key
    wrong = [{}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": "Bearer"}, {"Authorization": "Basic x"},
             {"Authorization": f"Bearer {master}x"}, {"Authorization": f"Bearer {master[:-1]}"},
             {"x-litellm-api-key": "sk-wrong"}, {"api-key": master[:10]}]
    with httpx.Client(base_url=proxy.url, timeout=60) as c:
        for headers in wrong:
            r = c.request(method, path, headers=headers, json={"request_id": "x", "score": 1, "deployment_id": "sec-a"})
            assert r.status_code in (401, 403), (path, headers, r.status_code, r.text[:200])
            assert "sec-a" not in r.text and "decisions" not in r.text and "aisia_" in r.text, r.text[:200]
        ok = c.request(method, path, headers=proxy.headers,
                       json={"request_id": "no-such-request", "score": 1.0, "deployment_id": "no-such-deployment"})
    assert ok.status_code in (200, 404), (path, ok.status_code, ok.text[:200])  # the master key gets through


def test_a_virtual_key_needs_litellms_database_which_this_machine_cannot_run(proxy):
    """A key without admin rights is a LiteLLM virtual key, made by /key/generate and kept in
    its Postgres database through Prisma, whose engines are downloaded at first use: offline,
    the proxy refuses to make one (the README says so). Keys of other roles, given by a
    `custom_auth` function in place of the database, are tested in test_admin_roles.py."""
    r = httpx.post(proxy.url + "/key/generate", headers=proxy.headers, json={"models": ["s/main"]}, timeout=60)
    assert r.status_code >= 400, r.text
    # LiteLLM answers 500 (classifying its own refusal imports `prisma`, not installed); its log says why.
    assert "DB not connected" in r.text or "DB not connected" in proxy.logs(), r.text[:300]


# -- privacy: a marker in prompts never leaves the request path ------------------------------------
def scan_redis(redis) -> tuple[int, list]:
    """(number of keys, the keys or values holding the marker) over every key of the server."""
    c = redis.client()
    found, n = [], 0
    try:
        for key in c.scan_iter(count=500):
            n += 1
            kind = c.type(key).decode()
            if kind == "string":
                values = [c.get(key)]
            elif kind == "hash":
                values = [x for kv in c.hgetall(key).items() for x in kv]
            elif kind == "set":
                values = list(c.smembers(key))
            elif kind == "list":
                values = c.lrange(key, 0, -1)
            elif kind == "zset":
                values = [m for m, _ in c.zrange(key, 0, -1, withscores=True)]
            else:
                values = [kind.encode()]
            for v in [key, *values]:
                if v is not None and (MARKER.encode() in v or PASSWORD.encode() in v):
                    found.append((key, v[:100]))
    finally:
        c.close()
    return n, found


def test_no_prompt_or_response_text_reaches_redis_logs_headers_or_metrics(proxy, client, redis, upstreams):
    headers_seen, bodies = [], []
    # A plain request with the marker in the system and the user message, and in a tool.
    tools = [{"type": "function", "function": {"name": "lookup", "description": f"tool {MARKER}",
                                               "parameters": {"type": "object", "properties": {}}}}]
    raw = client.chat.completions.with_raw_response.create(
        model="s/main", tools=tools, user=f"user-{MARKER}",
        messages=[{"role": "system", "content": f"system {MARKER}"}, {"role": "user", "content": f"hello {MARKER}"}])
    headers_seen.append(raw.headers)
    bodies.append(raw.parse().choices[0].message.content)
    # A streamed one, a session keyed by the marker, and one failed over.
    stream = client.chat.completions.with_raw_response.create(
        model="s/main", stream=True, messages=[{"role": "user", "content": f"stream {MARKER}"}])
    headers_seen.append(stream.headers)
    bodies.append("".join(ch.choices[0].delta.content or "" for ch in stream.parse() if ch.choices))
    for extra in ({"extra_headers": {"x-aisia-session": f"session-{MARKER}"}}, {"user": f"lkgp-user-{MARKER}"}):
        served, h = chat(client, "s/lkgp", f"session {MARKER}", **extra)
        headers_seen.append(h)
    upstreams["sec-a"].control(mode="error", status=500)
    try:
        served, h = chat(client, "s/main", f"failover {MARKER}")
        assert served == "sec-b"
        headers_seen.append(h)
    finally:
        upstreams["sec-a"].control(mode="ok")
    rid = h["x-aisia-request-id"]
    explain_rows(proxy, rid)
    assert httpx.post(proxy.url + "/aisia/feedback", headers=proxy.headers, timeout=60,
                      json={"request_id": rid, "score": 0.9}).status_code == 200
    assert all(MARKER in b for b in bodies)  # the marker did travel: the upstreams echoed it back

    # Redis, once the outcomes are written: every key and value.
    def written():  # the failover's success and the feedback (quality evidence, not a call) are in Redis
        row = stats(proxy).get("sec-b", {})
        feedback = ((row.get("quality") or {}).get("evidence") or {}).get("feedback", 0)
        return scan_redis(redis)[0] >= 5 and row.get("count", 0) >= 1 and feedback >= 1

    wait_for(written, "the store's keys in Redis")
    n, found = scan_redis(redis)
    assert n >= 5 and found == [], found
    # An outage (Redis killed and restarted empty) puts the redacted URL in the log.
    redis.kill()
    # Traffic until the store notices: a restart quicker than its next write would be seen only as
    # an empty Redis (re-seeded) with no outage in between, and this test wants the outage's line.
    sent = iter(range(10_000))

    def outage_noticed():
        chat(client, "s/main", f"outage {next(sent)} {MARKER}")
        return "unreachable" in proxy.logs()

    wait_for(outage_noticed, "the store's outage", limit_s=60, every_s=0.1)
    redis.start()
    chat(client, "s/main", f"after {MARKER}")
    wait_for(lambda: "reachable again" in proxy.logs(), "the store's reconnection", limit_s=150,
             detail=lambda: "\n".join(proxy.logs().splitlines()[-15:]))
    wait_for(lambda: scan_redis(redis)[0] >= 5, "the store re-seeded")
    assert scan_redis(redis)[1] == []

    # Headers, the admin answers and the metrics.
    for h in headers_seen:
        for k, v in h.items():
            assert MARKER not in k and MARKER not in v, (k, v)
    for path in ("/aisia/explain", "/admin/bandit/stats", "/aisia/policy", "/aisia/ui/data"):
        text = httpx.get(proxy.url + path, headers=proxy.headers, params={"limit": 1000}, timeout=60).text
        assert MARKER not in text and PASSWORD not in text, path
    metrics = httpx.get(proxy.url + "/aisia/metrics", headers=proxy.headers, timeout=60)
    assert metrics.status_code == 200 and "aisia_" in metrics.text
    assert MARKER not in metrics.text and PASSWORD not in metrics.text

    # The log: the whole of it (LiteLLM's own lines included), at its default level.
    log = proxy.logs()
    outage = [line for line in log.splitlines() if "unreachable" in line]
    # The store writes the URL as user:***@; in the proxy its lines go through LiteLLM's handler,
    # whose secret redaction hides the user too.
    assert outage and all(f"{USER}:***@" in line or "://REDACTED@" in line for line in outage), outage
    assert MARKER not in log
    assert PASSWORD not in log


def test_redis_credentials_are_redacted_in_every_error(redis, caplog):
    policy = load_policy_with_locations(_write(redis.dir / "p.yaml", POLICY)).policy
    wrong = redis.url.replace(PASSWORD, PASSWORD[::-1])
    store = RedisStore(policy, url=wrong)
    import asyncio

    with caplog.at_level(logging.WARNING, logger="aisia.state"):
        asyncio.run(_start_and_close(store))
    text = caplog.text
    # Masked by the store ("***"), or, once the plugin's loggers go through LiteLLM's handler (a
    # test in this process loaded the plugin), by LiteLLM's own redaction ("REDACTED").
    assert "unreachable" in text and ("***" in text or "REDACTED@" in text), text
    assert PASSWORD not in text and PASSWORD[::-1] not in text
    for bad in (f"redis://{USER}:{PASSWORD}@127.0.0.1:notaport/0", f"http://{USER}:{PASSWORD}@127.0.0.1:1/0",
                f"redis://{USER}:{PASSWORD}@127.0.0.1:1/db"):
        with pytest.raises(StoreConfigError) as err:
            RedisStore(policy, url=bad)
        assert PASSWORD not in str(err.value) and "***" in str(err.value), str(err.value)


async def _start_and_close(store):
    await store.start()
    await store.aclose()


def _write(path, text):
    path.write_text(text)
    return [path]


# -- policies are data -------------------------------------------------------------------------------
@pytest.mark.parametrize("payload", [
    "!!python/object/apply:os.system ['touch {flag}']",
    "!!python/object/new:subprocess.Popen [['touch', '{flag}']]",
    "!!python/name:os.system",
])
def test_a_policy_cannot_execute_code(tmp_path, payload):
    flag = tmp_path / "executed"
    path = tmp_path / "evil.yaml"
    path.write_text("version: 1\naliases:\n  auto/evil:\n    description: " + payload.format(flag=flag) + "\n")
    with pytest.raises(PolicyError) as err:
        load_policy_with_locations([path])
    assert not flag.exists()
    assert str(path) in str(err.value)


@pytest.mark.parametrize("strategy", ["os.system", "subprocess:Popen", "aisia_plugin.strategies.cost:CostStrategy",
                                      "no-such-strategy"])
def test_a_strategy_no_installed_plugin_provides_is_refused(tmp_path, strategy):
    path = tmp_path / "p.yaml"
    path.write_text(f"version: 1\naliases:\n  auto/x:\n    description: x\n    strategy: '{strategy}'\n")
    with pytest.raises(PolicyError) as err:
        load_policy_with_locations([path])
    text = str(err.value)
    assert f"{path}:5:" in text and "strategy" in text, text


# -- feedback cannot be abused -----------------------------------------------------------------------
def test_feedback_is_validated_applied_once_rate_limited_and_moves_only_the_serving_deployment(proxy, client):
    post = lambda body, **kw: httpx.post(proxy.url + "/aisia/feedback", headers=proxy.headers, timeout=60,  # noqa: E731
                                         **({"json": body} if body is not None else kw))
    ids = []
    for k in range(3):
        served, h = chat(client, "s/fb", f"feedback {k}")
        assert served == "fb-a"
        ids.append(h["x-aisia-request-id"])
    for rid in ids:
        explain_rows(proxy, rid)
    before = stats(proxy)
    # Refused: bad scores, bad ids, bad bodies (none of them counts).
    for score in (1.5, -0.1, "0.5", None, True, [], {}):
        assert post({"request_id": ids[0], "score": score}).status_code == 422, score
    for literal in (b"NaN", b"Infinity", b"1e309", b"-0.0000001"):
        body = b'{"request_id": "%s", "score": %s}' % (ids[0].encode(), literal)
        assert post(None, content=body).status_code == 422, literal
    for rid in ("", 123, None, ["x"]):
        assert post({"request_id": rid, "score": 0.5}).status_code == 422, rid
    assert post(None, content=b"not json").status_code == 400
    assert post(None, content=b'["a list"]').status_code == 400
    huge = post({"request_id": "x" * 1_000_000, "score": 0.5})
    assert huge.status_code == 404 and len(huge.text) < 1000
    # Applied once, to the deployment that served the request, whatever else the body says.
    for rid in ids:
        r = post({"request_id": rid, "score": 0.0, "deployment_id": "fb-b", "alias": "s/main"})
        assert r.status_code == 200 and r.json()["deployment_id"] == "fb-a", r.text
        assert post({"request_id": rid, "score": 1.0}).status_code in (404, 429)  # replayed
    # A flood of refused feedback is rate-limited; valid feedback still gets through.
    with ThreadPoolExecutor(8) as pool:  # faster than the budget refills (5 a second), even on a loaded machine
        flood = list(pool.map(lambda k: post({"request_id": f"forged-{k}", "score": 1.0}), range(200)))
    statuses = [r.status_code for r in flood]
    assert set(statuses) <= {404, 429} and statuses.count(404) <= 50 + 5 * 60, statuses
    limited = [r for r in flood if r.status_code == 429]
    assert limited and all("retry-after" in r.headers and "aisia_rate_limited" in r.text for r in limited), statuses
    served, h = chat(client, "s/fb", "one more")
    explain_rows(proxy, h["x-aisia-request-id"])
    assert post({"request_id": h["x-aisia-request-id"], "score": 1.0}).status_code == 200
    after = stats(proxy)
    # fb-a: the 3 requests were in `before`; then +1 request (health) and 3 + 1 feedback (quality evidence).
    assert after["fb-a"]["count"] == before["fb-a"]["count"] + 1
    assert after["fb-a"]["quality"]["evidence"]["feedback"] == before["fb-a"]["quality"]["evidence"]["feedback"] + 4
    assert after.get("fb-b", {}).get("count", 0) == before.get("fb-b", {}).get("count", 0) == 0
    for dep, row in before.items():
        if dep != "fb-a":
            assert after[dep]["count"] == row["count"], dep
    assert math.isfinite(after["fb-a"]["mean_reward"])


def test_a_reset_naming_an_id_redis_cannot_store_is_refused_and_writing_goes_on(proxy, client, redis):
    """Found by tests/long/fuzz.py: a lone surrogate in deployment_id was queued for Redis, where it
    cannot be encoded, and every later write waited behind it (and the answer was a 500)."""
    reset = lambda content: httpx.post(proxy.url + "/admin/bandit/reset", headers=proxy.headers,  # noqa: E731
                                       content=content, timeout=60)
    # Refused by LiteLLM's body parsing in its auth, the routes' dependency (1.108.7: a 400 "Invalid JSON
    # payload", as on its own routes, since no provider can encode it), else by the route's own check.
    assert reset(b'{"deployment_id": "\\ud800 lone"}').status_code in (400, 422)
    assert reset(b'{"deployment_id": "%s"}' % (b"x" * 513)).status_code == 422
    assert reset(b'{"deployment_id": "no-such-deployment"}').status_code == 200
    c = redis.client()
    try:
        before = int(c.hget("{aisia}:bandit:sec-a", "count") or 0)
        assert chat(client, "s/main", "after the resets")[0] == "sec-a"
        wait_for(lambda: int(c.hget("{aisia}:bandit:sec-a", "count") or 0) == before + 1, "the outcome written to Redis")
    finally:
        c.close()
