"""A hostile tenant against real LiteLLM proxies (issue 35, findings 3 to 6): tenant keys and an
admin key from LiteLLM's `custom_auth` (tests/custom_auth_roles.py), two replicas sharing one
real redis-server, as a deployment with several replicas runs them.

3. A routing-page cookie copied before its sign-out is refused afterwards, on every replica: the
   sign-out revokes the session in the shared store. The cookie is sealed by LiteLLM's own
   bearer-token helper (encrypt_bearer_token) under the plugin's prefix.
4. Every hostile number in a feedback body (a score of 4,000 digits, 1e999, NaN, strings, ...)
   is a clean 422, never a 500 or a traceback; a flood of refused feedback is limited per key
   across replicas (the count lives in Redis) with one log line, and another tenant's feedback
   is untouched.
5. Without a key, or with a tenant key, /aisia/health says its status and nothing else (no file,
   no error), and /aisia/metrics carries no per-deployment learning; the proxy admin reads both
   in full. /aisia/metrics follows LiteLLM's require_auth_for_metrics_endpoint (replica two sets
   it false: anyone reads the rest).
6. A hot reload that changes a setting read at start only says so ("state.backend changed ...:
   restart to apply") in the log and /aisia/policy, and /aisia/health says degraded while the
   running policy differs from the files (that, or an edit rejected); `aisia validate` names such
   settings where the files set them."""

from __future__ import annotations

import json
import secrets

import httpx
import pytest

from aisia_plugin.metrics import PER_DEPLOYMENT
from fault_helpers import start_custom_auth_proxy, wait_for
from proxy_harness import upstreams_fixture
from redis_server import RedisServer

MASTER = "sk-master-" + secrets.token_hex(8)
TENANT_A = "sk-tenant-a-" + secrets.token_hex(8)
TENANT_B = "sk-tenant-b-" + secrets.token_hex(8)
TENANT_C = "sk-tenant-c-" + secrets.token_hex(8)
ADMIN_KEY = "sk-padmin-" + secrets.token_hex(8)
ROLES = {TENANT_A: "internal_user", TENANT_B: "internal_user", TENANT_C: "internal_user", ADMIN_KEY: "proxy_admin"}

POLICY = """\
version: 1
defaults: false
state:
  backend: redis
  reconnect_max_ms: 500
proxy:
  reload_interval_s: 0.5
aliases:
  h/main:
    description: hostile tenants
    strategy: cost
    candidates: {models: [h-a, h-b]}
"""
BROKEN = "version: 1\naliases:\n  team/x:\n    description: x\n    strategy: fastest\n"
HUGE = "1" + "0" * 4000  # a JSON number no float holds
REFUSALS_PER_KEY = 100  # admin.RefusalLimit's budget of a key's refused feedback in its window


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    srv = RedisServer(tmp_path_factory.mktemp("redis-hostile")).start()
    yield srv
    srv.stop()


upstreams = upstreams_fixture([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in (("h-a", 0.1), ("h-b", 1.0))])


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, upstreams, redis):
    """Two proxies (one worker each) sharing Redis and the master key, as replicas do; the second
    lets anyone read its metrics (litellm_settings.require_auth_for_metrics_endpoint: false)."""
    started = []
    try:
        for n, settings in ((1, None), (2, {"require_auth_for_metrics_endpoint": False})):
            work = tmp_path_factory.mktemp(f"replica{n}")
            policy = work / "policy.yaml"
            policy.write_text(POLICY)
            p = start_custom_auth_proxy(work, upstreams, policy, ROLES, litellm_settings=settings,
                                        general_settings={"master_key": MASTER}, env={"AISIA_REDIS_URL": redis.url})
            p.policy = policy
            started.append(p)
        yield started
    finally:
        for p in started:
            p.stop()


