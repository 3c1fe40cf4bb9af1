"""Policies per team and per key through a real LiteLLM proxy (issue 37, acceptance 1;
docs/teams.md).

LiteLLM's database-backed keys and teams need Prisma's engines, which are downloaded at first
use and cannot be here: the keys and their teams come from LiteLLM's `custom_auth`
(tests/custom_auth_roles.py), returning the fields LiteLLM's database would join to a key
(team_id, team_alias, the key's metadata, models). Two teams, one key each, a key whose metadata
names a layer (aisia_policy), a key without a team and a key restricted to some models: each gets
its own layer's choice on the same prompts; no header or request metadata selects another layer;
`aisia validate` and `aisia explain --team/--key-metadata` agree with the proxy."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys

import httpx
import pytest

from fault_helpers import parse_reply, start_custom_auth_proxy, wait_for
from proxy_harness import upstreams_fixture

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy

PROMPTS = ("Hello, how are you today?", "Write a Python function that reverses a list.",
           "Summarise the French revolution in three lines.")

POLICY = """\
version: 1
defaults: false
proxy: {reload_interval_s: 0.5}
aliases:
  t/main:
    description: the operator's alias
    strategy: cost
    candidates: {models: [tm-cheap, tm-std, tm-mid, tm-top]}
deployments:
  tm-cheap: {tier: free}
  tm-std: {tier: standard}
  tm-mid: {tier: pro}
  tm-top: {tier: ultra}
teams:
  team-a-id:
    description: team A, by its LiteLLM team id
    aliases:
      t/main: {candidates: {tiers: [pro]}}
  beta:
    description: team B, by its LiteLLM team alias
    aliases:
      t/main: {candidates: {tiers: [ultra]}}
layers:
  standard-only:
    description: a key's own layer
    aliases:
      t/main: {candidates: {tiers: [standard]}}
