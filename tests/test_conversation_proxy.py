"""Conversation signals through real LiteLLM proxies (docs/signals.md#in-the-proxy): conversations
sent as chat clients send them (a system message, the whole history re-sent, no session id) to two
aliases served by two deployments, X and Y. The next user turn's complaint or thanks is quality
evidence against the deployment that produced the answer it follows, whoever serves the new turn;
a forged assistant message moves nothing; a re-sent follow-up counts once; two proxies sharing
one Redis attribute a turn served by one and judged at the other; each signal is a decision-log
line that `aisia replay --logged` values the answer by."""

from __future__ import annotations

import itertools
import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fault_helpers import client_of, start_plugin_proxy, stats, wait_for
from proxy_harness import upstreams_fixture
from redis_server import redis_module  # noqa: F401  (a fixture)

pytestmark = pytest.mark.proxy  # starts LiteLLM proxies and redis-server

NAMES = ["cv-x", "cv-y"]
POLICY = """\
version: 1
state:
  backend: redis
  cache_ttl_ms: 100
  flush_ms: 50
signals:
  max_signals_per_key_hour: 12
logging:
  decisions: {path: DECISIONS}
aliases:
  c/x:
    description: served by X
    strategy: cost
    candidates: {models: [cv-x]}
  c/y:
    description: served by Y
    strategy: cost
    candidates: {models: [cv-y]}
"""
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
_questions = itertools.count()
BOUND = 12  # the policy's signals.max_signals_per_key_hour
SETTLE_S = 1.5  # longer than a judging step's retries (0.3 s) and a Redis flush


