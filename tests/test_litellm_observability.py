"""Operating the router (issue 12) in a real proxy: after traffic, /aisia/metrics shows the seed's
two metrics with the expected labels and values and every Grafana query resolves against it (read
with the master key, as LiteLLM's /metrics); the routing page is signed in to with a form and a
session cookie (never a key in a URL) and, in headless Chromium signed in as an operator does,
shows the deployments and changes after traffic, fits its cards at three window widths and charts
each alias's traffic share over time (a break and the move away from it); the decision log holds
one line per decision and outcome, no prompt text,
and `aisia replay --logged` estimates a policy on it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from browser import Chromium
from fault_helpers import wait_for
from proxy_harness import deployment, parse_reply, start_proxy, upstreams_fixture

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

DASHBOARD = Path(__file__).resolve().parents[1] / "examples" / "grafana" / "aisia-dashboard.json"
MARKER = "quokka-7781-privacy-marker"
UPSTREAMS = [
    {"name": "ob-cheap", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.2},
    {"name": "ob-mid", "input_cost_per_1m": 1.0, "output_cost_per_1m": 2.0},
    {"name": "ob-dear", "input_cost_per_1m": 10.0, "output_cost_per_1m": 30.0},
    {"name": "ob-line-a", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.2},
    {"name": "ob-line-b", "input_cost_per_1m": 1.0, "output_cost_per_1m": 2.0},
]
# A deployment no alias routes to, named as long as real ones are: the table must still fit.
LONG_NAMED = deployment("vllm-llama-3.1-8b-instruct-onprem-eu-west", "http://127.0.0.1:9/v1",
                        litellm_params={"model": "hosted_vllm/meta-llama/Llama-3.1-8B-Instruct-AWQ-int4"})
CODING = "Write a Python function that merges two sorted lists, with unit tests"
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
  obs/chart:
    description: traffic share over time
    strategy: cost
    candidates: {models: [ob-line-a, ob-line-b]}
    failover: {attempts: 1}
"""


upstreams = upstreams_fixture(UPSTREAMS)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("observability")


