"""Keys that LiteLLM's own auth accepts but that are not the proxy admin's are refused by the
plugin's routes, against a real LiteLLM proxy.

A LiteLLM virtual key lives in its Postgres database through Prisma, whose engines are
downloaded at first use: this machine cannot make one (tests/test_security.py shows the refusal).
LiteLLM's other source of keys is `general_settings: custom_auth`, a function it calls in place
of its database lookup for every key presented to its auth (user_api_key_auth_builder, before the
master-key and virtual-key paths) and whose `UserAPIKeyAuth` it returns as the request's identity.
tests/custom_auth_roles.py is such a function: it gives one key the role internal_user (what a
virtual key without admin rights resolves to), one proxy_admin_viewer and one proxy_admin. The
plugin's check (aisia_plugin/litellm/admin.py check_admin) admits the master key itself and asks
LiteLLM's `user_api_key_auth` about any other key, so these keys take the same path a virtual
key would."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import httpx
import pytest

from fault_helpers import SLOW_MACHINE_ENV, parse_reply
from proxy_harness import deployment, start_proxy, start_upstreams, stop_upstreams

TESTS = Path(__file__).resolve().parent
USER_KEY = "sk-internal-" + secrets.token_hex(8)
VIEWER_KEY = "sk-viewer-" + secrets.token_hex(8)
ADMIN_KEY = "sk-padmin-" + secrets.token_hex(8)
ROLES = {USER_KEY: "internal_user", VIEWER_KEY: "proxy_admin_viewer", ADMIN_KEY: "proxy_admin"}

POLICY = """\
version: 1
defaults: false
aliases:
  r/main:
    description: roles
    strategy: cost
    candidates: {models: [role-a, role-b]}
"""
# The plugin's routes behind the admin check (the list of tests/test_security.py).
ROUTES = [("GET", "/admin/bandit/stats"), ("POST", "/admin/bandit/reset"), ("POST", "/aisia/feedback"),
          ("GET", "/aisia/explain"), ("GET", "/aisia/policy"), ("GET", "/aisia/ui"), ("GET", "/aisia/ui/data")]


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in (("role-a", 0.1), ("role-b", 1.0))])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    workdir = tmp_path_factory.mktemp("admin-roles")
    (workdir / "team.yaml").write_text(POLICY)
    config = {"model_list": [deployment(n, u) for n, u in upstreams.items()],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]},
              "general_settings": {"custom_auth": "custom_auth_roles.user_api_key_auth"}}
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    p = start_proxy(config, workdir, timeout_s=240,
                    env={"AISIA_POLICY": str(workdir / "team.yaml"), "PYTHONPATH": path,
                         "AISIA_TEST_ROLE_KEYS": json.dumps(ROLES), **SLOW_MACHINE_ENV})
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
@pytest.mark.parametrize("method,path", ROUTES)
def test_a_valid_key_without_admin_rights_is_refused_with_403(proxy, method, path):
    for key, role in ((USER_KEY, "internal_user"), (VIEWER_KEY, "proxy_admin_viewer")):
        for headers in (bearer(key), {"x-litellm-api-key": key}):
            before = consulted(proxy, path, role)
            r = call(proxy, method, path, headers)
            assert r.status_code == 403, (path, role, r.status_code, r.text[:200])
            assert r.json()["detail"]["error"] == {"message": "the proxy admin's key is required",
                                                   "type": "aisia_auth_error"}
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
    # The master key is admitted by the plugin itself; the proxy_admin key by LiteLLM's auth.
    assert consulted(proxy, path, "proxy_admin") == before + (who == "proxy_admin key")


def test_the_routing_page_link_key_takes_the_same_check(proxy):
    """A browser opens /aisia/ui?key=...: any key of the proxy admin's role opens it; a valid key
    without admin rights gets 403, an unknown one 401."""
    expected = {ADMIN_KEY: 200, proxy.master_key: 200, USER_KEY: 403, VIEWER_KEY: 403, "sk-unknown": 401}
    seen = {key: httpx.get(proxy.url + "/aisia/ui", params={"key": key}, timeout=60) for key in expected}
    assert {k: r.status_code for k, r in seen.items()} == expected
    assert "<html" in seen[ADMIN_KEY].text and "<html" not in seen[USER_KEY].text