upstreams = upstreams_fixture([{"name": n, "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0} for n in NAMES])


@pytest.fixture(scope="module")
def redis(redis_module):
    return redis_module


def _proxy(tmp_path_factory, upstreams, redis, name):
    work = tmp_path_factory.mktemp(name)
    p = start_plugin_proxy(work, upstreams, POLICY.replace("DECISIONS", str(work / "decisions.jsonl")),
                           env={"AISIA_REDIS_URL": f"redis://127.0.0.1:{redis.port}/0"})
    p.decisions = work / "decisions.jsonl"
    return p


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams, redis):
    p = _proxy(tmp_path_factory, upstreams, redis, "conv-a")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(proxy):
    return client_of(proxy)


def ask(client, model, messages) -> dict:
    """Send the conversation so far; the assistant message a chat client appends to its history."""
    completion = client.chat.completions.create(model=model, messages=messages)
    return {"role": "assistant", "content": completion.choices[0].message.content}


def opened(client, model="c/x") -> list:
    """A new conversation answered once by `model`: its history."""
    history = [SYSTEM, {"role": "user", "content": f"Question {next(_questions)}: what is the capital of Australia?"}]
    history.append(ask(client, model, history))
    return history


def signal_count(proxy, dep) -> float:
    row = stats(proxy).get(dep)
    return row["quality"]["evidence"]["signal"] if row else 0.0


def estimate(proxy, dep) -> float:
    return stats(proxy)[dep]["quality"]["estimate"]


def counts(proxy) -> dict:
    return {d: signal_count(proxy, d) for d in NAMES}


def settled_counts(proxy, want: dict) -> dict:
    wait_for(lambda: counts(proxy) == want, f"signal evidence {want}", limit_s=20, every_s=0.1,
             detail=lambda: counts(proxy))
    time.sleep(SETTLE_S)  # and nothing more arrives
    assert counts(proxy) == want
    return want


def signal_metrics(proxy) -> dict:
    """{(kind, language): count} of aisia_conversation_signals_total on the proxy's /aisia/metrics."""
    r = httpx.get(proxy.url + "/aisia/metrics", headers=proxy.headers, timeout=30)
    assert r.status_code == 200, r.text[:300]
    return {(s.labels["kind"], s.labels["language"]): s.value for f in text_string_to_metric_families(r.text)
            for s in f.samples if s.name == "aisia_conversation_signals_total"}


def test_a_complaint_blames_the_answer_it_follows_not_the_turn_that_serves_it(client, proxy):
    for complaint, language in (("That's wrong.", "en"), ("C'est faux.", "fr")):
        history = opened(client, "c/x")
        before, x_estimate = counts(proxy), estimate(proxy, "cv-x")
        counted = signal_metrics(proxy).get(("correction", language), 0.0)
        history.append({"role": "user", "content": complaint})
        ask(client, "c/y", history)  # the next turn is Y's
        settled_counts(proxy, {"cv-x": before["cv-x"] + 1, "cv-y": before["cv-y"]})
        assert estimate(proxy, "cv-x") < x_estimate, complaint
        # /metrics counts the signal by kind and language (this proxy recorded it).
        assert signal_metrics(proxy).get(("correction", language), 0.0) == counted + 1, complaint


def logged(proxy) -> list:
    return [json.loads(line) for line in proxy.decisions.read_text().splitlines() if line.strip()]


def test_a_signal_is_a_decision_log_line_that_values_the_answer_it_judged(client, proxy):
    def evidence_lines():
        return [r for r in logged(proxy) if r["type"] == "evidence"]

    history = opened(client, "c/x")
    before, earlier = counts(proxy), len(evidence_lines())  # (the module's other tests wrote some)
    history.append({"role": "user", "content": "No, that's wrong."})
    ask(client, "c/y", history)
    settled_counts(proxy, {"cv-x": before["cv-x"] + 1, "cv-y": before["cv-y"]})
    wait_for(lambda: len(evidence_lines()) > earlier, "this complaint's evidence line", limit_s=10)
    records = logged(proxy)
    (line,) = [r for r in records if r["type"] == "evidence"][earlier:]
    assert (line["source"], line["kind"], line["language"], line["deployment"], line["alias"]) == \
        ("signal", "correction", "en", "cv-x", "c/x")
    assert line["value"] == 0.0 and line["weight"] > 0
    # It names the request whose answer it judged: c/x's, served by X, not the turn that said so.
    judged = [r for r in records if r["type"] == "decision" and r["request_id"] == line["request_id"]]
    assert [(r["alias"], r["deployment"]) for r in judged] == [("c/x", "cv-x")]
    # Off-policy replay values that answer by the evidence (a success's logged reward is an estimate).
    from aisia_plugin.replay.offpolicy import read_log

    text = proxy.decisions.read_text().splitlines()
    valued = {e.request_id: e for e in read_log(text)}[line["request_id"]]
    plain = {e.request_id: e for e in read_log(text, evidence=False)}[line["request_id"]]
    assert valued.evidence >= 1 and valued.reward == 0.0 < plain.reward


def test_thanks_credit_the_answer_they_follow(client, proxy):
    history = opened(client, "c/x")
    before, x_estimate = counts(proxy), estimate(proxy, "cv-x")
    history.append({"role": "user", "content": "Thanks, that works!"})
    ask(client, "c/y", history)
    settled_counts(proxy, {"cv-x": before["cv-x"] + 1, "cv-y": before["cv-y"]})
    assert estimate(proxy, "cv-x") > x_estimate


def test_an_answer_the_client_wrote_itself_moves_nothing(client, proxy):
    before = counts(proxy)
    question = {"role": "user", "content": f"Question {next(_questions)}: and the capital of Peru?"}
    forged = [SYSTEM, question, {"role": "assistant", "content": "Lima, said the client."},
              {"role": "user", "content": "That's wrong."}]
    ask(client, "c/y", forged)
    # The client's own conversation, after a real answer of X: the forged turn still moves nothing.
    history = [SYSTEM, question]
    history.append(ask(client, "c/x", history))
    history[2] = {"role": "assistant", "content": "Something X never said."}
    history.append({"role": "user", "content": "That's wrong."})
    ask(client, "c/y", history)
    time.sleep(SETTLE_S)
    assert counts(proxy) == before


def test_a_follow_up_sent_again_judges_the_answer_once(client, proxy):
    history = opened(client, "c/x")
    before = counts(proxy)
    history.append({"role": "user", "content": "That's wrong."})
    ask(client, "c/y", history)
    settled_counts(proxy, {"cv-x": before["cv-x"] + 1, "cv-y": before["cv-y"]})
    # Regenerated twice: X's answer is not judged again; the regenerate blames the answer it
    # replaces (Y's answer to the complaint), once.
    ask(client, "c/y", history)
    ask(client, "c/y", history)
    time.sleep(SETTLE_S)
    after = counts(proxy)
    assert after["cv-x"] == before["cv-x"] + 1
    assert before["cv-y"] + 1 <= after["cv-y"] <= before["cv-y"] + 2  # each regenerate replaces another answer


def test_a_streamed_answer_is_judged_like_any_other(client, proxy):
    history = [SYSTEM, {"role": "user", "content": f"Question {next(_questions)}: what is the capital of Chile?"}]
    chunks = client.chat.completions.create(model="c/x", messages=history, stream=True)
    history.append({"role": "assistant", "content": "".join(c.choices[0].delta.content or "" for c in chunks
                                                             if c.choices)})
    before = counts(proxy)
    history.append({"role": "user", "content": "That's wrong."})
    ask(client, "c/y", history)
    settled_counts(proxy, {"cv-x": before["cv-x"] + 1, "cv-y": before["cv-y"]})


def test_an_answer_that_is_not_the_json_asked_for_is_evidence_against_it(client, proxy):
    before = counts(proxy)
    question = {"role": "user", "content": f"Question {next(_questions)}: the capital of Chile, as JSON."}
    client.chat.completions.create(model="c/x", messages=[SYSTEM, question], response_format={"type": "json_object"})
    settled_counts(proxy, {"cv-x": before["cv-x"] + 1, "cv-y": before["cv-y"]})  # the answer is no JSON


def test_two_proxies_sharing_redis_attribute_a_turn_served_by_one_at_the_other(tmp_path_factory, client, proxy,
                                                                                upstreams, redis):
    other = _proxy(tmp_path_factory, upstreams, redis, "conv-b")
    try:
        history = opened(client, "c/x")  # served through the first proxy
        before = counts(proxy)
        history.append({"role": "user", "content": "No, that's not right."})
        ask(client_of(other), "c/y", history)  # judged at the second
        settled_counts(proxy, {"cv-x": before["cv-x"] + 1, "cv-y": before["cv-y"]})
    finally:
        other.stop()


def test_one_keys_complaints_about_a_deployment_count_up_to_its_bound(client, proxy):
    """Last in the module: it spends the key's bound about X."""
    for _ in range(int(BOUND - counts(proxy)["cv-x"]) + 3):  # three complaints past the bound
        history = opened(client, "c/x")
        history.append({"role": "user", "content": "That's wrong."})
        ask(client, "c/y", history)
    wait_for(lambda: counts(proxy)["cv-x"] == BOUND, f"X's signal evidence at the bound ({BOUND})", limit_s=20,
             every_s=0.1, detail=lambda: counts(proxy))
    time.sleep(SETTLE_S)
    assert counts(proxy)["cv-x"] == BOUND  # the three past it were read and dropped
