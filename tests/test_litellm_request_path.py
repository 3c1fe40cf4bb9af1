"""LiteLLM's own semantics on alias traffic, through a real proxy with the features operators
turn on (issue 18): a production-like config (a load-balanced group over two regions, tags with
``enable_tag_filtering``, rpm/tpm limits under ``usage-based-routing-v2``, pre-call checks,
``allowed_fails``/``cooldown_time``, fallbacks and context-window fallbacks, a
``model_group_alias``, another callback next to the plugin's line), simulated upstreams over
HTTP and the real ``openai`` client.

What is checked: a request LiteLLM would refuse is the caller's 400 and never counts against a
deployment; LiteLLM's tag, limit and context-window checks act on the ranked candidates the
plugin hands it (the next one serves); fallbacks between aliases get a fresh attempt budget;
requests sharing a client-sent call id stay apart."""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import openai
import pytest

from proxy_harness import chat, deployment, start_proxy, start_upstreams, stats, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

PLAIN = "Hello, how are you today?"

# name -> (model_name, litellm_params overrides, input $/1M)
DEPLOYMENTS = {
    "us4o": ("gpt-4o", {"model": "openai/gpt-4o", "tpm": 450000, "rpm": 500, "tags": ["us", "prod"]}, 5.0),
    "eu4o": ("gpt-4o", {"model": "openai/gpt-4o", "tpm": 300000, "rpm": 300, "tags": ["eu", "prod"]}, 5.0),
    "mini": ("gpt-4o-mini", {"model": "openai/gpt-4o-mini", "rpm": 6, "tags": ["us"]}, 0.15),
    "claude": ("claude-3-5-sonnet", {"model": "openai/claude-3-5-sonnet-20240620", "tags": ["eu"]}, 3.0),
    "deepseek": ("deepseek-chat", {"model": "openai/deepseek-chat"}, 0.27),
    "gpt35": ("gpt-3.5-turbo", {"model": "openai/gpt-3.5-turbo", "tags": ["us"]}, 0.5),
    "tiny": ("tiny-tpm", {"tpm": 300}, 0.01),
    "roomy": ("roomy", {}, 1.0),
    "m-a": ("m-a", {}, 0.1), "m-b": ("m-b", {}, 0.2), "m-c": ("m-c", {}, 0.3), "m-d": ("m-d", {}, 0.4),
    "fail-a": ("fail-a", {}, 0.1), "fail-b": ("fail-b", {}, 0.2),
    "bk-bad": ("bk-bad", {}, 0.1), "bk-good": ("bk-good", {}, 0.2),
    "plain-backup": ("plain-backup", {}, 1.0),
    "cid-a": ("cid-a", {}, 0.1), "cid-b": ("cid-b", {}, 0.2),
    "wild": ("auto/*", {"model": "openai/*"}, 1.0),  # a wildcard deployment under the aliases' prefix
    "spec": ("spec-base", {}, 0.1),  # sends openai/gpt-4o for coding prompts (the policy's speciality)
}

POLICY = """\
version: 1
deployments:
  spec: {specialities: {coding: openai/gpt-4o}}
aliases:
  test/special:
    description: a deployment with a specialised model for coding
    strategy: cost
    candidates: {models: [spec-base]}
  test/malformed:
    description: four healthy deployments, malformed requests
    candidates: {models: [m-a, m-b, m-c, m-d]}
  test/tags:
    description: the three cheapest candidates carry no eu tag
    strategy: cost
    candidates: {models: [gpt-4o, claude-3-5-sonnet, deepseek-chat, gpt-3.5-turbo, gpt-4o-mini]}
  test/tpm:
    description: the cheapest candidate has tpm 300
    strategy: cost
    candidates: {models: [tiny-tpm, roomy]}
  test/window:
    description: a 16k model cheaper than a 128k one
    strategy: cost
    candidates: {models: [gpt-3.5-turbo, gpt-4o]}
  test/small:
    description: the 16k model alone (its context-window fallback is test/window)
    strategy: cost
    candidates: {models: [gpt-3.5-turbo]}
  test/fails:
    description: every candidate fails (fallback to test/backup)
    strategy: cost
    candidates: {models: [fail-a, fail-b]}
    failover: {attempts: 1}
  test/backup:
    description: its first candidate fails too
    strategy: cost
    candidates: {models: [bk-bad, bk-good]}
    failover: {attempts: 1}
  test/fails-to-plain:
    description: every candidate fails (fallback to a plain model group)
    strategy: cost
    candidates: {models: [fail-a, fail-b]}
    failover: {attempts: 1}
  test/callid:
    description: concurrent requests sharing one client call id
    strategy: cost
    candidates: {models: [cid-a, cid-b]}
"""

ALIAS_FALLBACKS = [{"test/fails": ["test/backup"]}, {"test/fails-to-plain": ["plain-backup"]},
                   {"gpt-4o": ["claude-3-5-sonnet"]}]


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([{"name": n, "input_cost_per_1m": p, "output_cost_per_1m": 2 * p}
                               for n, (_, _, p) in DEPLOYMENTS.items()])
    yield {u.name: u for u in running}
    stop_upstreams(running)


