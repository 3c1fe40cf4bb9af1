"""Hot reload in a real proxy: a valid policy edit changes routing within a few seconds, without
a restart; an invalid one is logged once, located as `aisia validate` prints it, and the last
good policy keeps serving."""

from __future__ import annotations

import os
import time

import httpx
import openai
import pytest

from aisia_plugin.litellm.reload import PolicyFiles
from fault_helpers import wait_for
from proxy_harness import deployment, parse_reply, start_proxy, start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

POLICY = """\
version: 1
proxy:
  reload_interval_s: 0.5
aliases:
  test/reload:
    description: hot reload
    strategy: cost
    candidates: {{models: [{models}]}}
"""


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": "r-a", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.1},
                               {"name": "r-b", "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0}])
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "team.yaml"
    path.write_text(POLICY.format(models="r-a, r-b"))
    return path


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams, policy_file):
    config = {"model_list": [deployment(n, u) for n, u in upstreams.items()],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}}
    p = start_proxy(config, tmp_path_factory.mktemp("proxy"), env={"AISIA_POLICY": str(policy_file)})
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(proxy):
    return openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0, timeout=30)


def served(client, model="test/reload") -> str:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello"}])
    return parse_reply(r.choices[0].message.content)[0]


def policy_state(proxy) -> dict:
    r = httpx.get(proxy.url + "/aisia/policy", headers=proxy.headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_valid_edit_changes_routing_without_a_restart(proxy, client, policy_file):
    assert served(client) == "r-a"
    pid = proxy.pid
    reloads = policy_state(proxy)["reloads"]
    policy_file.write_text(POLICY.format(models="r-b") + """\
  test/added:
    description: added by the edit
    strategy: cost
""")
    wait_for(lambda: policy_state(proxy)["reloads"] > reloads, "the reload")
    assert [served(client) for _ in range(3)] == ["r-b"] * 3
    assert "test/added" in {m.id for m in client.models.list()}
    assert served(client, "test/added") == "r-a"  # every deployment, the cheapest
    assert proxy.pid == pid and proxy.running()


def test_an_invalid_edit_is_logged_once_and_the_last_good_policy_keeps_serving(proxy, client, policy_file):
    good = policy_file.read_text()
    before = served(client)
    policy_file.write_text(good.replace("strategy: cost\n", "strategy: cots\n", 1))
    state = wait_for(lambda: (lambda s: s if s["rejected_edit"] else None)(policy_state(proxy)), "the rejection")
    line = next(n for n, text in enumerate(good.splitlines(), 1) if "strategy: cost" in text)
    located = f"{policy_file}:{line}:"
    assert located in state["rejected_edit"] and "strategy" in state["rejected_edit"]
    assert [served(client) for _ in range(3)] == [before] * 3
    checks = state["checks"]
    wait_for(lambda: policy_state(proxy)["checks"] >= checks + 3, "more checks of the unchanged broken file")
    assert proxy.logs().count(located) == 1  # logged once, not once per check
    # An alias named like one of the config's models is refused the same way.
    policy_file.write_text(good + "  r-a:\n    description: collides\n    strategy: cost\n")
    wait_for(lambda: "r-a" in (policy_state(proxy)["rejected_edit"] or "") and
             "collides" in (policy_state(proxy)["rejected_edit"] or ""), "the collision's rejection")
    assert served(client) == before
    assert served(client, "r-a") == "r-a"  # the user's model keeps its name
    policy_file.write_text(good)
    wait_for(lambda: policy_state(proxy)["rejected_edit"] is None, "the good policy back")
    assert served(client) == before


def test_a_recent_or_new_policy_file_is_never_called_unchanged(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text(POLICY.format(models="r-a, r-b"))  # modified now: within the recent-mtime window
    files = PolicyFiles([tmp_path])
    assert not files.unchanged()  # never fingerprinted
    files.fingerprint()
    assert not files.unchanged()  # recent: an edit keeping size and stamps would not show
    old = time.time() - 3600
    os.utime(team, (old, old))
    files.fingerprint()
    assert files.unchanged()
    (tmp_path / "more.yaml").write_text("version: 1\n")
    os.utime(tmp_path / "more.yaml", (old, old))
    assert not files.unchanged()  # a new file in the policy folder


def test_a_poll_stats_the_policy_files_and_hashes_only_a_changed_one(tmp_path):
    team, extra = tmp_path / "team.yaml", tmp_path / "extra.yaml"
    team.write_text(POLICY.format(models="r-a, r-b"))
    extra.write_text("version: 1\n")
    old = time.time() - 3600  # modified long ago: not within the recent-mtime window
    for f in (team, extra):
        os.utime(f, (old, old))
    files = PolicyFiles([team, extra])
    first = files.fingerprint()
    assert files.hashed == 2
    assert files.fingerprint() == first and files.hashed == 2  # nothing changed: stat only, no read
    assert files.unchanged()  # what the watcher asks in the event loop before fingerprinting
    # Same size, mtime put back: the inode's ctime still moves, and the content is hashed again.
    team.write_text(POLICY.format(models="r-b, r-a"))
    os.utime(team, (old, old))
    assert not files.unchanged()
    changed = files.fingerprint()
    assert files.hashed == 3 and changed != first
    assert dict(changed)[str(extra)] == dict(first)[str(extra)]
    assert files.fingerprint() == changed and files.hashed == 3
    assert files.unchanged() and files.hashed == 3
    extra.unlink()
    assert not files.unchanged()
    assert dict(files.fingerprint()).get(str(extra)) in (None, "missing")
