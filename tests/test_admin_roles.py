"""Keys that LiteLLM's own auth accepts but that are not the proxy admin's are refused by the
plugin's routes, against a real LiteLLM proxy.

A LiteLLM virtual key lives in its Postgres database through Prisma, whose engines are
downloaded at first use: this machine cannot make one (tests/test_security.py shows the refusal).
LiteLLM's other source of keys is `general_settings: custom_auth`, a function it calls in place
of its database lookup for every key presented to its auth (user_api_key_auth_builder, before the
master-key and virtual-key paths) and whose `UserAPIKeyAuth` it returns as the request's identity.
tests/custom_auth_roles.py is such a function: it gives one key the role internal_user (what a
virtual key without admin rights resolves to), one proxy_admin_viewer and one proxy_admin. The
plugin's routes take LiteLLM's `user_api_key_auth` as their FastAPI dependency (aisia_plugin/
litellm/admin.py require_admin), so every key, the master key included, takes the path it takes
on LiteLLM's own routes, read from any header LiteLLM reads a key from."""

from __future__ import annotations

import secrets

import httpx
import pytest

from fault_helpers import parse_reply, start_custom_auth_proxy
from proxy_harness import start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

USER_KEY = "sk-internal-" + secrets.token_hex(8)
OTHER_USER_KEY = "sk-internal2-" + secrets.token_hex(8)
VIEWER_KEY = "sk-viewer-" + secrets.token_hex(8)
ADMIN_KEY = "sk-padmin-" + secrets.token_hex(8)
ROLES = {USER_KEY: "internal_user", OTHER_USER_KEY: "internal_user", VIEWER_KEY: "proxy_admin_viewer",
         ADMIN_KEY: "proxy_admin"}

POLICY = """\
version: 1
defaults: false
aliases:
  r/main:
    description: roles
    strategy: cost
    candidates: {models: [role-a, role-b]}
"""
# The plugin's routes behind a key check (the list of tests/test_security.py); all but feedback
# are the proxy admin's only.
ROUTES = [("GET", "/aisia/bandit/stats"), ("POST", "/aisia/bandit/reset"),
          ("GET", "/admin/bandit/stats"), ("POST", "/admin/bandit/reset"), ("POST", "/aisia/feedback"),
          ("GET", "/aisia/explain"), ("GET", "/aisia/policy"), ("GET", "/aisia/ui"), ("GET", "/aisia/ui/data")]
ADMIN_ROUTES = [r for r in ROUTES if r[1] != "/aisia/feedback"]


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in (("role-a", 0.1), ("role-b", 1.0))])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    p = start_custom_auth_proxy(tmp_path_factory.mktemp("admin-roles"), upstreams, POLICY, ROLES)
    yield p
    p.stop()


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def consulted(proxy, path: str, role) -> int:
    """How many times the proxy's log shows the custom auth function resolving a key on `path`."""
    return proxy.logs().count(f"aisia-test-custom-auth: {path} -> {role}\n")


def chat(proxy, headers: dict) -> httpx.Response:
    return httpx.post(proxy.base_url + "/chat/completions", headers=headers, timeout=60,
                      json={"model": "r/main", "messages": [{"role": "user", "content": "Hello, how are you?"}]})


def call(proxy, method: str, path: str, headers: dict, body=None) -> httpx.Response:
    return httpx.request(method, proxy.url + path, headers=headers, timeout=60,
                         json=body if body is not None else {"request_id": "no-such-request", "score": 1.0,
                                                             "deployment_id": "role-a"})


# -- the custom auth is LiteLLM's auth here: it decides who may make a chat completion ------------
def test_litellm_consults_the_custom_auth_for_every_key_and_serves_a_non_admin_key(proxy, upstreams):
    before = consulted(proxy, "/v1/chat/completions", "internal_user")
    r = chat(proxy, bearer(USER_KEY))
    assert r.status_code == 200, r.text[:300]
    served = parse_reply(r.json()["choices"][0]["message"]["content"])[0]
    assert served in upstreams and r.headers["x-aisia-request-id"]  # routed by the plugin
    assert consulted(proxy, "/v1/chat/completions", "internal_user") == before + 1
    # The master key too goes through it on LiteLLM's own routes (the function maps it to proxy_admin).
    before = consulted(proxy, "/v1/chat/completions", "proxy_admin")
    assert chat(proxy, proxy.headers).status_code == 200
    assert consulted(proxy, "/v1/chat/completions", "proxy_admin") == before + 1
    # A key it does not know is refused by LiteLLM and reaches no upstream.
    calls = sum(u.stats()["calls"] for u in upstreams.values())
    before = consulted(proxy, "/v1/chat/completions", "None")
    refused = chat(proxy, bearer("sk-unknown-" + secrets.token_hex(4)))
    assert refused.status_code >= 400 and "choices" not in refused.text, refused.text[:300]
    assert consulted(proxy, "/v1/chat/completions", "None") == before + 1
    assert sum(u.stats()["calls"] for u in upstreams.values()) == calls


