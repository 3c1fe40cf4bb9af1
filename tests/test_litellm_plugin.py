"""The plugin in a real LiteLLM proxy process (one for the module), in front of simulated
upstreams over HTTP, spoken to with the real `openai` client.

Each test routes its own alias over its own upstreams (see POLICY), so that what one test
breaks or teaches cannot change another's routing."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from proxy_harness import chat, deployment, parse_reply, start_proxy, start_upstreams, stats, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

CODING = "Write a Python function that merges two sorted lists, with unit tests"
PLAIN = "Hello, how are you today?"

UPSTREAMS = [
    {"name": "gen", "input_cost_per_1m": 1.0, "output_cost_per_1m": 2.0},
    {"name": "coder", "input_cost_per_1m": 3.0, "output_cost_per_1m": 6.0, "strengths": {"coding": 0.95}},
    {"name": "cheapo", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.2},
    {"name": "premium", "input_cost_per_1m": 10.0, "output_cost_per_1m": 30.0},
    *({"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c} for n, c in (
        ("brk-a", 0.2), ("brk-b", 2.0), ("fo-a", 0.1), ("fo-b", 1.0), ("fo-c", 2.0), ("af-a", 0.1), ("af-b", 1.0),
        ("st-a", 0.1), ("st-b", 1.0), ("fb-a", 0.1), ("fb-b", 1.0), ("lk-a", 0.1), ("lk-b", 1.0), ("us-a", 0.1), ("us-b", 1.0), ("mf-a", 0.1), ("mf-b", 1.0),
        ("cl-a", 0.1), ("cl-b", 1.0), ("sb-a", 0.1), ("sb-b", 1.0), ("rl-a", 0.1), ("rl-b", 1.0))),
]

POLICY = """\
version: 1
circuit_breaker:
  failure_threshold: 2
  timeout_s: 1.0
  half_open_max_calls: 1
deployments:
  coder:
    specialities:
      coding: null
aliases:
  auto/coding:
    candidates: {models: [gen, coder, premium]}
  auto/cheap:
    candidates: {models: [gen, coder, cheapo, premium]}
  test/breaker:
    description: breaker test
    strategy: cost
    candidates: {models: [brk-a, brk-b]}
    failover: {attempts: 1}
  test/failover:
    description: failover test
    strategy: cost
    candidates: {models: [fo-a, fo-b, fo-c]}
    failover: {attempts: 2}
  test/allfail:
    description: every candidate fails
    strategy: cost
    candidates: {models: [af-a, af-b]}
    failover: {attempts: 1}
  test/malformed:
    description: a 200 with a broken body
    strategy: cost
    candidates: {models: [mf-a, mf-b]}
  test/client-error:
    description: the caller's own errors
    strategy: cost
    candidates: {models: [cl-a, cl-b]}
  test/strict:
    description: strict budget
    strategy: cost
    candidates: {models: [premium]}
    budget: {max_cost_per_request_usd: 0.000001, mode: strict}
  test/soft:
    description: soft budget
    strategy: ucb1
    candidates: {models: [gen, premium]}
    budget: {max_cost_per_request_usd: 0.01, mode: soft, expected_output_tokens: 1000}
  test/stream:
    description: streaming
    strategy: cost
    candidates: {models: [st-a, st-b]}
  test/stream-break:
    description: a stream broken midway
    strategy: cost
    candidates: {models: [sb-a, sb-b]}
  test/rate-limit:
    description: 429 with Retry-After
    strategy: cost
    candidates: {models: [rl-a, rl-b]}
  test/feedback:
    description: feedback
    strategy: cost
    candidates: {models: [fb-a, fb-b]}
  test/lkgp-user:
    description: sessions by user
    strategy: lkgp
    candidates: {models: [us-a, us-b]}
  test/lkgp:
    description: sessions
    strategy: lkgp
    candidates: {models: [lk-a, lk-b]}
