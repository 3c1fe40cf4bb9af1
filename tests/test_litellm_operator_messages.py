"""What an operator and a client read from a real proxy (issue 19 D): the plugin's start-up line in
LiteLLM's log format, a broken policy's located lines, a refusal's message as the plugin wrote
it, a short `x-aisia-reason` by default (the full one opt-in), a failover that says the previous
deployment was rate limited, lkgp sessions from LiteLLM's own session header, and the admin
routes under /aisia/."""

from __future__ import annotations

import re
import time

import httpx
import openai
import pytest

from proxy_harness import Proxy, ProxyError, chat, deployment, start_proxy, upstreams_fixture

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

UPSTREAMS = [{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c} for n, c in (
    ("om-a", 0.1), ("om-b", 1.0), ("om-c", 2.0), ("om-rl-a", 0.1), ("om-rl-b", 1.0), ("om-lk-a", 0.1),
    ("om-lk-b", 1.0), ("om-dear", 10.0))]

POLICY = """\
version: 1
proxy:
  reload_interval_s: 0.5{verbose}
aliases:
  op/cost:
    description: short reasons
    strategy: cost
    candidates: {{models: [om-a, om-b, om-c]}}
  op/rate-limit:
    description: a rate-limited first choice
    strategy: cost
    candidates: {{models: [om-rl-a, om-rl-b]}}
    failover: {{attempts: 1}}
  op/strict:
    description: a strict budget nothing fits
    strategy: cost
    candidates: {{models: [om-dear]}}
    budget: {{max_cost_per_request_usd: 0.000001, mode: strict}}
  op/lkgp:
    description: sessions
    strategy: lkgp
    candidates: {{models: [om-lk-a, om-lk-b]}}
"""
OUR_ALIASES = ("op/cost", "op/lkgp", "op/rate-limit", "op/strict")
# LiteLLM's plain log line (litellm/_logging.py, _PLAIN_LOG_FORMAT with datefmt %H:%M:%S).
LOG_LINE = r"\d\d:\d\d:\d\d - {logger}:{level}: [\w.]+\.py:\d+ - "


upstreams = upstreams_fixture(UPSTREAMS)