@pytest.fixture(scope="module")
def aside(tmp_path_factory, upstreams):
    """A proxy whose policy is invalid: the plugin stands aside (plain models served, aliases 503)."""
    work = tmp_path_factory.mktemp("aside")
    policy = work / "policy.yaml"
    policy.write_text(BROKEN)
    p = start_custom_auth_proxy(work, upstreams, policy, ROLES)
    p.policy = policy
    yield p
    p.stop()


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def served_id(proxy, key: str) -> str:
    """The x-aisia-request-id of one alias request made with `key`."""
    r = httpx.post(proxy.base_url + "/chat/completions", headers=bearer(key), timeout=60,
                   json={"model": "h/main", "messages": [{"role": "user", "content": "Hello, how are you?"}]})
    assert r.status_code == 200, r.text[:300]
    return r.headers["x-aisia-request-id"]


def feedback(proxy, key: str, rid: str, score: str) -> httpx.Response:
    """POST /aisia/feedback with `score` written into the JSON as given (a number JSON allows
    but no float holds, a literal Python's JSON reads as a float, ...)."""
    return httpx.post(proxy.url + "/aisia/feedback", timeout=60,
                      headers={**bearer(key), "content-type": "application/json"},
                      content='{"request_id": %s, "score": %s}' % (json.dumps(rid), score))


def health(proxy, headers=None) -> httpx.Response:
    return httpx.get(proxy.url + "/aisia/health", headers=headers or {}, timeout=30)


def policy_state(proxy) -> dict:
    r = httpx.get(proxy.url + "/aisia/policy", headers=bearer(ADMIN_KEY), timeout=30)
    assert r.status_code == 200, r.text[:300]
    return r.json()


# -- 3. sessions are revocable ---------------------------------------------------------------------
def ui_data(proxy, cookie: str) -> httpx.Response:
    return httpx.get(proxy.url + "/aisia/ui/data", cookies={"aisia_session": cookie}, timeout=60)


def sign_in(proxy) -> str:
    signed = httpx.post(proxy.url + "/aisia/ui/login", data={"key": ADMIN_KEY}, timeout=60)
    assert signed.status_code == 303, signed.text[:300]
    return signed.cookies["aisia_session"]


def test_the_cookie_is_sealed_by_litellms_bearer_token_helper(replicas, monkeypatch):
    """LiteLLM's helper for its own login tokens (encrypt_bearer_token), under the plugin's prefix
    (its AES-GCM associated data) and the salt of both replicas (no LITELLM_SALT_KEY: the master
    key): the key, its expiry and a session id; not readable as a LiteLLM login token."""
    cookie = sign_in(replicas[0])
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm stays offline
    monkeypatch.setenv("LITELLM_SALT_KEY", MASTER)
    from litellm.proxy.common_utils.encrypt_decrypt_utils import decrypt_bearer_token

    opened = json.loads(decrypt_bearer_token(cookie, "aisia_session_") or "null")
    assert opened is not None and opened["key"] == ADMIN_KEY and opened["sid"] and opened["exp"], opened
    assert decrypt_bearer_token(cookie, "litellm_login_") is None


def test_a_copied_cookie_is_refused_on_every_replica_after_its_sign_out(replicas, redis):
    one, two = replicas
    copied = sign_in(one)  # what a thief copies before the admin signs out
    kept = sign_in(two)
    assert [ui_data(p, c).status_code for p in (one, two) for c in (copied, kept)] == [200] * 4

    out = httpx.post(one.url + "/aisia/ui/logout", cookies={"aisia_session": copied}, timeout=60)
    assert out.status_code == 303 and 'aisia_session=""' in out.headers["set-cookie"], out.headers

    for proxy in (one, two, one, two):  # the replica that signed out and the other one
        refused = ui_data(proxy, copied)
        assert refused.status_code == 401, (proxy.url, refused.status_code, refused.text[:200])
        assert "deployments" not in refused.text
        page = httpx.get(proxy.url + "/aisia/ui", cookies={"aisia_session": copied},
                         headers={"accept": "text/html"}, timeout=60)
        assert page.status_code == 303 and page.headers["location"].endswith("/aisia/ui/login"), page.headers
    # The sign-out revoked its session, not the key: another session of the same key still reads.
    assert ui_data(one, kept).status_code == 200 and ui_data(two, kept).status_code == 200
    # One mark in Redis, living no longer than the cookie would have.
    c = redis.client()
    try:
        marks = list(c.scan_iter(match="*session-revoked:*"))
        assert len(marks) == 1, marks
        assert 0 < c.ttl(marks[0]) <= 8 * 3600 + 1
    finally:
        c.close()


