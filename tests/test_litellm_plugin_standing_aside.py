"""A plugin fault never takes plain traffic down (issue 18 E), through real proxies.

- An invalid policy: the proxy starts, its plain models answer 200, every alias (the shipped
  ``auto/*`` and the team file's own) answers 503 naming the error as file:line:column: field,
  ``GET /aisia/health`` says so (the error to the proxy admin's key only), and the log holds one
  line for it (no traceback).
- The Router changing at run time (tests/router_changes.py does what LiteLLM does on a config
  reload or a model added through its database): a rebuilt Router gets the aliases back; a
  model added under an alias's name is found once and remembered (one log line across many
  requests, plain ones included: they touch nothing of the plugin), the model keeps its name
  and the aliases answer 503 naming the collision.
The refusals to start (``proxy.fail_closed`` / $AISIA_FAIL_CLOSED) are in
tests/test_litellm_plugin_config.py, next to the start-ups they change."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from fault_helpers import SLOW_MACHINE_ENV
from proxy_harness import deployment, parse_reply, start_proxy, start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

TESTS = Path(__file__).resolve().parent
BROKEN = "version: 1\naliases:\n  team/x:\n    description: x\n    strategy: fastest\n"
GOOD = """\
version: 1
defaults: false
aliases:
  auto:
    description: everything
    strategy: cost
  team/support:
    description: support
    strategy: cost
