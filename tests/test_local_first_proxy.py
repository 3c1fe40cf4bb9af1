"""Local-first with escalation through a real LiteLLM proxy (docs/local-first.md, issue 39.1):
a self-hosted deployment (``hosted_vllm/``, local by its provider) that returns token
log-probabilities when asked, and a cloud one, both simulated upstreams over HTTP; the real
``openai`` client. The local model is sure of itself on general prompts and unsure on math.

Checked: a confident local answer is returned as is (without the log-probabilities the client
did not ask for); an unsure one is escalated and the client gets the cloud answer only, with the
escalation in ``x-aisia-reason``, ``/aisia/metrics``, the explain log, the decision log, the
routing page's data, and as quality evidence against the local deployment; a failed escalation
keeps the local answer; streams follow ``streams`` (skip: routed as without local-first; local:
answered locally, never escalated)."""

from __future__ import annotations

import json
import time

import pytest

from proxy_harness import chat, deployment, start_proxy, stats, upstreams_fixture

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite

GENERAL = "Hello, how are you today?"
MATH = "Solve the equation 3x + 5 = 20 and compute the derivative of x^2."

# The local model costs more per token than the cloud one here, so that the cost strategy would
# pick the cloud one without local-first: what the local side changes is visible.
SPECS = [
    {"name": "gpu", "model": "llama-3b", "default_strength": 1.0, "strengths": {"math": 0.1}, "logprobs": True,
     "input_cost_per_1m": 2.0, "output_cost_per_1m": 4.0, "seed": 1},
    {"name": "cloud", "model": "big-model", "default_strength": 0.9, "input_cost_per_1m": 1.0,
     "output_cost_per_1m": 2.0, "seed": 2},
]

POLICY = """\
version: 1
aliases:
  test/local-first:
    description: local first, escalated below 0.75; streams skip local-first
    strategy: cost
    candidates: {models: [gpu-model, cloud-model]}
    local_first: {enabled: true}
  test/local-stream:
    description: local first; streams answered locally
    strategy: cost
    candidates: {models: [gpu-model, cloud-model]}
    local_first: {enabled: true, streams: local}
"""