# -- 4. every hostile body a clean 4xx ---------------------------------------------------------------
HOSTILE_SCORES = [HUGE, "-" + HUGE, HUGE + ".5", "1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1.0000001",
                  "-0.5", "2", '"0.5"', "true", "null", "[0.5]", '{"$gt": 0}']


def test_every_hostile_score_is_a_clean_422_and_the_request_keeps_its_feedback(replicas):
    one, two = replicas
    rid = served_id(one, TENANT_C)
    before = [len(p.logs()) for p in replicas]
    for n, score in enumerate(HOSTILE_SCORES):
        r = feedback(replicas[n % 2], TENANT_C, rid, score)
        assert r.status_code == 422, (score[:20], r.status_code, r.text[:300])
        assert r.json()["detail"]["error"] == {"message": "score must be a number in [0, 1]", "type": "aisia_bad_request"}
    for proxy, at in zip(replicas, before):
        logged = proxy.logs()[at:]
        assert "Traceback" not in logged and "OverflowError" not in logged, logged[-2000:]
    ok = feedback(two, TENANT_C, rid, "0.5")  # refused scores took nothing: the request still awaits one
    assert ok.status_code == 200 and ok.json()["request_id"] == rid, ok.text[:300]


def test_numbers_are_bounded_before_any_float_conversion():
    from aisia_plugin.numbers import clamp01, finite, within

    huge = int(HUGE)
    assert [within(v, 0.0, 1.0) for v in (huge, -huge, float("nan"), float("inf"), True, "0.5", None, [0.5])] == [None] * 8
    assert [within(v, 0.0, 1.0) for v in (0, 1, 0.25, -0.0)] == [0.0, 1.0, 0.25, 0.0]
    assert (clamp01(huge), clamp01(-huge), finite(huge, 7.0)) == (1.0, 0.0, 7.0)  # no OverflowError


def test_every_number_an_admin_route_reads_is_bounded(replicas):
    """/aisia/explain's limit (the plugin's one other number): hostile values never reach a 500."""
    one = replicas[0]
    for limit in (HUGE, "1" + "0" * 5000, "1e999", "nan", "-1", "0x10", "2.5"):
        r = httpx.get(one.url + "/aisia/explain", params={"limit": limit}, headers=bearer(ADMIN_KEY), timeout=60)
        assert r.status_code in (200, 422), (limit[:20], r.status_code, r.text[:300])
        if r.status_code == 200:
            assert len(r.json()["decisions"]) <= 1000


def test_a_flood_of_refused_feedback_is_limited_per_key_across_replicas_and_logged_once(replicas):
    one, two = replicas
    before = [len(p.logs()) for p in replicas]
    statuses, retry_after = [], set()
    with httpx.Client(timeout=60) as c:
        for n in range(REFUSALS_PER_KEY + 30):  # alternately on each replica: one count in Redis
            r = c.post(replicas[n % 2].url + "/aisia/feedback", content='{"request_id": "x", "score": %s}' % HUGE,
                       headers={**bearer(TENANT_A), "content-type": "application/json"})
            statuses.append(r.status_code)
            if r.status_code == 429:
                retry_after.add(r.headers.get("retry-after"))
    assert statuses == [422] * REFUSALS_PER_KEY + [429] * 30, statuses
    assert retry_after == {"60"}
    # Another tenant is untouched: its valid feedback, and its own refusals, answered as ever.
    rid = served_id(two, TENANT_B)
    assert feedback(one, TENANT_B, "no-such-request", "0.9").status_code == 404
    assert feedback(two, TENANT_B, rid, HUGE).status_code == 422
    assert feedback(one, TENANT_B, rid, "0.9").status_code == 200
    # The flooding key's valid feedback is not limited either (each served request takes one, once).
    assert feedback(one, TENANT_A, served_id(two, TENANT_A), "0.9").status_code == 200
    logged = [p.logs()[at:] for p, at in zip(replicas, before)]
    assert not any("Traceback" in text or "OverflowError" in text for text in logged)
    assert sum(text.count("feedback requests refused within") for text in logged) == 1  # once per key and window
    # Bounded: the proxies' own line or two per request (auth, access), not a traceback each.
    assert sum(len(text) for text in logged) < (REFUSALS_PER_KEY + 40) * 400, sum(len(text) for text in logged)