def production_like_config(upstreams) -> dict:
    model_list = []
    for name, (group, params, _) in DEPLOYMENTS.items():
        d = deployment(name, upstreams[name], litellm_params=params)
        d["model_name"] = group
        model_list.append(d)
    return {
        "model_list": model_list,
        "router_settings": {
            "routing_strategy": "usage-based-routing-v2", "num_retries": 2, "allowed_fails": 3,
            "cooldown_time": 30, "timeout": 30, "enable_pre_call_checks": True, "enable_tag_filtering": True,
            "fallbacks": ALIAS_FALLBACKS, "context_window_fallbacks": [{"test/small": ["test/window"]}],
            "model_group_alias": {"gpt4": "gpt-4o"},
        },
        "litellm_settings": {"callbacks": ["prometheus", "aisia_plugin.litellm.plugin"], "drop_params": True,
                             "request_timeout": 60},
    }


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    work = tmp_path_factory.mktemp("request-path")
    policy = work / "team.yaml"
    policy.write_text(POLICY)
    p = start_proxy(production_like_config(upstreams), work, env={"AISIA_POLICY": str(policy)})
    yield p
    p.stop()


def settled_count(admin, ids, expected, timeout_s=30.0) -> int:
    """The learned outcome count over `ids` once it reaches `expected` (LiteLLM logs successes in
    the background, after the response), or what it is when the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = stats(admin)
        total = sum(s.get(i, {}).get("count", 0) for i in ids)
        if total >= expected or time.monotonic() > deadline:
            return total
        time.sleep(0.1)


def failures_of(admin, ids) -> dict:
    """(error rate, breaker state) of each deployment, as far as anything was learned of it."""
    s = stats(admin)
    return {i: (s.get(i, {}).get("error_rate", 0.0), s.get(i, {}).get("breaker", "CLOSED")) for i in ids}


# -- A. what the caller got wrong never counts against a deployment --------------------------------
def test_a_malformed_content_part_is_the_callers_400_and_no_deployment_is_blamed(client, admin, upstreams):
    deps = ["m-a", "m-b", "m-c", "m-d"]
    for _ in range(8):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="test/malformed",
                                           messages=[{"role": "user", "content": [{"type": "weird"}]}])
        assert "messages[0].content[0].type" in str(err.value)
    assert sum(upstreams[d].stats()["calls"] for d in deps) == 0  # nothing was sent anywhere
    served = [chat(client, "test/malformed")[0] for _ in range(6)]
    assert set(served) <= set(deps) and len(served) == 6
    after = failures_of(admin, deps)
    assert all(f == 0 and state == "CLOSED" for f, state in after.values()), after


def test_a_message_that_is_not_an_object_is_a_400_naming_it(proxy):
    r = httpx.post(proxy.base_url + "/chat/completions", headers=proxy.headers, timeout=30,
                   json={"model": "test/malformed", "messages": [{"role": "user", "content": "hi"}, "oops"]})
    assert r.status_code == 400, r.text
    assert "messages[1]" in r.text


# -- B. LiteLLM's filters and limits act on the ranked candidates ----------------------------------
def test_tagged_requests_are_served_by_the_deployments_the_tags_allow(client, admin, upstreams):
    allowed = {"eu4o", "claude"}
    others = ["us4o", "deepseek", "gpt35", "mini"]
    served = []
    for _ in range(12):
        who, headers, _ = chat(client, "test/tags", extra_body={"metadata": {"tags": ["eu"]}})
        served.append(who)
        assert headers["x-litellm-model-id"] in allowed
        # LiteLLM's tag filter kept the best allowed candidate of the ranking: no retry.
        assert headers["x-litellm-attempted-retries"] == "0"
    assert set(served) <= allowed
    # The plain group is served the same way (LiteLLM's own behaviour, unchanged).
    assert chat(client, "gpt-4o", extra_body={"metadata": {"tags": ["eu"]}})[0] == "eu4o"
    assert all(f == 0 for f, _ in failures_of(admin, others).values())


def test_a_deployment_at_its_tpm_limit_is_not_a_candidate(client, admin, upstreams):
    if time.gmtime().tm_sec > 40:  # LiteLLM's counters are per minute: stay within one
        time.sleep(61 - time.gmtime().tm_sec)
    text = "Summarise the following notes in two sentences. " * 6  # about 60 tokens
    served = [chat(client, "test/tpm", text)[0] for _ in range(8)]
    assert 1 <= served.count("tiny") <= 6, served
    assert served.count("roomy") == 8 - served.count("tiny")
    assert failures_of(admin, ["tiny"])["tiny"][0] == 0


def test_a_prompt_over_a_context_window_goes_to_a_deployment_that_holds_it(client, admin):
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 2200  # about 22,000 tokens
    who, headers, _ = chat(client, "test/window", long_prompt)
    assert who in {"us4o", "eu4o"}
    r = admin.get("/aisia/explain", params={"limit": 200})
    rows = [e for e in r.json()["decisions"] if e["request_id"] == headers["x-aisia-request-id"]]
    assert rows, r.text
    excluded = {c["id"]: c.get("excluded") for c in rows[0]["candidates"]}
    assert "context window" in (excluded["gpt35"] or ""), excluded
    # A short prompt still goes to the cheaper 16k model.
    assert chat(client, "test/window")[0] == "gpt35"


def test_context_window_fallbacks_from_an_alias(client):
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 2200
    who, _, _ = chat(client, "test/small", long_prompt)
    assert who in {"us4o", "eu4o"}


# -- C. fallbacks get their own attempt budget -------------------------------------------------------
def test_an_alias_falls_back_to_another_alias_with_a_fresh_attempt_budget(client, upstreams):
    with upstreams["fail-a"].broken(mode="error", status=500), upstreams["fail-b"].broken(mode="error", status=500), \
            upstreams["bk-bad"].broken(mode="error", status=500):
        for _ in range(2):
            who, _, _ = chat(client, "test/fails")
            assert who == "bk-good"


def test_an_alias_falls_back_to_another_alias_without_retries(client, upstreams):
    calls = {n: upstreams[n].stats()["calls"] for n in ("fail-a", "fail-b", "bk-bad", "bk-good")}
    with upstreams["fail-a"].broken(mode="error", status=500), upstreams["fail-b"].broken(mode="error", status=500):
        who, _, _ = chat(client, "test/fails", extra_body={"num_retries": 0})
    assert who == "bk-bad"  # the fallback alias's own first choice (healthy here)
    after = {n: upstreams[n].stats()["calls"] - c for n, c in calls.items()}
    # The client's num_retries (0) is kept: one attempt on test/fails, then the fallback's.
    assert after == {"fail-a": 1, "fail-b": 0, "bk-bad": 1, "bk-good": 0}, after


def test_an_alias_falls_back_to_a_plain_model_group(client, upstreams):
    with upstreams["fail-a"].broken(mode="error", status=500), upstreams["fail-b"].broken(mode="error", status=500):
        who, _, _ = chat(client, "test/fails-to-plain")
    assert who == "plain-backup"


# -- D. per-request state is the plugin's own ------------------------------------------------------
def test_requests_sharing_a_client_call_id_stay_apart(proxy, admin):
    ids = ["cid-a", "cid-b"]
    before = settled_count(admin, ids, 0)

    def one(_):
        r = httpx.post(proxy.base_url + "/chat/completions", timeout=60,
                       headers={**proxy.headers, "x-litellm-call-id": "same-id-for-everyone"},
                       json={"model": "test/callid", "messages": [{"role": "user", "content": PLAIN}]})
        return r.status_code, r.headers.get("x-aisia-request-id")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(64)))
    assert [s for s, _ in results] == [200] * 64
    assert len({rid for _, rid in results}) == 64
    assert settled_count(admin, ids, before + 64) == before + 64


# -- G. other APIs and names ---------------------------------------------------------------------
def test_an_embeddings_request_to_an_alias_is_a_clear_400(proxy, upstreams):
    before = sum(u.stats()["calls"] for u in upstreams.values())
    r = httpx.post(proxy.base_url + "/embeddings", headers=proxy.headers, timeout=30,
                   json={"model": "test/malformed", "input": "hello"})
    assert r.status_code == 400, r.text
    assert "embedding" in r.json()["error"]["message"]
    assert sum(u.stats()["calls"] for u in upstreams.values()) == before


def test_an_unknown_auto_name_a_wildcard_deployment_serves_goes_through(client, upstreams):
    who, headers, _ = chat(client, "auto/not-an-alias")
    assert who == "wild"
    assert "x-aisia-alias" not in headers
    # The wildcard deployment is no alias's candidate: the shipped `auto` never sends to it.
    assert all(chat(client, "auto")[0] != "wild" for _ in range(6))


def test_a_specialised_model_is_billed_at_its_own_price(client):
    import litellm

    coding = "Write a Python function that merges two sorted lists, with unit tests"
    raw = client.chat.completions.with_raw_response.create(
        model="test/special", messages=[{"role": "user", "content": coding}])
    usage = raw.parse().usage
    price = litellm.model_cost["gpt-4o"]
    expected = usage.prompt_tokens * price["input_cost_per_token"] + usage.completion_tokens * price["output_cost_per_token"]
    assert raw.headers["x-litellm-model-id"] == "spec"
    assert float(raw.headers["x-litellm-response-cost"]) == pytest.approx(expected, rel=1e-6)
    # A prompt of no domain is the base deployment's own model, at its own price.
    raw = client.chat.completions.with_raw_response.create(
        model="test/special", messages=[{"role": "user", "content": PLAIN}])
    usage = raw.parse().usage
    base = (usage.prompt_tokens * 0.1 + usage.completion_tokens * 0.2) / 1e6
    assert float(raw.headers["x-litellm-response-cost"]) == pytest.approx(base, rel=1e-6)
