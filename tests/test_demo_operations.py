"""Operating the router on the demo (issue 12, acceptance 1 and the demo half of 3): `aisia demo`
started as test_demo.py starts it, the demo's own sample traffic sent through it before and
after one provider is broken, then

- LiteLLM's `/metrics` (the demo turns its Prometheus integration on), parsed with
  prometheus_client's text parser, shows `ai_bandit_choice_total{provider,strategy}` equal to the
  decisions the decision log recorded and to the calls each simulated provider received (served
  plus failed, as the client and the providers saw them), `ai_circuit_breaker_state{provider}` 2
  for the broken provider and 0 for the others, and every metric the Grafana dashboard queries;
- the demo's decision log, in its folder, is read by docs/operations.md's `aisia replay --logged`
  command, which reports estimates with 95 % intervals for the logged policy and a compared one."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aisia_plugin.demo.scenario import send_traffic
from test_demo import AISIA, _wait_for_file

pytestmark = pytest.mark.proxy  # starts `aisia demo` (a LiteLLM proxy): not in `pytest -m "not proxy"`

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "examples" / "grafana" / "aisia-dashboard.json"
BROKEN = "coder"
N = 24  # sample requests before the break, and again after it
# The demo policy's strategy per alias (policies/aliases.yaml, which the demo policy layers on).
STRATEGIES = {"auto": "contextual", "auto/coding": "contextual", "auto/fast": "latency", "auto/cheap": "cost",
              "auto/offline": "rules"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`aisia demo` as test_demo.py runs it; stopped with Ctrl-C (SIGINT), as a user stops it, so
    that the proxy and the simulated providers stop too."""
    work = tmp_path_factory.mktemp("demo-ops")
    info_file = work / "info.json"
    proc = subprocess.Popen([AISIA, "demo", "--port", "0", "--info-file", str(info_file), "--workdir", str(work / "w")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    info = _wait_for_file(info_file, proc)
    yield proc, info
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _proxy(info):
    """What send_traffic needs of a proxy, from the demo's info file."""
    return SimpleNamespace(url=info["url"], base_url=info["base_url"], master_key=info["master_key"])


def _auth(info) -> dict:
    return {"Authorization": f"Bearer {info['master_key']}"}


def _upstreams(info) -> dict[str, dict]:
    return {name: httpx.get(u["stats"], timeout=10).json() for name, u in info["upstreams"].items()}


def _breakers(info) -> dict[str, str]:
    stats = httpx.get(info["stats_url"], headers=_auth(info), timeout=10).json()
    return {name: (stats.get(name) or {}).get("breaker") for name in info["upstreams"]}


@pytest.fixture(scope="module")
def traffic(demo):
    """The demo's sample traffic, `BROKEN` made to fail as `--break` does, the same traffic again;
    one request to a misspelt alias (a refusal). Only the broken provider fails: the others'
    simulated random errors are turned off so that no other breaker can open by chance."""
    _, info = demo
    for name, up in info["upstreams"].items():
        if name != BROKEN:
            assert httpx.post(up["control"], json={"error_rate": 0}, timeout=5).status_code == 200
    before = send_traffic(_proxy(info), N, seed=0)
    assert httpx.post(info["upstreams"][BROKEN]["control"], json={"mode": "error"}, timeout=5).status_code == 200
    after = send_traffic(_proxy(info), N, seed=1)
    client = openai.OpenAI(base_url=info["base_url"], api_key=info["master_key"], max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError, match="unknown alias"):
        client.chat.completions.create(model="auto/codnig", messages=[{"role": "user", "content": "hi"}])
    return before, after


def _scrape(info) -> list:
    r = httpx.get(info["metrics_url"], headers=_auth(info), timeout=30, follow_redirects=True)  # /metrics -> /metrics/
    assert r.status_code == 200, r.text[:500]
    return list(text_string_to_metric_families(r.text))


def _samples(families, name: str) -> dict[tuple, float]:
    """{label items: value} of the samples named `name`."""
    return {tuple(sorted(s.labels.items())): s.value for f in families for s in f.samples if s.name == name}


def _scrape_with_broken_open(info) -> list:
    """A scrape once its breaker gauge shows the broken provider OPEN. The gauges behind LiteLLM's
    /metrics are refreshed every few seconds, and an OPEN breaker turns HALF_OPEN after the demo
    policy's 20 s: then one more auto/coding request probes the provider, fails, and reopens it."""
    client = openai.OpenAI(base_url=info["base_url"], api_key=info["master_key"], max_retries=0, timeout=30)
    families = []
    for _ in range(240):
        families = _scrape(info)
        if _samples(families, "ai_circuit_breaker_state").get((("provider", BROKEN),)) == 2:
            return families
        if _breakers(info)[BROKEN] == "HALF_OPEN":
            client.chat.completions.create(model="auto/coding", messages=[{"role": "user", "content": "Write a sort"}])
        time.sleep(0.5)
    pytest.fail(f"ai_circuit_breaker_state never showed {BROKEN} OPEN (2): "
                f"{_samples(families, 'ai_circuit_breaker_state')}; /admin/bandit/stats: {_breakers(info)}")


def _requests(outcomes) -> int:
    ids = {o.headers.get("x-aisia-request-id") for o in outcomes}
    assert None not in ids  # every answer names its request (the decision log's request id)
    return len(ids)


def _log(info) -> list[dict]:
    return [json.loads(line) for line in Path(info["decision_log"]).read_text().splitlines()]


def _wait_for_log(info, requests: int) -> list[dict]:
    """The decision log once it holds an outcome for every request (outcomes are written by
    LiteLLM's success callbacks, which may run just after the answer)."""
    for _ in range(120):
        lines = _log(info)
        if len({x["request_id"] for x in lines if x["type"] == "outcome" and x["success"]}) >= requests:
            return lines
        time.sleep(0.25)
    return _log(info)


def test_metrics_show_the_choices_and_breakers_after_demo_traffic(demo, traffic):
    _, info = demo
    before, after = traffic
    outcomes = before + after
    assert all(o.ok for o in outcomes), [(o.alias, o.status, o.error) for o in outcomes if not o.ok]
    assert any(o.served_by == BROKEN for o in before) and not any(o.served_by == BROKEN for o in after)

    families = _scrape_with_broken_open(info)
    upstreams = _upstreams(info)  # no request is in flight now: the counters are final
    names = set(info["upstreams"])

    # The seed's breaker gauge: one series per deployment, 2 (OPEN) for the broken one, 0 (CLOSED)
    # for the healthy ones.
    breakers = {dict(k)["provider"]: v for k, v in _samples(families, "ai_circuit_breaker_state").items()}
    assert breakers == {name: (2.0 if name == BROKEN else 0.0) for name in names}, breakers

    # The seed's choice counter: labelled by deployment and strategy, one count per decision.
    choices = Counter()
    for labels, value in _samples(families, "ai_bandit_choice_total").items():
        labels = dict(labels)
        assert set(labels) == {"provider", "strategy"}
        assert labels["provider"] in names and labels["strategy"] in set(STRATEGIES.values()), labels
        choices[(labels["provider"], labels["strategy"])] = value
    # ... the decisions the demo's decision log recorded, deployment and strategy alike ...
    lines = _wait_for_log(info, _requests(outcomes))
    decisions = [x for x in lines if x["type"] == "decision" and not x["refused"]]
    assert Counter((x["deployment"], x["strategy"]) for x in decisions) == +choices
    assert all(x["strategy"] == STRATEGIES[x["alias"]] for x in decisions)
    # ... and the calls each simulated provider received: what it served to the client (the
    # x-litellm-model-id of the answers) plus the attempts it failed (retried elsewhere).
    per_provider = Counter()
    for (provider, _), value in choices.items():
        per_provider[provider] += value
    served = Counter(o.served_by for o in outcomes)
    for name in names:
        assert per_provider[name] == upstreams[name]["calls"], (name, per_provider, upstreams[name])
        assert upstreams[name]["succeeded"] >= served[name]
    assert served[BROKEN] == upstreams[BROKEN]["succeeded"] > 0 and upstreams[BROKEN]["failed"] > 0
    for name in names - {BROKEN}:
        assert upstreams[name]["failed"] == 0
    # auto/offline has one candidate (local, which never fails): every such request is one choice.
    assert choices[("local", "rules")] == sum(1 for o in outcomes if o.alias == "auto/offline") > 0

    # The other panels' metrics have data too: decisions, failovers (the broken provider's
    # attempts were retried), the refused misspelt alias, the decision latency, learned rewards.
    decided = _samples(families, "aisia_decisions_total")
    assert sum(v for k, v in decided.items() if dict(k)["result"] == "routed") == sum(choices.values())
    assert sum(_samples(families, "aisia_failovers_total").values()) == upstreams[BROKEN]["failed"]
    refused = {k: v for k, v in _samples(families, "aisia_refusals_total").items() if v}  # (known sets start at 0)
    assert refused == {(("alias", "other"), ("reason", "unknown_alias")): 1.0}
    assert sum(_samples(families, "aisia_decision_seconds_count").values()) == sum(choices.values())
    # The learned gauges are refreshed from the store's stats every few seconds: the scrape above
    # may predate the last outcome learned (learning follows the answer), so read them again until
    # every deployment that was sent traffic has one, bounded.
    tried = {name for name in names if per_provider[name]}
    for _ in range(60):
        rewards = {dict(k)["deployment"] for k in _samples(_scrape(info), "aisia_learned_mean_reward")}
        if tried <= rewards:
            break
        time.sleep(0.5)
    assert tried <= rewards <= names

    # Every metric a Grafana query names is in this scrape: a counter as NAME_total, a histogram
    # as NAME_bucket / _count / _sum, a gauge as NAME (with or without samples yet).
    declared = set()
    for f in families:
        if f.name.startswith("ai"):
            declared |= {f.name + "_total"} if f.type == "counter" else \
                {f.name + s for s in ("_bucket", "_count", "_sum")} if f.type == "histogram" else {f.name}
    queries = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 10
    for expr in queries:
        used = set(re.findall(r"\b((?:ai|aisia)_[a-z_]+)\b", expr))
        assert used and used <= declared, (expr, used - declared)


def _readme_replay_command(workdir: Path) -> list[str]:
    """docs/operations.md's `aisia replay --logged` command on the demo's log, pointed at this demo's
    folder instead of the page's `demo-run`."""
    page = (ROOT / "docs" / "operations.md").read_text()
    m = re.search(r"^\.venv/bin/aisia demo .*--workdir (\S+)\n(\.venv/bin/aisia replay --logged .*?)\n```", page,
                  re.M | re.S)
    assert m, "docs/operations.md shows no `aisia replay --logged` command on the demo's log"
    folder, command = m.group(1), m.group(2).replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/aisia" and "--compare" in argv
    return [AISIA] + [a.replace(folder, str(workdir)) for a in argv[1:]]


def _estimate(text: str, label: str) -> tuple[float, float, float]:
    m = re.search(rf"^  {re.escape(label)}\s+(-?[\d.]+)  \[(-?[\d.]+), (-?[\d.]+)\]$", text, re.M)
    assert m, (label, text)
    value, lo, hi = map(float, m.groups())
    assert lo <= value <= hi, (label, text)
    return value, lo, hi


def test_replay_logged_on_the_demo_log(demo, traffic):
    _, info = demo
    log = Path(info["decision_log"])
    assert log.parent == Path(info["config"]).parent  # in the demo's folder
    # One conversation too, whose second turn says the first answer was wrong: a signal, logged as
    # evidence about that answer.
    client = openai.OpenAI(base_url=info["base_url"], api_key=info["master_key"], max_retries=0, timeout=30)
    history = [{"role": "user", "content": "What is the capital of Australia?"}]
    answer = client.chat.completions.create(model="auto", messages=history).choices[0].message.content
    history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "That's wrong."}]
    client.chat.completions.create(model="auto", messages=history)
    for _ in range(120):
        if any(x["type"] == "evidence" for x in _log(info)):
            break
        time.sleep(0.25)
    lines = _wait_for_log(info, _requests(traffic[0] + traffic[1]) + 2)
    assert any(x["type"] == "evidence" and x["source"] == "signal" for x in lines)
    pairs = {(x["request_id"], x["attempt"]) for x in lines if x["type"] == "decision" and not x["refused"]}
    attempts = [x for x in lines if x["type"] == "outcome" and x["reward"] is not None
                and (x["request_id"], x["attempt"]) in pairs]
    assert attempts and all(x["probability"] is not None for x in lines if x["type"] == "decision")

    argv = _readme_replay_command(log.parent)
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert f"{len(attempts)} logged attempts with an outcome (0 without a selection probability skipped; " in out, out
    _estimate(out, "logged policy (observed)")
    sections = re.split(r"^--(policy|compare) ", out, flags=re.M)
    assert [s for s in sections[1::2]] == ["policy", "compare"], out
    for body in sections[2::2]:
        for label in ("inverse propensity", "self-normalised IPS", "doubly robust"):
            _estimate(body, label)

    # The same on --json: both policies, on every logged attempt, each estimate inside its interval.
    run = subprocess.run(argv + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert set(report["policies"]) == {"policy", "compare"}
    assert report["paths"]["compare"].endswith("demo-edit.yaml")
    answered = sum(1 for x in attempts if x["success"])
    for name, r in report["policies"].items():
        assert r["events"] == len(attempts) and r["skipped_no_propensity"] == 0
        # The complaint values the answer it follows (the log's evidence line).
        assert 1 <= r["valued_by_evidence"] <= answered, (name, r["valued_by_evidence"], answered)
        for est in ("ips", "snips", "dr"):
            lo, hi = r[est]["ci95"]
            assert lo <= r[est]["value"] <= hi and hi - lo > 0, (name, est, r[est])
    # Without the evidence, each answer is valued by the reward logged with its outcome.
    run = subprocess.run(argv + ["--json", "--no-evidence"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    observed = sum(x["reward"] for x in attempts) / len(attempts)
    for name, r in json.loads(run.stdout)["policies"].items():
        assert r["logged"]["value"] == pytest.approx(observed) and r["valued_by_evidence"] == 0, name