# -- 5. non-admins see their own ---------------------------------------------------------------------
def test_health_says_only_its_status_without_the_admin_key(replicas):
    for proxy in replicas:
        for headers in ({}, bearer(TENANT_A), bearer("sk-unknown-" + secrets.token_hex(4))):
            r = health(proxy, headers)
            assert (r.status_code, r.json()) == (200, {"status": "healthy"}), (headers, r.text[:300])
        full = health(proxy, bearer(ADMIN_KEY)).json()
        assert full["status"] == "healthy" and full["aliases"] == ["h/main"] and "worker_pid" in full


@pytest.mark.proxy
def test_health_of_a_plugin_standing_aside_names_no_file_without_the_admin_key(aside):
    for headers in ({}, bearer(TENANT_A), bearer("sk-unknown-" + secrets.token_hex(4))):
        r = health(aside, headers)
        assert (r.status_code, r.json()) == (503, {"status": "unhealthy"}), (headers, r.text[:300])
        assert str(aside.policy) not in r.text and "strategy" not in r.text
    for headers in (bearer(ADMIN_KEY), aside.headers):  # a proxy_admin key, the master key
        r = health(aside, headers)
        assert r.status_code == 503 and f"{aside.policy}:5:" in r.json()["error"], r.text[:300]


def metrics(proxy, headers) -> httpx.Response:
    return httpx.get(proxy.url + "/aisia/metrics", headers=headers, timeout=60)


def test_metrics_show_per_deployment_learning_to_the_proxy_admin_only(replicas):
    one, two = replicas
    for key in (TENANT_A, TENANT_B):
        served_id(one, key)  # traffic: decisions, outcomes and learned gauges per deployment
        served_id(two, key)
    for proxy in (one, two):
        full = metrics(proxy, bearer(ADMIN_KEY))
        assert full.status_code == 200
        assert all(name in full.text for name in PER_DEPLOYMENT), [n for n in PER_DEPLOYMENT if n not in full.text]
        assert 'ai_circuit_breaker_state{provider="h-a"}' in full.text
        tenant = metrics(proxy, bearer(TENANT_B))
        assert tenant.status_code == 200 and "aisia_policy_reloads_total" in tenant.text
        assert [name for name in PER_DEPLOYMENT if name in tenant.text] == []
        assert "h-a" not in tenant.text and "h-b" not in tenant.text  # no deployment named at all
    # Replica one keeps LiteLLM's default (a key needed); replica two lets anyone read the rest.
    assert metrics(one, {}).status_code == 401
    assert metrics(one, bearer("sk-unknown-" + secrets.token_hex(4))).status_code == 401
    anyone = metrics(two, {})
    assert anyone.status_code == 200 and "aisia_policy_reloads_total" in anyone.text
    assert [name for name in PER_DEPLOYMENT if name in anyone.text] == []