"""


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams(UPSTREAMS)
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    work = tmp_path_factory.mktemp("plugin")
    policy = work / "team.yaml"
    policy.write_text(POLICY)
    config = {
        "model_list": [deployment(name, up) for name, up in upstreams.items()],
        "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]},
    }
    p = start_proxy(config, work, env={"AISIA_POLICY": str(policy)})
    yield p
    p.stop()


def explain(admin, request_id, settled=True) -> list[dict]:
    """The explain log's rows of one request, by attempt; with `settled`, once every attempt's
    outcome has been learned (LiteLLM logs outcomes in the background, after the response)."""
    deadline = time.monotonic() + 30
    while True:
        r = admin.get("/aisia/explain", params={"limit": 1000})
        assert r.status_code == 200, r.text
        rows = sorted((e for e in r.json()["decisions"] if e["request_id"] == request_id), key=lambda e: e["attempt"])
        if not settled or (rows and all(e["outcome"] for e in rows)) or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


# -- aliases are models ------------------------------------------------------------------------
def test_aliases_are_listed_next_to_the_users_models(client, admin):
    listed = {m.id for m in client.models.list()}
    assert {"auto", "auto/coding", "auto/cheap", "auto/fast", "auto/smart", "auto/lkgp", "test/stream"} <= listed
    assert {"gen", "coder", "cheapo"} <= listed
    info = admin.get("/model_group/info")
    assert info.status_code == 200
    groups = {g["model_group"] for g in info.json()["data"]}
    assert {"auto/coding", "auto/cheap", "test/failover"} <= groups


def test_coding_prompts_reach_the_coding_specialist(client, admin):
    for _ in range(4):
        served, headers, _ = chat(client, "auto/coding", CODING)
        assert served == "coder"
        assert headers["x-litellm-model-id"] == "coder"
        assert headers["x-aisia-alias"] == "auto/coding"
        assert headers["x-aisia-domain"] == "coding"
    rows = explain(admin, headers["x-aisia-request-id"])
    assert rows and rows[0]["deployment_id"] == "coder"
    excluded = {c["id"]: c.get("excluded") for c in rows[0]["candidates"]}
    assert "not a coding specialist" in (excluded["gen"] or "")


def test_cheap_takes_the_cheapest_healthy_deployment_and_headers_say_so(client, admin):
    _, warm, _ = chat(client, "auto/cheap")
    explain(admin, warm["x-aisia-request-id"])
    before = stats(admin)["cheapo"]["count"]
    served, headers, completion = chat(client, "auto/cheap")
    assert served == "cheapo"
    assert completion.model == "auto/cheap"  # the client sees the name it asked for
    assert headers["x-litellm-model-id"] == "cheapo"
    assert headers["x-aisia-strategy"] == "cost"
    assert headers["x-aisia-domain"] == "none"
    assert "cheapo" in headers["x-aisia-reason"] and "\n" not in headers["x-aisia-reason"]
    assert PLAIN not in headers["x-aisia-reason"]
    rid = headers["x-aisia-request-id"]
    rows = explain(admin, rid)
    assert [r["deployment_id"] for r in rows] == ["cheapo"]
    assert rows[0]["outcome"]["success"] is True
    assert rows[0]["outcome"]["cost_usd"] > 0  # LiteLLM's response_cost reached the learner
    assert stats(admin)["cheapo"]["count"] == before + 1


def test_unknown_alias_is_a_clear_client_error(client):
    with pytest.raises(openai.BadRequestError) as err:
        chat(client, "auto/nope")
    text = str(err.value)
    assert "auto/nope" in text and "auto/coding" in text and "auto/cheap" in text


def test_a_plain_model_name_is_untouched(client):
    served, headers, _ = chat(client, "premium")
    assert served == "premium"
    assert "x-aisia-alias" not in headers


# -- failures ------------------------------------------------------------------------------------
def test_failover_serves_from_the_next_candidate_with_no_client_error(client, admin, upstreams):
    upstreams["fo-a"].control(mode="error", status=500)
    upstreams["fo-b"].control(mode="error", status=503)
    try:
        served, headers, _ = chat(client, "test/failover")
    finally:
        upstreams["fo-a"].control(mode="ok")
        upstreams["fo-b"].control(mode="ok")
    assert served == "fo-c"
    assert headers["x-litellm-attempted-retries"] == "2"
    assert headers["x-aisia-reason"] == "cost picked fo-c after fo-a failed and fo-b failed"
    rows = explain(admin, headers["x-aisia-request-id"])
    assert [r["deployment_id"] for r in rows] == ["fo-a", "fo-b", "fo-c"]
    assert [r["outcome"]["success"] for r in rows] == [False, False, True]
    assert rows[0]["outcome"]["failure"]["kind"] == "provider"
    assert rows[2]["excluded_after_failure"] == ["fo-a", "fo-b"]
    assert upstreams["fo-a"].stats()["calls"] == 1 and upstreams["fo-b"].stats()["calls"] == 1


def test_when_every_candidate_fails_one_error_names_the_alias_and_what_was_tried(client, upstreams):
    for name in ("af-a", "af-b"):
        upstreams[name].control(mode="error", status=500)
    try:
        with pytest.raises(openai.APIStatusError) as err:
            chat(client, "test/allfail")
    finally:
        for name in ("af-a", "af-b"):
            upstreams[name].control(mode="ok")
    assert err.value.status_code == 502
    text = str(err.value)
    assert "test/allfail" in text and "af-a" in text and "af-b" in text and "500" in text


def test_a_malformed_answer_is_a_provider_failure_and_is_failed_over(client, admin, upstreams):
    upstreams["mf-a"].control(mode="malformed")
    try:
        served, headers, _ = chat(client, "test/malformed")
    finally:
        upstreams["mf-a"].control(mode="ok")
    assert served == "mf-b"
    rows = explain(admin, headers["x-aisia-request-id"])
    assert [r["deployment_id"] for r in rows] == ["mf-a", "mf-b"]
    assert rows[0]["outcome"]["failure"]["kind"] == "provider"


def test_a_client_error_is_not_a_provider_failure(client, admin, upstreams):
    upstreams["cl-a"].control(mode="error", status=400)
    try:
        for _ in range(3):
            with pytest.raises(openai.BadRequestError):
                chat(client, "test/client-error")
    finally:
        upstreams["cl-a"].control(mode="ok")
    assert upstreams["cl-b"].stats()["calls"] == 0  # a 400 is not retried elsewhere
    row = stats(admin).get("cl-a", {"breaker": "CLOSED", "count": 0})  # nothing learned: maybe no row at all
    assert row["breaker"] == "CLOSED" and row["count"] == 0  # neither the breaker nor the bandit counted it
    served, headers, _ = chat(client, "test/client-error")
    assert served == "cl-a"
    explain(admin, headers["x-aisia-request-id"])
    count = stats(admin)["cl-a"]["count"]
    # A 401 (a wrong upstream key) is retried by LiteLLM elsewhere, and counted nowhere.
    upstreams["cl-a"].control(mode="error", status=401)
    try:
        served, headers, _ = chat(client, "test/client-error")
    finally:
        upstreams["cl-a"].control(mode="ok")
    assert served == "cl-b"
    assert explain(admin, headers["x-aisia-request-id"])[0]["outcome"]["failure"]["kind"] == "client"
    assert stats(admin)["cl-a"]["breaker"] == "CLOSED" and stats(admin)["cl-a"]["count"] == count


def test_a_failing_upstream_opens_its_breaker_then_returns_through_a_half_open_probe(client, admin, upstreams):
    a = upstreams["brk-a"]
    a.control(mode="error", status=500)
    served = [chat(client, "test/breaker")[0] for _ in range(2)]
    assert served == ["brk-b", "brk-b"]  # each failure was failed over: the client saw none
    assert stats(admin)["brk-a"]["breaker"] == "OPEN"
    calls = a.stats()["calls"]
    assert [chat(client, "test/breaker")[0] for _ in range(3)] == ["brk-b"] * 3
    assert a.stats()["calls"] == calls  # OPEN: not even tried
    a.control(mode="ok")
    # After the breaker's timeout a single probe is let through; it succeeds and closes it.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        who, headers, _ = chat(client, "test/breaker")
        if who == "brk-a":
            break
        time.sleep(0.2)
    assert who == "brk-a"
    rows = explain(admin, headers["x-aisia-request-id"])
    assert rows[0]["probe"] is True
    assert headers["x-aisia-reason"] == "cost picked brk-a as a half-open probe of its breaker"
    assert stats(admin)["brk-a"]["breaker"] == "CLOSED"
    assert chat(client, "test/breaker")[0] == "brk-a"


# -- budget --------------------------------------------------------------------------------------
def test_a_strict_budget_refuses_with_402_and_the_reason(client, upstreams):
    calls = upstreams["premium"].stats()["calls"]
    with pytest.raises(openai.APIStatusError) as err:
        chat(client, "test/strict")
    assert err.value.status_code == 402
    assert "budget" in str(err.value) and "test/strict" in str(err.value)
    assert upstreams["premium"].stats()["calls"] == calls


def test_a_soft_budget_routes_to_an_in_budget_candidate(client):
    assert {chat(client, "test/soft")[0] for _ in range(4)} == {"gen"}


# -- streaming -------------------------------------------------------------------------------------
def test_streaming_is_served_and_its_latency_recorded(client, admin):
    before = stats(admin).get("st-a", {}).get("count", 0)
    raw = client.chat.completions.with_raw_response.create(
        model="test/stream", messages=[{"role": "user", "content": PLAIN}], stream=True)
    assert raw.headers["x-aisia-alias"] == "test/stream"
    assert raw.headers["x-litellm-model-id"] == "st-a"
    text = "".join(ch.choices[0].delta.content or "" for ch in raw.parse() if ch.choices)
    assert parse_reply(text)[0] == "st-a"
    outcome = explain(admin, raw.headers["x-aisia-request-id"])[0]["outcome"]
    assert outcome["success"] is True and outcome["stream"] is True
    assert outcome["latency_s"] > 0 and outcome["time_to_first_token_s"] is not None
    row = stats(admin)["st-a"]
    assert row["count"] == before + 1 and row["avg_latency"] > 0


def test_a_stream_whose_first_deployment_fails_is_served_by_the_next(client, admin, upstreams):
    upstreams["st-a"].control(mode="error", status=500)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="test/stream", messages=[{"role": "user", "content": PLAIN}], stream=True)
        text = "".join(ch.choices[0].delta.content or "" for ch in raw.parse() if ch.choices)
    finally:
        upstreams["st-a"].control(mode="ok")
    assert parse_reply(text)[0] == "st-b"
    assert raw.headers["x-litellm-model-id"] == "st-b"
    rows = explain(admin, raw.headers["x-aisia-request-id"])
    assert [r["deployment_id"] for r in rows] == ["st-a", "st-b"]
    assert [r["outcome"]["success"] for r in rows] == [False, True]


def test_a_stream_broken_midway_is_a_provider_failure(client, admin, upstreams):
    upstreams["sb-a"].control(mode="stream_break")
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="test/stream-break", messages=[{"role": "user", "content": PLAIN}], stream=True)
        assert raw.headers["x-litellm-model-id"] == "sb-a"
        with pytest.raises(openai.APIError):  # the first chunks were sent: the client sees the break
            for _ in raw.parse():
                pass
    finally:
        upstreams["sb-a"].control(mode="ok")
    outcome = explain(admin, raw.headers["x-aisia-request-id"])[0]["outcome"]
    assert outcome["success"] is False and outcome["stream"] is True
    assert outcome["failure"]["kind"] == "provider"
    assert stats(admin)["sb-a"]["error_rate"] > 0


def test_a_429_with_retry_after_is_a_rate_limit_not_an_outage(client, admin, upstreams):
    upstreams["rl-a"].control(mode="rate_limit", retry_after=30)
    try:
        served, headers, _ = chat(client, "test/rate-limit")
        rows = explain(admin, headers["x-aisia-request-id"])
        assert served == "rl-b"  # failed over, no client error
        assert rows[0]["deployment_id"] == "rl-a" and rows[0]["outcome"]["failure"]["kind"] == "rate_limit"
        assert [chat(client, "test/rate-limit")[0] for _ in range(3)] == ["rl-b"] * 3  # backing off
        assert upstreams["rl-a"].stats()["calls"] == 1
    finally:
        upstreams["rl-a"].control(mode="ok")
    row = stats(admin)["rl-a"]
    assert row["breaker"] == "CLOSED" and row["count"] == 0  # neither an outage nor a quality signal


# -- feedback and admin ------------------------------------------------------------------------------
@pytest.mark.parametrize("path,method", [("/admin/bandit/stats", "GET"), ("/aisia/explain", "GET"),
                                         ("/aisia/feedback", "POST")])
def test_admin_endpoints_refuse_a_missing_or_wrong_key(proxy, path, method):
    with httpx.Client(base_url=proxy.url, timeout=30) as c:
        missing = c.request(method, path, json={})
        wrong = c.request(method, path, json={}, headers={"Authorization": "Bearer sk-wrong"})
    assert missing.status_code in (401, 403), missing.text
    assert wrong.status_code in (401, 403), wrong.text
    assert "pulls" not in missing.text and "decisions" not in wrong.text


def test_feedback_moves_only_the_serving_deployments_statistics(client, admin):
    served, headers, _ = chat(client, "test/feedback")
    assert served == "fb-a"
    rid = headers["x-aisia-request-id"]
    explain(admin, rid)
    before = stats(admin)
    r = admin.post("/aisia/feedback", json={"request_id": rid, "score": 0.0})
    assert r.status_code == 200, r.text
    assert r.json()["deployment_id"] == "fb-a"
    after = stats(admin)
    # Feedback is quality evidence (docs/quality.md): it moves fb-a's quality, not its health.
    assert after["fb-a"]["count"] == before["fb-a"]["count"]
    assert after["fb-a"]["quality"]["evidence"]["feedback"] == before["fb-a"]["quality"]["evidence"]["feedback"] + 1
    assert after["fb-a"]["quality"]["estimate"] < before["fb-a"]["quality"]["estimate"]
    for dep, row in before.items():
        if dep != "fb-a":
            assert after[dep]["count"] == row["count"] and after[dep]["quality"] == row["quality"], dep
    assert admin.post("/aisia/feedback", json={"request_id": rid, "score": 1.0}).status_code == 404  # once only
    assert admin.post("/aisia/feedback", json={"request_id": "no-such-request", "score": 1.0}).status_code == 404
    _, headers2, _ = chat(client, "test/feedback")
    rid2 = headers2["x-aisia-request-id"]
    explain(admin, rid2)
    for bad in (1.5, -0.1, "good", None, True):
        assert admin.post("/aisia/feedback", json={"request_id": rid2, "score": bad}).status_code == 422, bad
    assert admin.post("/aisia/feedback", content=b"not json").status_code == 400
    last = stats(admin)["fb-a"]
    assert last["count"] == after["fb-a"]["count"] + 1  # the second request's own outcome only
    assert last["quality"]["evidence"] == after["fb-a"]["quality"]["evidence"]  # no refused score counted


def test_explain_holds_ids_scores_and_reasons_but_no_prompt_text(client, admin):
    secret = "purple-elephant-7731 wants a haiku"
    _, headers, _ = chat(client, "auto/cheap", secret)
    r = admin.get("/aisia/explain")
    assert r.status_code == 200
    assert secret not in r.text and "purple-elephant" not in r.text
    rows = explain(admin, headers["x-aisia-request-id"])
    assert rows[0]["reason"] and rows[0]["candidates"]
    assert all("id" in c for c in rows[0]["candidates"])


# -- sessions --------------------------------------------------------------------------------------
@pytest.mark.parametrize("alias,pair,via", [
    ("test/lkgp", ("lk-a", "lk-b"), lambda session: {"extra_headers": {"x-aisia-session": session}}),
    ("test/lkgp-user", ("us-a", "us-b"), lambda session: {"user": session}),
], ids=["session header", "user field"])
def test_lkgp_keeps_each_session_on_its_last_good_deployment(client, upstreams, alias, pair, via):
    def ask(session):
        return chat(client, alias, **via(session))[0]

    first = ask("conv-x")
    other = pair[1] if first == pair[0] else pair[0]
    # Session y's first request fails over to the other deployment: that is y's last good one.
    upstreams[first].control(mode="error", status=500)
    try:
        assert ask("conv-y") == other
    finally:
        upstreams[first].control(mode="ok")
    assert [ask("conv-x") for _ in range(3)] == [first] * 3
    assert [ask("conv-y") for _ in range(3)] == [other] * 3


def test_reset_forgets_one_deployment(client, admin):
    _, headers, _ = chat(client, "auto/cheap")
    explain(admin, headers["x-aisia-request-id"])
    before = stats(admin)
    assert before["cheapo"]["count"] > 0
    r = admin.post("/admin/bandit/reset", json={"deployment_id": "cheapo"})
    assert r.status_code == 200, r.text
    after = stats(admin)
    assert after.get("cheapo", {"count": 0})["count"] == 0
    assert after["coder"]["count"] == before["coder"]["count"]
    assert admin.post("/admin/bandit/reset", json={}).status_code == 422
