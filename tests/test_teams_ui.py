"""The routing page per team through a real LiteLLM proxy (issue 37, one tenant cannot read another; docs/teams.md,
docs/security.md): a team's key reads its own team's view of `/aisia/ui` (its team's decisions and
outcomes per alias and deployment, its latest decisions, its policy layer), nothing of another team
and none of the per-deployment learning; a key of no team is refused; the proxy admin reads every
team's figures beside everything else. The session cookie seals the role and the team: an altered
cookie, or a well-sealed one claiming another team or the admin's role for a team's key, is refused,
and a sign-out still revokes it. Keys and teams from LiteLLM's `custom_auth`
(tests/custom_auth_roles.py), as in tests/test_teams_proxy.py."""

from __future__ import annotations

import os
import secrets
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

import httpx
import pytest

from browser import Chromium
from fault_helpers import parse_reply, start_custom_auth_proxy, wait_for
from proxy_harness import upstreams_fixture

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy (and Chromium)

POLICY = """\
version: 1
defaults: false
aliases:
  tu/main:
    description: the operator's alias
    strategy: cost
    candidates: {models: [tu-cheap, tu-mid, tu-top]}
deployments:
  tu-cheap: {tier: free}
  tu-mid: {tier: pro}
  tu-top: {tier: ultra}
teams:
  team-a-id:
    description: team A reads pro only
    aliases:
      tu/main: {candidates: {tiers: [pro]}, strategy: ucb1}
  beta:
    description: team B reads ultra only
    aliases:
      tu/main: {candidates: {tiers: [ultra]}}
"""

A_KEY, B_KEY, LONE_KEY = ("sk-" + n + "-" + secrets.token_hex(6) for n in ("ui-team-a", "ui-team-b", "ui-lone"))
KEYS = {A_KEY: {"role": "internal_user", "team_id": "team-a-id", "team_alias": "alpha"},
        B_KEY: {"role": "internal_user", "team_id": "team-b-id", "team_alias": "beta"},
        LONE_KEY: {"role": "internal_user"}}
SALT = "aisia-test-salt-" + secrets.token_hex(8)  # the proxy's LITELLM_SALT_KEY: what seals the cookies
# Keys of the per-deployment learning a team's key must not read (docs/security.md).
LEARNING = ("mean_reward", "breaker", "quality", "pulls", "avg_latency_s", "error_rate", "cost_per_1m", "reason")

upstreams = upstreams_fixture([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in (("tu-cheap", 0.1), ("tu-mid", 1.0), ("tu-top", 5.0))])


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    p = start_custom_auth_proxy(tmp_path_factory.mktemp("teams-ui"), upstreams, POLICY, KEYS,
                                env={"LITELLM_SALT_KEY": SALT})
    yield p
    p.stop()


def chat(proxy, key: str) -> tuple[str, str]:
    """(the deployment that served, the request id) of one call of `key`."""
    r = httpx.post(proxy.base_url + "/chat/completions", timeout=60, headers={"Authorization": f"Bearer {key}"},
                   json={"model": "tu/main", "messages": [{"role": "user", "content": "Hello, how are you?"}]})
    assert r.status_code == 200, r.text[:400]
    return parse_reply(r.json()["choices"][0]["message"]["content"])[0], r.headers["x-aisia-request-id"]