"""


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": "sa-a", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.1},
                               {"name": "sa-b", "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0}])
    yield {u.name: u for u in running}
    stop_upstreams(running)


def chat(proxy, model: str) -> httpx.Response:
    return httpx.post(proxy.base_url + "/chat/completions", headers=proxy.headers, timeout=60,
                      json={"model": model, "messages": [{"role": "user", "content": "Hello there"}]})


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    err = body.get("error") or body.get("detail", {}).get("error") or {}
    return err


# -- an invalid policy ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def broken(tmp_path_factory, upstreams):
    work = tmp_path_factory.mktemp("broken-policy")
    policy = work / "team.yaml"
    policy.write_text(BROKEN)
    config = {"model_list": [deployment("gpt-4o", upstreams["sa-a"], id="gpt-a")],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}}
    p = start_proxy(config, work, env={"AISIA_POLICY": str(policy), **SLOW_MACHINE_ENV}, timeout_s=240)
    p.policy = policy
    yield p
    p.stop()


def test_an_invalid_policy_leaves_plain_models_served_and_every_alias_503_naming_it(broken):
    where = f"{broken.policy}:5:"
    plain = chat(broken, "gpt-4o")
    assert plain.status_code == 200, plain.text[:300]
    assert parse_reply(plain.json()["choices"][0]["message"]["content"])[0] == "sa-a"
    for alias in ("auto", "auto/coding", "auto/anything", "team/x"):
        r = chat(broken, alias)
        assert r.status_code == 503, (alias, r.status_code, r.text[:300])
        message = str(error_of(r).get("message"))
        assert where in message and "aliases.team/x.strategy" in message, (alias, message)
    health = httpx.get(broken.url + "/aisia/health", timeout=30)
    assert health.status_code == 503 and health.json() == {"status": "unhealthy"}  # no file named without a key
    health = httpx.get(broken.url + "/aisia/health", headers=broken.headers, timeout=30)
    assert health.status_code == 503 and health.json()["status"] == "unhealthy"
    assert where in health.json()["error"] and "aliases.team/x.strategy" in health.json()["error"]
    # The plugin's other routes say the same, behind the admin key.
    stats = httpx.get(broken.url + "/admin/bandit/stats", headers=broken.headers, timeout=30)
    assert stats.status_code == 503 and where in stats.text
    assert httpx.get(broken.url + "/admin/bandit/stats", timeout=30).status_code == 401
    logs = broken.logs()
    lines = logs.splitlines()
    at = [i for i, line in enumerate(lines) if "aisia: the policy is invalid" in line]
    # Once: the header, the located line as `aisia validate` prints it, what the proxy does.
    assert len(at) == 1, at
    assert lines[at[0] + 1].startswith(where) and "aliases.team/x.strategy" in lines[at[0] + 1]
    assert "the proxy serves its models, every alias answers 503" in lines[at[0] + 2]
    assert "PolicyError" not in logs


# -- the Router changing at run time -------------------------------------------------------------
@pytest.fixture(scope="module")
def changing(tmp_path_factory, upstreams):
    work = tmp_path_factory.mktemp("router-changes")
    policy = work / "team.yaml"
    policy.write_text(GOOD)
    config = {"model_list": [deployment("gpt-4o", upstreams["sa-a"], id="gpt-a"),
                             deployment("gpt-4o-mini", upstreams["sa-b"], id="mini-b")],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin", "router_changes.changer"]}}
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    p = start_proxy(config, work, env={"AISIA_POLICY": str(policy), "PYTHONPATH": path, **SLOW_MACHINE_ENV},
                    timeout_s=240)
    yield p
    p.stop()


def installs(proxy) -> int:
    return httpx.get(proxy.url + "/aisia/policy", headers=proxy.headers, timeout=30).json()["group_installs"]


def test_a_rebuilt_router_gets_the_aliases_back(changing):
    assert chat(changing, "auto").status_code == 200
    before = installs(changing)
    assert httpx.post(changing.url + "/test/rebuild-router", timeout=30).json()["rebuilt"]
    r = chat(changing, "team/support")
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-aisia-alias"] == "team/support"
    assert installs(changing) == before + 1
    assert httpx.get(changing.url + "/aisia/health", timeout=30).json()["status"] == "healthy"


def test_a_model_added_under_an_alias_name_is_found_once_and_keeps_its_name(changing, upstreams):
    added = deployment("team/support", upstreams["sa-b"], id="users-support")
    r = httpx.post(changing.url + "/test/add-deployment", json=added, timeout=30)
    assert r.status_code == 200 and r.json()["added"], r.text[:500] + changing.log_tail()
    for _ in range(15):
        assert chat(changing, "gpt-4o").status_code == 200
    for _ in range(5):
        r = chat(changing, "auto")
        assert r.status_code == 503, r.text[:300]
        assert "aliases.team/support" in error_of(r)["message"] and "model_name 'team/support'" in error_of(r)["message"]
        mine = chat(changing, "team/support")  # the user's model now
        assert mine.status_code == 200 and mine.headers["x-litellm-model-id"] == "users-support", mine.text[:300]
        assert "x-aisia-alias" not in mine.headers
    health = httpx.get(changing.url + "/aisia/health", headers=changing.headers, timeout=30)
    assert health.status_code == 503 and "aliases.team/support" in health.json()["error"]
    # The plugin's own line (LiteLLM logs each refused request apart, with its 503).
    lines = [line for line in changing.logs().splitlines()
             if "the alias collides with the LiteLLM" in line and "every alias answers 503 until" in line]
    assert len(lines) == 1, lines


def test_fail_closed_is_read_from_the_environment_or_from_a_policy_that_does_not_load(tmp_path, monkeypatch):
    from aisia_plugin.litellm.callback import fail_closed

    policy = tmp_path / "team.yaml"
    policy.write_text(BROKEN + "proxy:\n  fail_closed: true\n")
    monkeypatch.setenv("AISIA_POLICY", str(policy))
    monkeypatch.delenv("AISIA_FAIL_CLOSED", raising=False)
    assert fail_closed() is True
    monkeypatch.setenv("AISIA_FAIL_CLOSED", "false")
    assert fail_closed() is False
    monkeypatch.setenv("AISIA_FAIL_CLOSED", "perhaps")  # neither: refused by failing closed
    assert fail_closed() is True
    monkeypatch.delenv("AISIA_FAIL_CLOSED")
    policy.write_text(BROKEN)
    assert fail_closed() is False  # the default
