"""`aisia stats --url` and `aisia explain --url` on a running proxy with the memory store (issue
38): the command line reads the proxy's live state over `/admin/bandit/stats`, the stats it prints
are the route's, and explain, deciding on that state, chooses what the proxy chooses for the same
prompt. The alias uses UCB1 (no sampling, exploration 0): its choice is a function of the learned
state, so agreement means explain read the live state (on an empty state every arm is untried and
scores infinite). `--state` given the stats JSON refuses it, saying what it is."""

from __future__ import annotations

import json

import pytest
import yaml

from proxy_harness import chat, deployment, free_port, start_proxy, stats, upstreams_fixture

pytestmark = pytest.mark.proxy

SPECS = [{"name": "quick", "latency_ms": 5}, {"name": "slow", "latency_ms": 250}]
upstreams = upstreams_fixture(SPECS)
ALIAS = "auto/live"
PROMPT = "Explain how a hash map handles collisions"


@pytest.fixture(scope="module")
def files(tmp_path_factory, upstreams):
    work = tmp_path_factory.mktemp("live")
    policy = work / "policy.yaml"
    policy.write_text(yaml.safe_dump({"aliases": {ALIAS: {
        "strategy": "ucb1", "exploration": 0.0, "candidates": {"ids": ["quick", "slow"]}}}}), encoding="utf-8")
    config = {"model_list": [deployment("quick", upstreams["quick"]), deployment("slow", upstreams["slow"])],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}}
    return {"work": work, "policy": policy, "config": config}


@pytest.fixture(scope="module")
def proxy(files):
    p = start_proxy(files["config"], files["work"] / "proxy", env={"AISIA_POLICY": str(files["policy"])})
    yield p
    p.stop()


def _learned(admin, n: int) -> dict:
    """The route's stats once the proxy has learned `n` outcomes (learning follows the answer)."""
    from fault_helpers import wait_for

    return wait_for(lambda: (s := stats(admin)) and sum(r["count"] for r in s.values()) >= n and (s,),
                    f"{n} outcomes learned", limit_s=20, every_s=0.2)[0]


def test_stats_and_explain_read_the_live_proxy(proxy, client, admin, files, aisia, monkeypatch):
    served = [chat(client, ALIAS, PROMPT)[1]["x-litellm-model-id"] for _ in range(6)]
    assert set(served) == {"quick", "slow"}, served  # UCB1 tried both
    live = _learned(admin, 6)

    # stats --url: the key from LITELLM_MASTER_KEY; the JSON is the route's, the table its rows.
    monkeypatch.setenv("LITELLM_MASTER_KEY", proxy.master_key)
    code, out, err = aisia("stats", "--url", proxy.url, "--json")
    assert code == 0, err
    assert json.loads(out) == live
    code, out, err = aisia("stats", "--url", proxy.url)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line and not line.startswith(" ")}
    for dep in ("quick", "slow"):
        assert int(rows[dep][2]) == live[dep]["count"] and float(rows[dep][4]) == pytest.approx(
            live[dep]["mean_reward"], abs=5e-4)

    # explain --url (the key from --key) decides on the live state as the proxy does.
    monkeypatch.delenv("LITELLM_MASTER_KEY")
    config = files["work"] / "litellm_config.yaml"
    config.write_text(yaml.safe_dump(files["config"]), encoding="utf-8")
    for _ in range(4):
        code, out, err = aisia("explain", "--json", "--url", proxy.url, "--key", proxy.master_key,
                               "--policy", files["policy"], "--deployments", config, "--alias", ALIAS, PROMPT)
        assert code == 0, err
        decision = json.loads(out)["decision"]
        scores = [c["score"] for c in decision["candidates"] if not c.get("excluded")]
        assert all(s is not None for s in scores), decision  # finite: the live state, not an empty one
        n = sum(r["count"] for r in stats(admin).values())
        chosen = chat(client, ALIAS, PROMPT)[1]["x-litellm-model-id"]
        assert chosen == decision["deployment_id"], (chosen, decision)
        _learned(admin, n + 1)


def test_reset_through_the_url(proxy, client, admin, aisia):
    chat(client, ALIAS, PROMPT)
    assert any(r["count"] for r in stats(admin).values())
    code, out, err = aisia("stats", "--url", proxy.url, "--key", proxy.master_key, "--reset", "quick",
                           "--reset", "slow", "--json")
    assert code == 0 and "reset quick" in err and "reset slow" in err, err
    after = stats(admin)
    assert json.loads(out) == after and all(not r["count"] for r in after.values()), after


def test_the_url_needs_a_key_and_a_reachable_proxy(proxy, aisia, monkeypatch):
    monkeypatch.delenv("LITELLM_MASTER_KEY", raising=False)
    code, _, err = aisia("stats", "--url", proxy.url)
    assert code == 2 and "--key KEY or set LITELLM_MASTER_KEY" in err
    code, _, err = aisia("stats", "--url", proxy.url, "--key", "sk-not-the-admin")
    assert code == 2 and "answered 401" in err, err
    code, _, err = aisia("stats", "--url", f"http://127.0.0.1:{free_port()}", "--key", "k")
    assert code == 2 and "cannot reach" in err, err


def test_state_refuses_the_stats_json_saying_what_it_is(proxy, client, admin, files, aisia, tmp_path):
    chat(client, ALIAS, PROMPT)
    live = _learned(admin, 1)
    saved = tmp_path / "stats.json"
    saved.write_text(json.dumps(live), encoding="utf-8")
    code, _, err = aisia("explain", "--state", saved, "--policy", files["policy"], "--alias", ALIAS, PROMPT)
    assert code == 2, err
    assert f"{saved}: not a state: this is the stats view of /admin/bandit/stats" in err and "--url URL" in err, err
    code, _, err = aisia("stats", "--state", saved, "--policy", files["policy"])
    assert code == 2 and "not a state: this is the stats view" in err, err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"model": "x", "choices": []}), encoding="utf-8")
    code, _, err = aisia("explain", "--state", other, "--policy", files["policy"], "--alias", ALIAS, PROMPT)
    assert code == 2 and "not a state: none of" in err and "'model', 'choices'" in err, err