def data(proxy, key=None, cookies=None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(proxy.url + "/aisia/ui/data", headers=headers, cookies=cookies, timeout=60)


@pytest.fixture(scope="module")
def traffic(proxy):
    """Three calls of each team's key and one of the key of no team, once every team's outcomes
    are counted: {key: [request ids]}."""
    sent = {A_KEY: [], B_KEY: [], LONE_KEY: []}
    for key, n, expected in ((A_KEY, 3, "tu-mid"), (B_KEY, 3, "tu-top"), (LONE_KEY, 1, "tu-cheap")):
        for _ in range(n):
            served, rid = chat(proxy, key)
            assert served == expected
            sent[key].append(rid)

    def counted():
        teams = data(proxy, proxy.master_key).json()["teams"]
        return all(teams.get(t, {}).get("tu/main", {}).get(d, {}).get("outcomes", {}).get("success") == 3
                   for t, d in (("team-a-id", "tu-mid"), ("team-b-id", "tu-top")))

    wait_for(counted, "both teams' outcomes on the routing page's data")
    return sent


def test_a_teams_key_reads_its_own_teams_figures_only(proxy, traffic):
    r = data(proxy, A_KEY)
    assert r.status_code == 200, r.text[:300]
    mine = r.json()
    assert mine["view"]["role"] == "team" and mine["view"]["team"] == "team-a-id"
    assert mine["teams"] == {"team-a-id": {"tu/main": {"tu-mid": {"decisions": 3, "outcomes": {"success": 3}}}}}
    # Its latest decisions are its own calls, without their reasons.
    assert {row["request_id"] for row in mine["recent"]} == set(traffic[A_KEY])
    assert all(row["deployment"] == "tu-mid" and row["layer"] == "teams.team-a-id" for row in mine["recent"])
    assert mine["aliases"]["tu/main"]["share"] == {"tu-mid": 1.0} and mine["aliases"]["tu/main"]["decisions"] == 3
    assert mine["aliases"]["tu/main"]["strategy"] == "ucb1"  # as its layer defines the alias
    assert mine["aliases"]["tu/main"]["timeline"]["decisions"] == 3
    # The layer that decides its requests, as written.
    layer = mine["view"]["layer"]
    assert layer["label"] == "teams.team-a-id" and layer["description"] == "team A reads pro only"
    assert layer["aliases"]["tu/main"]["candidates"]["tiers"] == ["pro"]
    # Nothing of team B, of the key of no team, nor of what was learned per deployment.
    text = r.text
    for other in ("team-b-id", "beta", "tu-top", "tu-cheap", *traffic[B_KEY], *traffic[LONE_KEY]):
        assert other not in text, other
    assert mine["deployments"] == []
    assert not any(f'"{k}"' in text for k in LEARNING), text[:600]


def test_a_key_of_no_team_gets_no_view_and_the_admin_every_teams(proxy, traffic):
    lone = data(proxy, LONE_KEY)
    assert lone.status_code == 403 and "team-a-id" not in lone.text and "team-b-id" not in lone.text, lone.text[:300]
    assert httpx.get(proxy.url + "/aisia/ui", headers={"Authorization": f"Bearer {LONE_KEY}"},
                     timeout=60).status_code == 403
    assert sign_in(proxy, LONE_KEY).status_code == 403
    admin = data(proxy, proxy.master_key).json()
    assert admin["view"] == {"role": "admin"}
    assert admin["teams"]["team-a-id"]["tu/main"]["tu-mid"] == {"decisions": 3, "outcomes": {"success": 3}}
    assert admin["teams"]["team-b-id"]["tu/main"]["tu-top"] == {"decisions": 3, "outcomes": {"success": 3}}
    assert {d["id"] for d in admin["deployments"]} == {"tu-cheap", "tu-mid", "tu-top"}
    teams = {row["request_id"]: row["team"] for row in admin["recent"]}
    assert {teams[rid] for rid in traffic[A_KEY]} == {"team-a-id"}
    assert {teams[rid] for rid in traffic[B_KEY]} == {"team-b-id"}
    assert {teams[rid] for rid in traffic[LONE_KEY]} == {None}
    assert all(row["reason"] for row in admin["recent"])


def sign_in(proxy, key: str) -> httpx.Response:
    return httpx.post(proxy.url + "/aisia/ui/login", data={"key": key}, timeout=60)


def sealed(monkeypatch, key: str, role: str, team) -> str:
    """A cookie sealed as the proxy seals its sessions (its LITELLM_SALT_KEY), claiming `role`
    and `team` for `key`: what only someone holding the proxy's secret could make."""
    from aisia_plugin.litellm.page_view import Viewer
    from aisia_plugin.litellm.session import seal

    monkeypatch.setenv("LITELLM_SALT_KEY", SALT)
    return seal(key, time.time(), Viewer(role == "admin", team))


def test_the_session_seals_the_team_and_a_forged_or_altered_cookie_is_refused(proxy, traffic, monkeypatch):
    signed = sign_in(proxy, B_KEY)
    assert signed.status_code == 303 and B_KEY not in signed.text
    cookie = signed.cookies["aisia_session"]
    mine = data(proxy, cookies={"aisia_session": cookie})
    assert mine.status_code == 200 and mine.json()["view"]["team"] == "team-b-id"
    assert set(mine.json()["teams"]) == {"team-b-id"}
    # Altered: the seal breaks, whatever the change.
    for altered in (cookie[:-6] + ("AAAAAA" if not cookie.endswith("AAAAAA") else "BBBBBB"),
                    cookie.replace("aisia_session_", "aisia_session_x", 1), "aisia_session_" + "A" * 80):
        assert data(proxy, cookies={"aisia_session": altered}).status_code == 401
    # Well sealed but claiming another team, or the admin's role, for team B's key: refused.
    good = sealed(monkeypatch, B_KEY, "team", "team-b-id")
    assert data(proxy, cookies={"aisia_session": good}).status_code == 200  # (the test seals as the proxy does)
    for role, team in (("team", "team-a-id"), ("admin", None)):
        r = data(proxy, cookies={"aisia_session": sealed(monkeypatch, B_KEY, role, team)})
        assert r.status_code == 401 and "sign in again" in r.text, (role, team, r.text[:300])
    # A sign-out still revokes the session on the server.
    with httpx.Client(base_url=proxy.url, cookies={"aisia_session": cookie}, timeout=60) as session:
        assert session.post("/aisia/ui/logout").status_code == 303
    assert data(proxy, cookies={"aisia_session": cookie}).status_code == 401


def test_the_page_in_a_browser_shows_a_team_its_own_figures_and_the_admin_every_team(proxy, traffic, tmp_path):
    with Chromium(tmp_path / "chromium") as browser:
        browser.sign_in(proxy.url, A_KEY)
        dom = browser.page_dom(proxy.url)
        assert '<tr data-team="team-a-id" data-alias="tu/main" data-deployment="tu-mid">' in dom
        assert 'data-layer="teams.team-a-id"' in dom and "team A reads pro only" in dom
        for other in ("team-b-id", "tu-top", "tu-cheap"):
            assert other not in dom, other
        assert browser.evaluate("document.getElementById('deployments-card').hidden") is True
        assert browser.evaluate("document.querySelectorAll('#deployments tbody tr').length") == 0
        assert browser.evaluate("getComputedStyle(document.getElementById('layer-card')).display") != "none"
        browser.sign_in(proxy.url, proxy.master_key)
        dom = browser.page_dom(proxy.url)
        for team, dep in (("team-a-id", "tu-mid"), ("team-b-id", "tu-top")):
            assert f'<tr data-team="{team}" data-alias="tu/main" data-deployment="{dep}">' in dom
        assert browser.evaluate("document.getElementById('deployments-card').hidden") is False
        assert browser.evaluate("document.querySelectorAll('#deployments tbody tr').length") == 3