"""

A_KEY, B_KEY, LAYER_KEY, LONE_KEY, MODELS_KEY = ("sk-" + n + "-" + secrets.token_hex(6)
                                                 for n in ("team-a", "team-b", "layered", "lone", "models"))
KEYS = {
    A_KEY: {"role": "internal_user", "team_id": "team-a-id", "team_alias": "alpha"},
    B_KEY: {"role": "internal_user", "team_id": "team-b-id", "team_alias": "beta"},
    # A key of team A whose metadata names a layer: its layer replaces its team's.
    LAYER_KEY: {"role": "internal_user", "team_id": "team-a-id", "team_alias": "alpha",
                "metadata": {"aisia_policy": "standard-only"}},
    LONE_KEY: {"role": "internal_user"},
    MODELS_KEY: {"role": "internal_user", "models": ["t/main", "tm-mid", "tm-top"]},
}
UNKNOWN_LAYER_KEY = "sk-unknown-layer-" + secrets.token_hex(6)
NARROW_KEY = "sk-narrow-" + secrets.token_hex(6)
KEYS[UNKNOWN_LAYER_KEY] = {"role": "internal_user", "team_id": "team-a-id", "metadata": {"aisia_policy": "nope"}}
KEYS[NARROW_KEY] = {"role": "internal_user", "team_alias": "beta", "models": ["t/main", "tm-cheap", "tm-mid"]}
# What each key's layer chooses with the cost strategy: the cheapest deployment it may use.
EXPECTED = {A_KEY: "tm-mid", B_KEY: "tm-top", LAYER_KEY: "tm-std", LONE_KEY: "tm-cheap", MODELS_KEY: "tm-mid"}


upstreams = upstreams_fixture([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in (("tm-cheap", 0.1), ("tm-std", 0.5), ("tm-mid", 1.0), ("tm-top", 5.0))])


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    p = start_custom_auth_proxy(tmp_path_factory.mktemp("teams"), upstreams, POLICY, KEYS)
    yield p
    p.stop()


def chat(proxy, key: str, text: str, headers=None, **body) -> httpx.Response:
    return httpx.post(proxy.base_url + "/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {key}", **(headers or {})},
                      json={"model": "t/main", "messages": [{"role": "user", "content": text}], **body})


def served(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text[:400]
    return parse_reply(r.json()["choices"][0]["message"]["content"])[0]


def test_each_key_gets_its_own_layers_choice_on_the_same_prompts(proxy):
    for text in PROMPTS:
        got = {key: served(chat(proxy, key, text)) for key in EXPECTED}
        assert got == EXPECTED, text


def test_no_header_or_request_metadata_selects_another_layer(proxy):
    for key in (A_KEY, B_KEY, LONE_KEY):
        r = chat(proxy, key, PROMPTS[0], headers={"x-aisia-policy": "standard-only", "x-litellm-team-id": "beta"},
                 metadata={"aisia_policy": "standard-only", "team_id": "beta", "user_api_key_team_id": "beta"})
        assert served(r) == EXPECTED[key]


def test_request_limits_narrow_within_the_keys_layer_and_a_bad_value_is_a_400(proxy):
    # A minimum tier narrows the operator's choice; it never widens a layer (team B stays ultra).
    assert served(chat(proxy, LONE_KEY, PROMPTS[0], headers={"x-aisia-min-tier": "standard"})) == "tm-std"
    assert served(chat(proxy, LONE_KEY, PROMPTS[0], metadata={"aisia_min_tier": "pro"})) == "tm-mid"
    assert served(chat(proxy, B_KEY, PROMPTS[0], headers={"x-aisia-min-tier": "free"})) == "tm-top"
    # Team A's layer keeps only pro: a minimum of ultra leaves nothing, said as the request's 400.
    r = chat(proxy, A_KEY, PROMPTS[0], headers={"x-aisia-min-tier": "ultra"})
    assert r.status_code == 400 and "minimum tier" in r.text, r.text[:300]
    for headers, body in (({"x-aisia-min-tier": "gold"}, {}), ({"x-aisia-max-cost-usd": "cheap"}, {}),
                          ({"x-aisia-max-cost-usd": "-1"}, {}), ({}, {"metadata": {"aisia_max_cost_usd": "nan"}})):
        r = chat(proxy, LONE_KEY, PROMPTS[0], headers=headers, **body)
        assert r.status_code == 400, (headers, body, r.status_code, r.text[:300])
        assert "x-aisia" in r.text or "aisia_max_cost_usd" in r.text
    # A maximum cost no deployment fits is refused, never served above it.
    r = chat(proxy, LONE_KEY, PROMPTS[0], headers={"x-aisia-max-cost-usd": "0.0000000001"})
    assert r.status_code == 402 and "maximum cost" in r.text, r.text[:300]


def test_policy_route_lists_the_layers(proxy):
    r = httpx.get(proxy.url + "/aisia/policy", headers=proxy.headers, timeout=60)
    assert r.status_code == 200, r.text[:300]
    layers = r.json()["layers"]
    assert {(x["section"], x["name"]) for x in layers} == {("teams", "team-a-id"), ("teams", "beta"),
                                                           ("layers", "standard-only")}
    assert next(x for x in layers if x["name"] == "beta")["aliases"]["t/main"]["candidates"]["tiers"] == ["ultra"]


def test_validate_and_explain_agree_with_the_proxy(proxy):
    policy = proxy.workdir / "team.yaml"
    aisia = [sys.executable, "-m", "aisia_plugin.cli"]
    v = subprocess.run(aisia + ["validate", str(policy), "--deployments", str(proxy.config_path)],
                       capture_output=True, text=True, timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    for key, args in ((A_KEY, ["--team", "team-a-id"]), (B_KEY, ["--team", "beta"]),
                      (LAYER_KEY, ["--team", "team-a-id", "--key-metadata", json.dumps({"aisia_policy": "standard-only"})]),
                      (LONE_KEY, []), (MODELS_KEY, ["--key-metadata", json.dumps({"models": KEYS[MODELS_KEY]["models"]})])):
        e = subprocess.run(aisia + ["explain", PROMPTS[1], "--alias", "t/main", "--policy", str(policy),
                                    "--deployments", str(proxy.config_path), "--json", *args],
                           capture_output=True, text=True, timeout=300)
        assert e.returncode == 0, e.stdout + e.stderr
        assert json.loads(e.stdout)["decision"]["deployment_id"] == EXPECTED[key] == served(chat(proxy, key, PROMPTS[1]))


def test_a_hot_reload_swaps_the_layers_and_an_invalid_layer_is_refused(proxy):
    policy = proxy.workdir / "team.yaml"

    def state():
        r = httpx.get(proxy.url + "/aisia/policy", headers=proxy.headers, timeout=60)
        assert r.status_code == 200, r.text[:300]
        return r.json()

    try:
        reloads = state()["reloads"]
        policy.write_text(POLICY.replace("t/main: {candidates: {tiers: [pro]}}", "t/main: {candidates: {tiers: [ultra]}}"))
        wait_for(lambda: state()["reloads"] > reloads, "the reload")
        assert served(chat(proxy, A_KEY, PROMPTS[0])) == "tm-top"
        assert served(chat(proxy, LAYER_KEY, PROMPTS[0])) == "tm-std"  # the other layers unchanged
        # A layer naming an alias the operator lacks is refused: the proxy keeps the last good policy.
        policy.write_text(POLICY.replace("t/main: {candidates: {tiers: [standard]}}", "t/mian: {strategy: cost}"))
        wait_for(lambda: state()["rejected_edit"], "the rejected edit")
        assert "layers.standard-only.aliases.t/mian" in json.dumps(state()["rejected_edit"])
        assert served(chat(proxy, LAYER_KEY, PROMPTS[0])) == "tm-std"
    finally:
        reloads = state()["reloads"]
        policy.write_text(POLICY)
        wait_for(lambda: state()["reloads"] > reloads, "the reload back")
    assert served(chat(proxy, A_KEY, PROMPTS[0])) == "tm-mid"


def test_metrics_answer_a_teams_key_with_its_own_teams_figures_only(proxy):
    assert served(chat(proxy, A_KEY, PROMPTS[2])) == "tm-mid" and served(chat(proxy, B_KEY, PROMPTS[2])) == "tm-top"

    def metrics(key) -> str:
        r = httpx.get(proxy.url + "/aisia/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert r.status_code == 200, r.text[:300]
        return r.text

    row = 'aisia_team_outcomes_total{alias="t/main",deployment="%s",result="success",team="%s"}'
    wait_for(lambda: row % ("tm-top", "team-b-id") in metrics(proxy.master_key), "team B's outcome in the metrics")
    admin = metrics(proxy.master_key)
    assert row % ("tm-mid", "team-a-id") in admin and "aisia_decisions_total{" in admin
    mine = metrics(A_KEY)
    assert row % ("tm-mid", "team-a-id") in mine and 'aisia_team_decisions_total{alias="t/main",deployment="tm-mid"' in mine
    assert set(re.findall(r'team="([^"]*)"', mine)) == {"team-a-id"}  # not another team's figures
    assert "aisia_decisions_total{" not in mine and "aisia_refusals_total" not in mine  # nor everyone's
    lone = metrics(LONE_KEY)  # a key of no team: the metrics without per-deployment learning, as before
    assert 'team="' not in lone
    assert "aisia_decisions_total{" not in lone


def test_a_key_naming_an_undeclared_layer_or_left_nothing_by_its_models_is_refused_saying_why(proxy, upstreams):
    calls = sum(u.stats()["calls"] for u in upstreams.values())
    r = chat(proxy, UNKNOWN_LAYER_KEY, PROMPTS[0])
    assert r.status_code == 403 and "aisia_policy 'nope'" in r.text and "standard-only" in r.text, r.text[:300]
    # Team B's layer keeps ultra only; this key of team B may use cheap and mid: nothing is left.
    r = chat(proxy, NARROW_KEY, PROMPTS[0])
    assert r.status_code == 403 and "not among the models the key may use" in r.text, r.text[:300]
    assert sum(u.stats()["calls"] for u in upstreams.values()) == calls  # no upstream was called