upstreams = upstreams_fixture(SPECS)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    work = tmp_path_factory.mktemp("local-first")
    policy = work / "local-first.yaml"
    policy.write_text(POLICY + f"logging: {{decisions: {{path: {json.dumps(str(work / 'decisions.jsonl'))}}}}}\n")
    gpu = deployment("gpu", upstreams["gpu"], litellm_params={"model": "hosted_vllm/llama-3b"})
    gpu["model_name"] = "gpu-model"
    cloud = deployment("cloud", upstreams["cloud"])
    cloud["model_name"] = "cloud-model"
    config = {"model_list": [gpu, cloud],
              "router_settings": {"routing_strategy": "simple-shuffle", "num_retries": 2, "timeout": 30},
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"], "request_timeout": 60}}
    p = start_proxy(config, work, env={"AISIA_POLICY": str(policy)})
    yield p
    p.stop()


def calls(upstreams) -> dict:
    return {name: u.stats()["calls"] for name, u in upstreams.items()}


def wait_for(check, timeout_s=30.0):
    """check()'s value once truthy, or its last value when the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def metric(admin, alias, result) -> float:
    text = admin.get("/aisia/metrics").text
    for line in text.splitlines():
        if line.startswith("aisia_local_first_total{") and f'alias="{alias}"' in line and f'result="{result}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def explained(admin, request_id) -> list:
    r = admin.get("/aisia/explain", params={"limit": 50})
    assert r.status_code == 200, r.text
    body = r.json()
    entries = body.get("decisions", body) if isinstance(body, dict) else body
    return [e for e in entries if e.get("request_id") == request_id]


def test_a_confident_local_answer_is_returned_as_is(client, admin, upstreams):
    before = calls(upstreams)
    served, headers, completion = chat(client, "test/local-first", GENERAL)
    assert served == "gpu"
    reason = headers["x-aisia-reason"]
    assert reason.startswith("local-first: gpu kept, confidence "), reason
    assert ">= 0.75" in reason
    assert completion.choices[0].logprobs is None  # asked by the plugin, not by the client: removed
    after = calls(upstreams)
    assert (after["gpu"] - before["gpu"], after["cloud"] - before["cloud"]) == (1, 0)
    assert wait_for(lambda: metric(admin, "test/local-first", "kept") >= 1)


def test_logprobs_the_client_asked_for_are_kept(client):
    served, headers, completion = chat(client, "test/local-first", GENERAL, logprobs=True)
    assert served == "gpu" and "kept" in headers["x-aisia-reason"]
    assert completion.choices[0].logprobs is not None and completion.choices[0].logprobs.content


def test_an_unsure_local_answer_is_escalated_and_the_client_sees_the_cloud_answer_only(client, admin, upstreams,
                                                                                        proxy):
    gpu_signals = stats(admin).get("gpu", {}).get("quality", {}).get("evidence", {}).get("signal", 0)
    before = calls(upstreams)
    served, headers, completion = chat(client, "test/local-first", MATH)
    assert served == "cloud"  # the client's answer is the cloud one, and only it
    assert completion.choices[0].message.content.count("served-by=") == 1
    assert completion.model == "test/local-first"
    after = calls(upstreams)
    assert (after["gpu"] - before["gpu"], after["cloud"] - before["cloud"]) == (1, 1)  # both called once
    reason = headers["x-aisia-reason"]
    assert reason.startswith("local-first: gpu confidence "), reason
    assert "< 0.75" in reason and "escalated to cloud" in reason
    assert wait_for(lambda: metric(admin, "test/local-first", "escalated") >= 1)
    # the escalation is quality evidence against the local deployment
    assert wait_for(lambda: stats(admin)["gpu"]["quality"]["evidence"]["signal"] > gpu_signals), stats(admin)["gpu"]
    # the headers' request id is the escalation's: its decision left the local candidate out
    rid = headers["x-aisia-request-id"]
    entries = wait_for(lambda: explained(admin, rid))
    assert entries and entries[0]["deployment_id"] == "cloud"
    left = {c["id"]: c.get("excluded") for c in entries[0]["candidates"]}
    assert "escalated past the local answer" in str(left.get("gpu")), entries[0]["candidates"]
    # the decision log: the local answer's record, linked to the escalation's own request id
    def logged():
        path = proxy.workdir / "decisions.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [r for r in map(json.loads, lines) if r.get("type") == "local_first" and r["result"] == "escalated"
                and r["escalation_request_id"] == rid]
    record = wait_for(logged)
    assert record and record[0]["deployment"] == "gpu" and record[0]["escalated_to"] == "cloud", record
    assert record[0]["confidence"]["value"] < 0.75 and record[0]["confidence"]["token_count"] > 0
    # the routing page shows the local attempt's note before its decision's reason
    page = admin.get("/aisia/ui/data")
    assert page.status_code == 200, page.text
    notes = [e["reason"] for e in page.json()["recent"] if e["deployment"] == "gpu"]
    assert any(n.startswith("local-first: gpu confidence ") and "escalated to cloud" in n for n in notes), notes


def test_when_the_escalation_fails_the_client_keeps_the_local_answer(client, admin, upstreams):
    with upstreams["cloud"].broken(mode="error", status=500):
        before = calls(upstreams)
        served, headers, _ = chat(client, "test/local-first", MATH + " Again.")
        after = calls(upstreams)
    assert served == "gpu"  # the escalation never falls back to a local candidate
    assert "the escalation failed, the local answer is kept" in headers["x-aisia-reason"], headers["x-aisia-reason"]
    assert after["gpu"] - before["gpu"] == 1 and after["cloud"] - before["cloud"] >= 1
    assert wait_for(lambda: metric(admin, "test/local-first", "escalation_failed") >= 1)


def test_a_stream_skips_local_first_by_default(client, upstreams):
    before = calls(upstreams)
    stream = client.chat.completions.create(model="test/local-first", stream=True,
                                            messages=[{"role": "user", "content": MATH}])
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert "served-by=cloud" in text  # the cost strategy over every candidate: the cheaper cloud one
    after = calls(upstreams)
    assert (after["gpu"] - before["gpu"], after["cloud"] - before["cloud"]) == (0, 1)


def test_a_stream_under_streams_local_is_answered_locally_and_never_escalated(client, upstreams):
    before = calls(upstreams)
    stream = client.chat.completions.create(model="test/local-stream", stream=True,
                                            messages=[{"role": "user", "content": MATH}])
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert "served-by=gpu" in text
    after = calls(upstreams)
    assert (after["gpu"] - before["gpu"], after["cloud"] - before["cloud"]) == (1, 0)