# -- 6. reload says what it did (last: it edits replica two's policy, and puts it back) ------------------
def test_a_reload_reports_a_setting_read_at_start_and_health_says_degraded_until_the_files_match(replicas):
    one, two = replicas
    good = two.policy.read_text()
    reloads = policy_state(two)["reloads"]
    two.policy.write_text(good.replace("  backend: redis\n", "  backend: memory\n  snapshot_path: /nonexistent/x.json\n"))
    state = wait_for(lambda: (lambda s: s if s["reloads"] > reloads else None)(policy_state(two)), "the reload")
    said = ["state.backend changed ('redis' -> 'memory'): restart to apply",
            "state.snapshot_path changed (None -> '/nonexistent/x.json'): restart to apply"]
    assert state["restart_pending"] == said and state["rejected_edit"] is None
    assert all(text in two.logs() for text in said)
    assert (health(two).status_code, health(two).json()) == (200, {"status": "degraded"})
    full = health(two, bearer(ADMIN_KEY)).json()
    assert full["status"] == "degraded" and full["degraded"] == said
    assert health(one).json() == {"status": "healthy"}  # the other replica's files did not change
    # Not applied: replica two still shares Redis (a request served by one takes feedback on two).
    rid = served_id(one, TENANT_B)
    assert feedback(two, TENANT_B, rid, "0.8").status_code == 200

    # An edit the validator rejects: the last good policy serves, and health says so.
    two.policy.write_text(good.replace("strategy: cost", "strategy: cots"))
    wait_for(lambda: policy_state(two)["rejected_edit"], "the rejection")
    assert health(two).json() == {"status": "degraded"}
    reasons = health(two, bearer(ADMIN_KEY)).json()["degraded"]
    assert reasons[0].startswith("the policy files are rejected, the last good policy serves: ") and \
        f"{two.policy}:" in reasons[0] and reasons[1:] == said

    two.policy.write_text(good)  # the files as the proxy started: nothing differs any more
    wait_for(lambda: (lambda s: s["rejected_edit"] is None and s["restart_pending"] == [])(policy_state(two)),
             "the files back as they were")
    assert (health(two).status_code, health(two).json()) == (200, {"status": "healthy"})
    assert "degraded" not in health(two, bearer(ADMIN_KEY)).json()


def test_validate_names_the_settings_read_at_start_where_the_files_set_them(aisia, tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(POLICY + "  h/other:\n    description: x\n    strategy: cost\n")
    code, out, err = aisia("validate", path)
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0] == "ok: 1 file, 2 aliases"
    note = "read at start only: a change applies when the proxy restarts"
    assert [line.split(": ", 2)[:2] for line in lines[1:]] == [[f"{path}:4:3", "state.backend"],
                                                               [f"{path}:5:3", "state.reconnect_max_ms"]]
    assert all(note in line for line in lines[1:])
    code, out, _ = aisia("validate", "--format", "json", path)
    report = json.loads(out)
    assert [(i["path"], i["line"], i["kind"]) for i in report["read_at_start"]] == [
        ("state.backend", 4, "restart"), ("state.reconnect_max_ms", 5, "restart")]
    assert {"state.backend", "state.snapshot_path", "state.key_prefix", "proxy.fail_closed"} <= \
        set(report["start_only_settings"])
    # --strict does not count them: they are notes, not settings that do nothing.
    assert aisia("validate", "--strict", path)[0] == 0


def test_a_cookie_is_refused_while_the_revocation_list_cannot_be_read(replicas, redis):
    """Fail closed: a session whose revocation cannot be checked (Redis stopped) is refused; a
    sign-out that cannot reach Redis says so in the log. Both read again once Redis is back."""
    one = replicas[0]
    cookie, other = sign_in(one), sign_in(one)
    assert ui_data(one, cookie).status_code == 200
    redis.pause()
    try:
        assert ui_data(one, cookie).status_code == 401
        assert httpx.post(one.url + "/aisia/ui/logout", cookies={"aisia_session": other}, timeout=60).status_code == 303
    finally:
        redis.resume()
    assert "a routing-page sign-out could not reach the state store to revoke its session" in one.logs()
    wait_for(lambda: ui_data(one, cookie).status_code == 200, "the cookie read again once Redis is back")
