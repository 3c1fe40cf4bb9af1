"""LiteLLM's auth settings, followed by the plugin in a real proxy whose keys come from a
`custom_auth` function (tests/custom_auth_roles.py: LiteLLM's Postgres-backed virtual keys cannot
be made on this machine) with LiteLLM's checks for them turned on
(`litellm_settings.enable_post_custom_auth_checks` and `general_settings.custom_auth_run_common_checks`:
then LiteLLM checks a custom-auth key's `models` as it checks a virtual key's).

- The aliases are model names like any other for LiteLLM (the plugin installs them as routing
  groups): `/v1/models` and `/model_group/info` list an alias only to a key whose models allow it,
  and a key whose models exclude an alias is refused it exactly as a plain model it excludes.
- `litellm_settings.require_auth_for_metrics_endpoint: false` opens `/aisia/metrics` as it opens
  LiteLLM's `/metrics` (tests/test_litellm_observability.py: unset, both need a key)."""

from __future__ import annotations

import secrets

import httpx
import pytest

from fault_helpers import parse_reply, start_custom_auth_proxy
from proxy_harness import start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

ALIAS = "k/any"
ONLY_X = "sk-only-x-" + secrets.token_hex(8)
ONLY_ALIAS = "sk-only-alias-" + secrets.token_hex(8)
EVERYTHING = "sk-everything-" + secrets.token_hex(8)
KEYS = {ONLY_X: {"role": "internal_user", "models": ["gpt-x"]},
        ONLY_ALIAS: {"role": "internal_user", "models": [ALIAS]},
        EVERYTHING: {"role": "internal_user", "models": []}}  # no models: all of them

POLICY = f"""\
version: 1
defaults: false
aliases:
  {ALIAS}:
    description: key scopes
    strategy: cost
    candidates: {{models: [gpt-x, gpt-y]}}
"""


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in (("gpt-x", 0.1), ("gpt-y", 1.0))])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    p = start_custom_auth_proxy(tmp_path_factory.mktemp("auth-settings"), upstreams, POLICY, KEYS,
                                litellm_settings={"enable_post_custom_auth_checks": True,
                                                  "require_auth_for_metrics_endpoint": False},
                                general_settings={"custom_auth_run_common_checks": True})
    yield p
    p.stop()


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def chat(proxy, key: str, model: str) -> httpx.Response:
    return httpx.post(proxy.base_url + "/chat/completions", headers=bearer(key), timeout=60,
                      json={"model": model, "messages": [{"role": "user", "content": "Hello, how are you?"}]})


def listed(proxy, key: str) -> tuple[set, set]:
    models = httpx.get(proxy.base_url + "/models", headers=bearer(key), timeout=60)
    groups = httpx.get(proxy.url + "/model_group/info", headers=bearer(key), timeout=60)
    assert models.status_code == 200 and groups.status_code == 200, (models.text[:200], groups.text[:200])
    return {m["id"] for m in models.json()["data"]}, {g["model_group"] for g in groups.json()["data"]}


def calls(upstreams) -> int:
    return sum(u.stats()["calls"] for u in upstreams.values())


@pytest.mark.parametrize("key,expected", [(ONLY_X, {"gpt-x"}), (ONLY_ALIAS, {ALIAS}),
                                          (EVERYTHING, {"gpt-x", "gpt-y", ALIAS})])
def test_models_and_model_groups_list_the_alias_only_to_keys_allowed_it(proxy, key, expected):
    models, groups = listed(proxy, key)
    assert models == expected and groups == expected
    assert (ALIAS in listed(proxy, proxy.master_key)[0])  # the proxy admin sees every name


def test_a_key_whose_models_exclude_the_alias_is_refused_it_as_a_plain_model(proxy, upstreams):
    assert chat(proxy, ONLY_X, "gpt-x").status_code == 200
    plain = chat(proxy, ONLY_X, "gpt-y")  # LiteLLM's own refusal of a model the key excludes
    assert plain.status_code in (401, 403), plain.text[:300]
    before = calls(upstreams)
    alias = chat(proxy, ONLY_X, ALIAS)
    assert alias.status_code == plain.status_code, alias.text[:300]
    assert alias.json()["error"]["type"] == plain.json()["error"]["type"]
    assert ALIAS in alias.json()["error"]["message"]
    assert calls(upstreams) == before  # refused before any routing


def test_a_key_allowed_the_alias_is_routed_by_it_but_not_given_its_members(proxy, upstreams):
    r = chat(proxy, ONLY_ALIAS, ALIAS)
    assert r.status_code == 200, r.text[:300]
    assert parse_reply(r.json()["choices"][0]["message"]["content"])[0] in upstreams
    assert r.headers["x-aisia-request-id"]  # routed by the plugin
    # The alias grants the alias, as a model_group_alias does in LiteLLM, not its members by name.
    for member in ("gpt-x", "gpt-y"):
        assert chat(proxy, ONLY_ALIAS, member).status_code in (401, 403)
    assert chat(proxy, EVERYTHING, ALIAS).status_code == 200


def test_metrics_are_open_when_litellm_metrics_are(proxy):
    """require_auth_for_metrics_endpoint: false: LiteLLM's /metrics does not ask for a key (404
    here: its Prometheus integration is off), and neither does /aisia/metrics."""
    assert httpx.get(proxy.url + "/metrics", timeout=60).status_code != 401
    for headers in ({}, bearer("sk-unknown")):
        r = httpx.get(proxy.url + "/aisia/metrics", headers=headers, timeout=60)
        assert r.status_code == 200 and "# TYPE" in r.text, r.text[:300]
