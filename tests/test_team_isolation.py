"""Acceptance 3 of the teams issue, through a real LiteLLM proxy: a hostile key (540 KB prompts,
feedback 0 on every answer, bursts of failures of its own making) moves another team's choices
by less than the stated bound (docs/security.md#tenants): the other team's share of requests to
the better deployment moves by at most 0.10, and the better deployment's quality estimate by at
most 0.10 (key_share.PullRule.max_pull).

Keys and teams come from LiteLLM's ``custom_auth`` (tests/custom_auth_roles.py returns the team
fields a database-backed proxy would). On main this failed: the hostile key's three prompts took
the alias's one shared multiplier from 0 to its maximum, and all of the other team's next 20
calls went to the cheapest deployment."""

from __future__ import annotations

import httpx
import pytest

from fault_helpers import admin_get, explain_rows, start_custom_auth_proxy
from proxy_harness import start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy

ALIAS = "t/paced"
HOSTILE, PLAIN = "sk-team-hostile", "sk-team-plain"
KEYS = {HOSTILE: {"role": "internal_user", "team_id": "team-hostile"},
        PLAIN: {"role": "internal_user", "team_id": "team-plain"}}
BOUND = 0.10
POLICY = f"""\
version: 1
defaults: false
aliases:
  {ALIAS}:
    description: paced, two deployments
    strategy: ucb1
    exploration_c: 0.05
    candidates: {{models: [iso-good, iso-cheap]}}
    budget: {{target_usd_per_1k_requests: 0.5}}
"""
HUGE = "Summarise this. " + "lorem ipsum dolor sit amet " * 20000  # ~540 KB


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    # Each answers in 20 ms: a client's timeout of 1 ms always fires.
    running = start_upstreams([{"name": "iso-good", "input_cost_per_1m": 3.0, "output_cost_per_1m": 3.0, "echo": True,
                                "latency_ms": 20},
                               {"name": "iso-cheap", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.1, "echo": True,
                                "latency_ms": 20}])
    ups = {u.name: u for u in running}
    p = start_custom_auth_proxy(tmp_path_factory.mktemp("isolation"), ups, POLICY, KEYS,
                                litellm_settings={"request_timeout": 120})
    yield p
    p.stop()
    stop_upstreams(running)


def send(proxy, key: str, text: str, **extra) -> httpx.Response:
    return httpx.post(proxy.base_url + "/chat/completions", timeout=120, headers={"Authorization": f"Bearer {key}"},
                      json={"model": ALIAS, "messages": [{"role": "user", "content": text}], **extra})


def served(proxy, r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    rid = r.headers["x-aisia-request-id"]
    explain_rows(proxy, rid)  # its outcome (and cost) learned
    return r.headers["x-litellm-model-id"]


def feedback(proxy, key: str, r: httpx.Response, score: float) -> None:
    got = httpx.post(proxy.url + "/aisia/feedback", headers={"Authorization": f"Bearer {key}"}, timeout=60,
                     json={"request_id": r.headers["x-aisia-request-id"], "score": score})
    assert got.status_code == 200, got.text


def plain_round(proxy, n: int, tag: str, grade: bool) -> list[str]:
    """`n` requests of the plain team; with `grade`, its honest feedback (1 for the good answers,
    0.2 for the cheap ones)."""
    out = []
    for k in range(n):
        r = send(proxy, PLAIN, f"{tag} question {k}: what is the capital of France?")
        dep = served(proxy, r)
        out.append(dep)
        if grade:
            feedback(proxy, PLAIN, r, 1.0 if dep == "iso-good" else 0.2)
    return out


def quality(proxy, dep: str) -> float:
    return admin_get(proxy, "/admin/bandit/stats")[dep]["quality"]["estimate"]


def test_a_hostile_key_moves_another_teams_choices_and_quality_by_less_than_the_bound(proxy):
    plain_round(proxy, 16, "warm", grade=True)
    before = plain_round(proxy, 20, "before", grade=False)
    # The hostile key: three 540 KB prompts, 0 on every answer, and bursts of failures of its own
    # making (a client timeout of 1 ms).
    hostile_answers = []
    for k in range(3):
        hostile_answers.append(send(proxy, HOSTILE, f"{k} {HUGE}"))
    for k in range(20):
        hostile_answers.append(send(proxy, HOSTILE, f"hostile {k}: what is the capital of France?"))
    # Its evidence's move, read around its feedback alone: every request (its own and the plain
    # team's) is a tick of forgetting, which takes each estimate a little toward its prior (about
    # 0.0001 over these 23), whoever sends it; evidence never moves the tick.
    for r in hostile_answers:
        served(proxy, r)  # (its outcome learned: its tick counted)
    q_before = quality(proxy, "iso-good")
    for r in hostile_answers:
        feedback(proxy, HOSTILE, r, 0.0)
    q_after = quality(proxy, "iso-good")  # (feedback is applied before its route answers)
    for k in range(12):
        r = send(proxy, HOSTILE, f"burst {k}", timeout=0.001)
        assert r.status_code >= 400
    after = plain_round(proxy, 20, "after", grade=False)
    share = lambda deps: deps.count("iso-good") / len(deps)  # noqa: E731
    print(f"plain team, share to iso-good: before {share(before):.2f}, after {share(after):.2f}; "
          f"iso-good quality {q_before:.3f} -> {q_after:.3f}")
    assert share(before) >= 0.8
    assert abs(share(after) - share(before)) <= BOUND
    assert q_before - q_after <= BOUND + 1e-9