@pytest.fixture(scope="module")
def config(upstreams):
    return {"model_list": [deployment(n, u) for n, u in upstreams.items()],
            "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}}


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("operator-messages") / "team.yaml"
    path.write_text(POLICY.format(verbose=""))
    return path


@pytest.fixture(scope="module")
def proxy(config, policy_file):
    p = start_proxy(config, policy_file.parent / "proxy", env={"AISIA_POLICY": str(policy_file)})
    yield p
    p.stop()


# -- logs --------------------------------------------------------------------------------------
def test_one_warning_line_at_start_in_litellms_format(proxy, policy_file):
    logs = proxy.logs()
    ours = [line for line in logs.splitlines() if "aisia: serving" in line]
    assert len(ours) == 1, ours  # once: not again through a root handler
    m = re.fullmatch(LOG_LINE.format(logger=r"aisia_plugin\.litellm", level="WARNING")
                     + r"aisia: serving (\d+) aliases: (.*); state store: memory; policy files: (.*) over the shipped defaults",
                     ours[0])
    assert m, ours[0]
    served = m.group(2).split(", ")
    assert int(m.group(1)) == len(served) and set(OUR_ALIASES) <= set(served)
    assert m.group(3) == str(policy_file)
    # LiteLLM's own lines have the same shape (time, logger:LEVEL, file:line).
    assert re.search("^" + LOG_LINE.format(logger=r"LiteLLM( Proxy| Router)?", level=r"[A-Z]+"), logs, re.M)


def test_a_broken_policy_at_start_logs_its_located_lines(tmp_path, config):
    bad = tmp_path / "broken.yaml"
    bad.write_text("version: 1\naliases:\n  auto:\n    strategy: cheapest\n")
    p = Proxy(config, tmp_path / "proxy", env={"AISIA_POLICY": str(bad)})
    try:
        p.start()
    except ProxyError:
        pass  # whether the proxy then exits or serves its plain models, the log says why, located
    finally:
        p.stop()
    lines = p.logs().splitlines()
    at = [i for i, line in enumerate(lines) if "aisia: the policy is invalid:" in line]
    assert len(at) == 1, p.log_tail()
    assert re.fullmatch(LOG_LINE.format(logger=r"aisia_plugin\.litellm", level="CRITICAL")
                        + "aisia: the policy is invalid:", lines[at[0]])
    assert lines[at[0] + 1] == (f"{bad}:4:15: aliases.auto.strategy: unknown strategy 'cheapest'; "
                                "did you mean 'cost'? (no installed plugin provides it)")


# -- messages ------------------------------------------------------------------------------------
def test_a_refusal_is_the_plugins_message_alone(client):
    with pytest.raises(openai.APIStatusError) as err:
        chat(client, "op/strict")
    assert err.value.status_code == 402
    message = err.value.body["message"]
    # LiteLLM's Router appends its fallback explanation to an exception's `message`.
    assert message.startswith("alias 'op/strict': ") and "budget" in message, message
    assert "fallback" not in message and "LiteLLM" not in message, message


def test_the_reason_header_is_short_by_default(client):
    served, headers, _ = chat(client, "op/cost")
    assert served == "om-a"
    assert headers["x-aisia-reason"] == "cost picked om-a of 3 candidates"  # no other id, no score


def test_a_failover_after_a_rate_limit_says_rate_limited(client, upstreams):
    with upstreams["om-rl-a"].broken(mode="rate_limit", retry_after=30):
        served, headers, _ = chat(client, "op/rate-limit")
    assert served == "om-rl-b"
    assert headers["x-aisia-reason"] == "cost picked om-rl-b after om-rl-a was rate limited"


def test_lkgp_sessions_follow_litellms_session_header(client, upstreams):
    def ask(session):
        return chat(client, "op/lkgp", extra_headers={"x-litellm-session-id": session})[0]

    first = ask("conversation-x1")
    other = "om-lk-b" if first == "om-lk-a" else "om-lk-a"
    upstreams[first].control(mode="error", status=500)
    try:
        assert ask("conversation-y1") == other  # y's first request fails over: y's last good one
    finally:
        upstreams[first].control(mode="ok")
    # Each conversation stays where it last succeeded (one key sends both: the key is not the session).
    assert [ask("conversation-x1") for _ in range(3)] == [first] * 3
    assert [ask("conversation-y1") for _ in range(3)] == [other] * 3


def test_admin_routes_are_under_aisia_and_the_documented_names_still_answer(proxy, client):
    chat(client, "op/cost")
    with httpx.Client(base_url=proxy.url, headers=proxy.headers, timeout=30) as admin:
        new, seed = admin.get("/aisia/bandit/stats"), admin.get("/admin/bandit/stats")
        assert new.status_code == seed.status_code == 200
        assert set(new.json()) == set(seed.json()) and "om-a" in new.json()
        for path in ("/aisia/bandit/reset", "/admin/bandit/reset"):
            r = admin.post(path, json={"deployment_id": "om-c"})
            assert r.status_code == 200 and r.json() == {"reset": "om-c"}, (path, r.text)
    assert httpx.get(proxy.url + "/aisia/bandit/stats", timeout=30).status_code == 401


def test_the_full_reason_is_opt_in(proxy, client, policy_file):
    before = httpx.get(proxy.url + "/aisia/policy", headers=proxy.headers, timeout=30).json()["reloads"]
    policy_file.write_text(POLICY.format(verbose="\n  verbose_reason_header: true"))
    try:
        deadline = time.monotonic() + 30
        while httpx.get(proxy.url + "/aisia/policy", headers=proxy.headers, timeout=30).json()["reloads"] == before:
            assert time.monotonic() < deadline, "the edited policy was never reloaded"
            time.sleep(0.2)
        _, headers, _ = chat(client, "op/cost")
        reason = headers["x-aisia-reason"]
        assert reason.startswith("cost picked om-a: cheapest at $") and "next cheapest" in reason, reason
    finally:
        policy_file.write_text(POLICY.format(verbose=""))