# -- the plugin's routes: the proxy admin only ----------------------------------------------------
@pytest.mark.parametrize("method,path", ADMIN_ROUTES)
def test_a_valid_key_without_admin_rights_is_refused_with_403(proxy, method, path):
    # (The routing page also opens to a key of a LiteLLM team, its own team's view: these keys have none;
    # tests/test_teams_ui.py.)
    required = ("the proxy admin's key or a key of a LiteLLM team is required" if path.startswith("/aisia/ui")
                else "the proxy admin's key is required")
    for key, role in ((USER_KEY, "internal_user"), (VIEWER_KEY, "proxy_admin_viewer")):
        for headers in (bearer(key), {"x-litellm-api-key": key}):
            before = consulted(proxy, path, role)
            r = call(proxy, method, path, headers)
            assert r.status_code == 403, (path, role, r.status_code, r.text[:200])
            assert r.json()["detail"]["error"] == {"message": required, "type": "aisia_auth_error"}
            # LiteLLM's auth resolved the key to its role (so the 403 is the role check's, not a failed auth).
            assert consulted(proxy, path, role) == before + 1


@pytest.mark.parametrize("method,path", ROUTES)
def test_a_missing_or_unknown_key_is_refused_with_401(proxy, method, path):
    for headers in ({}, bearer("sk-unknown-" + secrets.token_hex(4)), bearer(ADMIN_KEY + "x"), bearer(USER_KEY[:-1])):
        r = call(proxy, method, path, headers)
        assert r.status_code == 401, (path, headers, r.status_code, r.text[:200])
        assert r.json()["detail"]["error"]["type"] == "aisia_auth_error"


@pytest.mark.parametrize("method,path", ROUTES)
@pytest.mark.parametrize("who", ["proxy_admin key", "master key"])
def test_the_proxy_admin_role_and_the_master_key_get_through(proxy, method, path, who):
    headers = bearer(ADMIN_KEY) if who == "proxy_admin key" else proxy.headers
    body = None
    if path == "/aisia/feedback":  # feedback on a request this test had served
        served = chat(proxy, headers)
        assert served.status_code == 200, served.text[:300]
        body = {"request_id": served.headers["x-aisia-request-id"], "score": 0.8}
    before = consulted(proxy, path, "proxy_admin")
    r = call(proxy, method, path, headers, body)
    assert r.status_code == 200, (path, who, r.status_code, r.text[:200])
    if path == "/aisia/feedback":
        assert r.json()["request_id"] == body["request_id"] and r.json()["deployment_id"] in ("role-a", "role-b")
    # LiteLLM's auth resolved the key, the master key too (no path of the plugin's own around it).
    assert consulted(proxy, path, "proxy_admin") == before + 1


@pytest.mark.parametrize("header", ["x-api-key", "x-goog-api-key", "api-key"])
def test_the_key_is_read_from_every_header_litellm_reads_it_from(proxy, header):
    """FastAPI resolves LiteLLM's own key headers for the dependency: an Anthropic or Google client's
    header works on the plugin's routes as on LiteLLM's (/v1/models), with the same role check."""
    for key, litellm_status, status in ((ADMIN_KEY, 200, 200), (USER_KEY, 200, 403), ("sk-unknown", None, 401)):
        if litellm_status is not None:
            assert httpx.get(proxy.url + "/v1/models", headers={header: key}, timeout=60).status_code == litellm_status
        r = httpx.get(proxy.url + "/aisia/policy", headers={header: key}, timeout=60)
        assert r.status_code == status, (header, key, r.status_code, r.text[:200])


def sign_in(proxy, key) -> httpx.Response:
    return httpx.post(proxy.url + "/aisia/ui/login", data={"key": key}, timeout=60)


