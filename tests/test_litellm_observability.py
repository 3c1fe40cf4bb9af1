"""Operating the router (issue 12) in a real proxy: after traffic, /aisia/metrics shows the seed's
two metrics with the expected labels and values and every Grafana query resolves against it; the
routing page is refused without the key and, in headless Chromium, shows the deployments and
changes after traffic; the decision log holds one line per decision and outcome, no prompt text,
and `aisia replay --logged` estimates a policy on it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from proxy_harness import deployment, parse_reply, start_proxy, start_upstreams, stop_upstreams

DASHBOARD = Path(__file__).resolve().parents[1] / "examples" / "grafana" / "aisia-dashboard.json"
MARKER = "quokka-7781-privacy-marker"
UPSTREAMS = [
    {"name": "ob-cheap", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.2},
    {"name": "ob-mid", "input_cost_per_1m": 1.0, "output_cost_per_1m": 2.0},
    {"name": "ob-dear", "input_cost_per_1m": 10.0, "output_cost_per_1m": 30.0},
]
POLICY = """\
version: 1
circuit_breaker: {failure_threshold: 2, timeout_s: 30, half_open_max_calls: 1}
logging:
  decisions: {path: DECISIONS}
aliases:
  obs/cheap:
    description: observability test
    strategy: cost
    candidates: {models: [ob-cheap, ob-mid, ob-dear]}
    failover: {attempts: 2}
  obs/ucb:
    description: observability test, learned
    strategy: ucb1
    candidates: {models: [ob-cheap, ob-mid, ob-dear]}
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("the routing page's browser test needs Chromium: `apt-get install chromium` "
                "(.ci/run installs it when it is missing)")


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams(UPSTREAMS)
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("observability")


@pytest.fixture(scope="module")
def proxy(work, upstreams):
    policy = work / "team.yaml"
    policy.write_text(POLICY.replace("DECISIONS", str(work / "decisions.jsonl")))
    config = {"model_list": [deployment(name, up) for name, up in upstreams.items()],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}}
    p = start_proxy(config, work, env={"AISIA_POLICY": str(policy)})
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(proxy):
    return openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0, timeout=30)


def _send(client, model, n, text="Hello there"):
    served = []
    for i in range(n):
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"{text} {MARKER} {i}"}])
        served.append(parse_reply(r.choices[0].message.content)[0])
    return served


def _metrics(proxy) -> str:
    r = httpx.get(proxy.url + "/aisia/metrics", timeout=30)
    assert r.status_code == 200, r.text
    return r.text


def _sample(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _wait(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    return predicate()


def test_metrics_after_traffic(proxy, client, upstreams):
    served = _send(client, "obs/cheap", 5)
    assert served == ["ob-cheap"] * 5
    upstreams["ob-cheap"].control(mode="error", status=500)
    try:
        served = _send(client, "obs/cheap", 4)  # two failures open the breaker; failover serves
    finally:
        upstreams["ob-cheap"].control(mode="ok")
    assert "ob-cheap" not in served
    def opened():
        t = _metrics(proxy)
        return t if _sample(t, "ai_circuit_breaker_state", provider="ob-cheap") == 2 else None

    text = _wait(opened)
    assert text, "the breaker of ob-cheap never showed OPEN (2) in ai_circuit_breaker_state"
    assert _sample(text, "ai_circuit_breaker_state", provider="ob-mid") == 0
    assert _sample(text, "ai_bandit_choice_total", provider="ob-cheap", strategy="cost") >= 5
    assert _sample(text, "aisia_decisions_total", alias="obs/cheap", result="routed") >= 9
    assert _sample(text, "aisia_failovers_total", alias="obs/cheap") >= 1
    assert _sample(text, "aisia_decision_seconds_count", alias="obs/cheap") >= 9
    assert MARKER not in text
    # Every dashboard query names metrics this proxy exports.
    exported = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"\b((?:ai|aisia)_[a-z_]+)\b", target["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert name in exported or base in exported or name + "_total" in exported \
                    or re.sub(r"_total$", "", name) in exported, (name, target["expr"])


def test_routing_page_needs_the_key(proxy):
    assert httpx.get(proxy.url + "/aisia/ui", timeout=30).status_code == 401
    assert httpx.get(proxy.url + "/aisia/ui", params={"key": "sk-wrong"}, timeout=30).status_code == 401
    assert httpx.get(proxy.url + "/aisia/ui/data", timeout=30).status_code == 401
    ok = httpx.get(proxy.url + "/aisia/ui", params={"key": proxy.master_key}, timeout=30)
    assert ok.status_code == 200 and "AISIA routing" in ok.text


def _dom(proxy) -> str:
    out = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          "--virtual-time-budget=6000", "--dump-dom", f"{proxy.url}/aisia/ui?key={proxy.master_key}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _alias_block(dom: str, alias: str) -> tuple[int, str]:
    """(decisions shown, the markup of the alias's share rows) of one alias on the page."""
    m = re.search(r'<div class="alias" data-alias="%s" data-decisions="(\d+)">(.*?)(?=<div class="alias"|</section>)'
                  % re.escape(alias), dom, re.S)
    assert m, f"alias {alias} not on the page"
    return int(m.group(1)), m.group(2)


def test_routing_page_in_a_browser_changes_after_traffic(proxy, client):
    before = _dom(proxy)
    assert 'data-loaded="1"' in before, before[-2000:]
    for name in ("ob-cheap", "ob-mid", "ob-dear"):
        assert f'<tr data-deployment="{name}">' in before
    n, rows = _alias_block(before, "obs/ucb")
    assert n == 0 and "no traffic yet" in rows
    served = _send(client, "obs/ucb", 6)
    after = _dom(proxy)
    n, rows = _alias_block(after, "obs/ucb")
    assert n >= 6 and "no traffic yet" not in rows
    for name in set(served):
        assert f'data-deployment="{name}"' in rows
    assert MARKER not in after


def test_decision_log_and_replay_logged(proxy, client, work):
    path = work / "decisions.jsonl"
    _send(client, "obs/ucb", 4)
    lines = _wait(lambda: [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else None)
    assert lines
    kinds = {x["type"] for x in lines}
    assert kinds == {"decision", "outcome"}
    assert MARKER not in path.read_text()
    decisions = [x for x in lines if x["type"] == "decision" and x["alias"] == "obs/ucb"]
    assert decisions and all(x["probability"] is not None for x in decisions)
    out = subprocess.run([str(Path(sys.executable).parent / "aisia"), "replay", "--logged", str(path),
                          "--policy", str(work / "team.yaml"), "--deployments", str(proxy.config_path),
                          "--alias", "obs/cheap", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["events"] >= 4
    for est in ("ips", "dr"):
        lo, hi = report[est]["ci95"]
        assert lo <= report[est]["value"] <= hi