@pytest.fixture(scope="module")
def proxy(work, upstreams):
    policy = work / "team.yaml"
    policy.write_text(POLICY.replace("DECISIONS", str(work / "decisions.jsonl")))
    config = {"model_list": [deployment(name, up) for name, up in upstreams.items()] + [LONG_NAMED],
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
    r = httpx.get(proxy.url + "/aisia/metrics", headers=proxy.headers, timeout=30)
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

    text = wait_for(opened, "the breaker of ob-cheap to show OPEN (2) in ai_circuit_breaker_state")
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


def test_metrics_need_a_key_as_litellm_metrics_do(proxy):
    """LiteLLM 1.108 authenticates its /metrics unless litellm_settings.require_auth_for_metrics_endpoint
    is false (unset here): /aisia/metrics follows it (tests/test_metrics_auth.py: the setting off)."""
    assert httpx.get(proxy.url + "/metrics", timeout=30).status_code == 401  # LiteLLM's own
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
        r = httpx.get(proxy.url + "/aisia/metrics", headers=headers, timeout=30)
        assert r.status_code == 401 and "aisia_decisions_total" not in r.text, r.text[:300]
        assert "require_auth_for_metrics_endpoint" in r.json()["detail"]["error"]["message"]
    assert "aisia_decisions_total" in _metrics(proxy)


def _cookie_attributes(set_cookie: str) -> dict:
    name_value, *attrs = [part.strip() for part in set_cookie.split(";")]
    found = dict(a.split("=", 1) if "=" in a else (a, True) for a in attrs)
    return {"name": name_value.split("=", 1)[0], "value": name_value.split("=", 1)[1], **{k.lower(): v for k, v in found.items()}}


def test_routing_page_sign_in_sets_a_strict_http_only_cookie_and_no_url_holds_the_key(proxy):
    key = proxy.master_key
    # Refused without a key: a JSON 401 for an API client, the sign-in form for a browser.
    for path in ("/aisia/ui", "/aisia/ui/data"):
        assert httpx.get(proxy.url + path, timeout=30).status_code == 401
    browser = httpx.get(proxy.url + "/aisia/ui", headers={"Accept": "text/html"}, timeout=30)
    assert browser.status_code == 303 and browser.headers["location"] == "/aisia/ui/login"
    form = httpx.get(proxy.url + "/aisia/ui/login", timeout=30)
    assert form.status_code == 200 and '<form method="post" action="login"' in form.text and 'name="key"' in form.text
    # The old link form is refused unread and the redirect does not echo it.
    link = httpx.get(proxy.url + "/aisia/ui", params={"key": key}, timeout=30)
    assert link.status_code == 303 and key not in link.headers["location"] and key not in link.text
    assert "set-cookie" not in link.headers
    # A wrong key: the form again, 401, no cookie, the key not echoed.
    wrong = httpx.post(proxy.url + "/aisia/ui/login", data={"key": "sk-wrong-123"}, timeout=30)
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers and "sk-wrong-123" not in wrong.text
    # The master key: a redirect to the page and the session cookie.
    with httpx.Client(base_url=proxy.url, timeout=30) as session:
        signed = session.post("/aisia/ui/login", data={"key": key})
        assert signed.status_code == 303 and signed.headers["location"] == "/aisia/ui"
        cookie = _cookie_attributes(signed.headers["set-cookie"])
        assert cookie["name"] == "aisia_session" and cookie["httponly"] is True
        assert cookie["samesite"].lower() == "strict" and cookie["path"] == "/aisia/ui"
        assert "secure" not in cookie  # plain HTTP here; set over HTTPS
        assert 0 < int(cookie["max-age"]) <= 24 * 3600
        assert key not in cookie["value"] and key not in signed.text  # sealed, not the key
        page = session.get("/aisia/ui")
        assert page.status_code == 200 and "AISIA routing" in page.text
        assert "?key=" not in page.text and key not in page.text
        # The page links nowhere with a key: every URL in it.
        for url in re.findall(r"""(?:href|action|src)\s*=\s*["']([^"']*)""", page.text) + \
                re.findall(r"""fetch\(([^,)]*)""", page.text):
            assert "key" not in url.lower(), url
        assert session.get("/aisia/ui/data").status_code == 200
        # A tampered cookie is refused.
        forged = httpx.get(proxy.url + "/aisia/ui/data", cookies={"aisia_session": cookie["value"].strip('"')[:-6] + "AAAAAA"},
                           timeout=30)
        assert forged.status_code == 401
        # Signing out clears the cookie; the page is then refused.
        out = session.post("/aisia/ui/logout")
        assert out.status_code == 303 and out.headers["location"] == "/aisia/ui/login"
        cleared = _cookie_attributes(out.headers["set-cookie"])
        assert cleared["name"] == "aisia_session" and cleared["max-age"] == "0" and cleared["path"] == "/aisia/ui"
        assert session.get("/aisia/ui/data").status_code == 401


@pytest.fixture(scope="module")
def browser(proxy, work):
    with Chromium(work / "chromium") as b:
        b.sign_in(proxy.url, proxy.master_key)
        yield b


def test_routing_page_signed_in_in_a_browser(proxy, browser):
    """Signed in through the form in a real browser: the page shows its data, its script cannot
    read the cookie, and no URL the tab visited holds the key."""
    dom = browser.page_dom(proxy.url)
    assert 'data-loaded="1"' in dom and 'id="signout"' in dom
    assert browser.evaluate("document.cookie") == ""  # HttpOnly
    visited = browser.visited()
    assert proxy.url + "/aisia/ui/login" in visited and proxy.url + "/aisia/ui" in visited
    assert not any(proxy.master_key in url or "key=" in url for url in visited), visited


def _alias_block(dom: str, alias: str) -> tuple[int, str]:
    """(decisions shown, the markup of the alias's share rows) of one alias on the page."""
    m = re.search(r'<div class="alias" data-alias="%s" data-decisions="(\d+)">(.*?)(?=<div class="alias"|</section>)'
                  % re.escape(alias), dom, re.S)
    assert m, f"alias {alias} not on the page"
    return int(m.group(1)), m.group(2)


def test_routing_page_in_a_browser_changes_after_traffic(proxy, client, browser):
    before = browser.page_dom(proxy.url)
    assert 'data-loaded="1"' in before, before[-2000:]
    for name in ("ob-cheap", "ob-mid", "ob-dear"):
        assert f'<tr data-deployment="{name}">' in before
    n, rows = _alias_block(before, "obs/ucb")
    assert n == 0 and "no traffic yet" in rows
    served = _send(client, "obs/ucb", 6)
    after = browser.page_dom(proxy.url)
    n, rows = _alias_block(after, "obs/ucb")
    assert n >= 6 and "no traffic yet" not in rows
    for name in set(served):
        assert f'data-deployment="{name}"' in rows
    assert MARKER not in after


def _open_page(browser, proxy, width: int, height: int = 1000) -> None:
    """The routing page (the browser is signed in) in a `width` x `height` viewport, with its data."""
    browser.resize(width, height)
    browser.page_dom(proxy.url)


# Each card's content box and its table's box, and how much of the page and of each table's
# scroll box would need scrolling sideways.
LAYOUT = """(() => {
  const out = {page: {scroll: document.documentElement.scrollWidth, width: window.innerWidth}, cards: {}};
  for (const id of ["deployments", "recent"]) {
    const table = document.getElementById(id), card = table.closest("section"), box = table.parentElement;
    const c = card.getBoundingClientRect(), style = getComputedStyle(card), t = table.getBoundingClientRect();
    out.cards[id] = {card_left: c.left + parseFloat(style.paddingLeft), card_right: c.right - parseFloat(style.paddingRight),
                     table_left: t.left, table_right: t.right, rows: table.tBodies[0].rows.length,
                     scroll: box.scrollWidth, visible: box.clientWidth};
  }
  return out;
})()"""


@pytest.mark.parametrize("width", [1400, 900, 1920])
def test_routing_page_tables_fit_their_cards(proxy, client, browser, width, tmp_path):
    _send(client, "obs/ucb", 2)
    _open_page(browser, proxy, width)
    layout = browser.evaluate(LAYOUT)
    shot = browser.screenshot(tmp_path / f"routing-{width}.png")
    assert layout["page"]["scroll"] <= layout["page"]["width"], (layout, shot)
    assert layout["cards"]["deployments"]["rows"] == len(UPSTREAMS) + 1
    for name, box in layout["cards"].items():
        # The last column inside the card: the table's right edge within its card's content box,
        # and nothing of it hidden behind a sideways scroll.
        assert box["card_left"] - 0.5 <= box["table_left"] and box["table_right"] <= box["card_right"] + 0.5, \
            (name, width, box, shot)
        assert box["scroll"] <= box["visible"], (name, width, box, shot)


# Per alias chart: its columns in time order, each with its decisions and each deployment's share.
CHART = """(() => {
  const out = {};
  for (const chart of document.querySelectorAll("#timeline .chart")) {
    out[chart.dataset.alias] = [...chart.querySelectorAll("g.bin")].map(g => ({
      decisions: +g.dataset.decisions,
      share: Object.fromEntries([...g.querySelectorAll("rect")].map(r => [r.dataset.deployment, +r.dataset.share]))}));
  }
  return out;
})()"""


def test_routing_page_charts_the_move_away_from_a_broken_deployment(proxy, client, upstreams, browser):
    assert _send(client, "obs/chart", 6, CODING) == ["ob-line-a"] * 6
    upstreams["ob-line-a"].control(mode="error", status=500)
    try:
        served = _send(client, "obs/chart", 6, CODING)  # two failures open its breaker (threshold 2)
    finally:
        upstreams["ob-line-a"].control(mode="ok")
    assert served == ["ob-line-b"] * 6
    _open_page(browser, proxy, 1400)
    bins = [b for b in browser.evaluate(CHART)["obs/chart"] if b["decisions"]]
    assert sum(b["decisions"] for b in bins) == 6 + 6 + 2  # the two failed attempts were decisions too
    assert bins[0]["share"] == {"ob-line-a": 1.0}  # before the break
    assert bins[-1]["share"] == {"ob-line-b": 1.0}  # after it: the broken deployment left alone
    # The per-domain rows are counted in words that agree with their number ("1 domain").
    summaries = browser.evaluate("""[...document.querySelectorAll('#deployments details')].map(
        d => [d.querySelector('summary').textContent, d.querySelectorAll('div').length])""")
    assert ["1 domain", 1] in summaries, summaries
    for text, n in summaries:
        assert text == (f"{n} domain" if n == 1 else f"{n} domains")


def test_decision_log_and_replay_logged(proxy, client, work):
    path = work / "decisions.jsonl"
    _send(client, "obs/ucb", 4)
    # Feedback on one more answer: quality evidence, logged under the id of the request it rates.
    raw = client.chat.completions.with_raw_response.create(
        model="obs/ucb", messages=[{"role": "user", "content": f"Rate this {MARKER}"}])
    rid = raw.headers["x-aisia-request-id"]
    r = httpx.post(proxy.url + "/aisia/feedback", headers=proxy.headers, json={"request_id": rid, "score": 0.25},
                   timeout=30)
    assert r.status_code == 200, r.text

    def read():
        found = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return found if any(x["type"] == "evidence" for x in found) else None

    lines = wait_for(read, "the decision log's lines")
    kinds = {x["type"] for x in lines}
    assert kinds == {"decision", "outcome", "evidence"}
    (rated,) = [x for x in lines if x["type"] == "evidence"]
    assert (rated["request_id"], rated["source"], rated["value"], rated["alias"]) == (rid, "feedback", 0.25, "obs/ucb")
    assert rated["deployment"] in [x["deployment"] for x in lines if x["type"] == "decision" and x["request_id"] == rid]
    assert MARKER not in path.read_text()
    decisions = [x for x in lines if x["type"] == "decision" and x["alias"] == "obs/ucb"]
    assert decisions and all(x["probability"] is not None for x in decisions)
    out = subprocess.run([str(Path(sys.executable).parent / "aisia"), "replay", "--logged", str(path),
                          "--policy", str(work / "team.yaml"), "--deployments", str(proxy.config_path),
                          "--alias", "obs/cheap", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["events"] >= 5 and report["valued_by_evidence"] == 1
    for est in ("ips", "dr"):
        lo, hi = report[est]["ci95"]
        assert lo <= report[est]["value"] <= hi