def test_the_routing_page_sign_in_takes_the_same_check(proxy):
    """The sign-in form's key goes through LiteLLM's auth and the role check: any key of the proxy
    admin's role gets the session cookie; a valid key without admin rights the form again with
    403, an unknown one with 401, neither a cookie nor the key in the answer."""
    expected = {ADMIN_KEY: 303, proxy.master_key: 303, USER_KEY: 403, VIEWER_KEY: 403, "sk-unknown-x1": 401}
    before = {role: consulted(proxy, "/aisia/ui/login", role) for role in ("proxy_admin", "internal_user", "None")}
    seen = {key: sign_in(proxy, key) for key in expected}
    assert {k: r.status_code for k, r in seen.items()} == expected
    for key, r in seen.items():
        assert key not in r.text and key not in r.headers.get("location", "")
        assert ("aisia_session=" in r.headers.get("set-cookie", "")) == (r.status_code == 303), key
        if r.status_code != 303:
            assert 'name="key"' in r.text  # the form again
    assert consulted(proxy, "/aisia/ui/login", "proxy_admin") == before["proxy_admin"] + 2
    assert consulted(proxy, "/aisia/ui/login", "internal_user") == before["internal_user"] + 1
    assert consulted(proxy, "/aisia/ui/login", "None") == before["None"] + 1
    # The cookie is presented to LiteLLM's auth on each request: the page's data as the admin key.
    cookies = seen[ADMIN_KEY].cookies
    before = consulted(proxy, "/aisia/ui/data", "proxy_admin")
    data = httpx.get(proxy.url + "/aisia/ui/data", cookies=cookies, timeout=60)
    assert data.status_code == 200 and "deployments" in data.json()
    assert consulted(proxy, "/aisia/ui/data", "proxy_admin") == before + 1


def test_a_key_in_the_routing_page_url_is_not_read(proxy):
    """/aisia/ui?key=...: redirected to the sign-in form without the key, and not even checked
    (LiteLLM's auth is not consulted), whoever's key it is."""
    for key in (ADMIN_KEY, proxy.master_key, USER_KEY):
        before = sum(consulted(proxy, path, role) for path in ("/aisia/ui", "/aisia/ui/data")
                     for role in ("proxy_admin", "internal_user", "None"))
        for path in ("/aisia/ui", "/aisia/ui/data"):
            r = httpx.get(proxy.url + path, params={"key": key}, timeout=60)
            assert r.status_code == 303 and r.headers["location"] == "/aisia/ui/login?refused=url", r.headers
            assert key not in r.text and "set-cookie" not in r.headers
        assert sum(consulted(proxy, path, role) for path in ("/aisia/ui", "/aisia/ui/data")
                   for role in ("proxy_admin", "internal_user", "None")) == before


# -- feedback: a key for the requests it made itself, the proxy admin for any ---------------------
def feedback(proxy, key: str, rid: str) -> httpx.Response:
    return httpx.post(proxy.url + "/aisia/feedback", headers=bearer(key), timeout=60,
                      json={"request_id": rid, "score": 0.7})


def test_a_key_gives_feedback_for_its_own_requests_only_and_the_proxy_admin_for_any(proxy):
    mine = chat(proxy, bearer(USER_KEY))
    assert mine.status_code == 200, mine.text[:300]
    rid = mine.headers["x-aisia-request-id"]
    for other in (OTHER_USER_KEY, VIEWER_KEY):  # valid keys, not the one that made it: as if unknown
        before = consulted(proxy, "/aisia/feedback", ROLES[other])
        r = feedback(proxy, other, rid)
        assert r.status_code == 404, (other, r.status_code, r.text[:300])
        assert consulted(proxy, "/aisia/feedback", ROLES[other]) == before + 1
    r = feedback(proxy, USER_KEY, rid)  # not used up by the refusals
    assert r.status_code == 200, r.text[:300]
    assert r.json()["request_id"] == rid and r.json()["deployment_id"] in ("role-a", "role-b")
    assert feedback(proxy, USER_KEY, rid).status_code == 404  # once
    theirs = chat(proxy, bearer(OTHER_USER_KEY)).headers["x-aisia-request-id"]
    assert feedback(proxy, ADMIN_KEY, theirs).status_code == 200
    also_theirs = chat(proxy, bearer(OTHER_USER_KEY)).headers["x-aisia-request-id"]
    assert httpx.post(proxy.url + "/aisia/feedback", headers=proxy.headers, timeout=60,
                      json={"request_id": also_theirs, "score": 0.2}).status_code == 200  # the master key
    assert feedback(proxy, USER_KEY, "sk-unknown").status_code == 404
    assert feedback(proxy, "sk-unknown-" + secrets.token_hex(4), theirs).status_code == 401
