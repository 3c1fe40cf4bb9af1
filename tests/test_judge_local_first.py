"""The judge grades what a user read (docs/quality.md): through a real proxy with a local-first
alias, an unsure local answer escalated past is never offered to the judge (the cloud answer the
client got is), and a local answer kept is (found by a review: both answers were graded)."""

from __future__ import annotations

import os
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402

pytestmark = pytest.mark.proxy


_LF_SPECS = [
    {"name": "gpu", "model": "llama-3b", "default_strength": 1.0, "strengths": {"math": 0.1}, "logprobs": True,
     "input_cost_per_1m": 2.0, "output_cost_per_1m": 4.0, "seed": 1},
    {"name": "cloud", "model": "big-model", "default_strength": 0.9, "input_cost_per_1m": 1.0,
     "output_cost_per_1m": 2.0, "seed": 2},
]


@pytest.fixture(scope="module")
def lf_upstreams():
    from proxy_harness import start_upstreams, stop_upstreams

    running = start_upstreams(_LF_SPECS)
    yield {u.name: u for u in running}
    stop_upstreams(running)


@pytest.fixture(scope="module")
def lf_judge():
    from test_judge_router import FakeJudge

    fake = FakeJudge()  # records the judge requests it receives; answers {"score": 2}
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, lf_upstreams, lf_judge):
    from proxy_harness import deployment, start_proxy

    work = tmp_path_factory.mktemp("judge-local-first")
    policy = work / "policy.yaml"
    policy.write_text("version: 1\n"
                      "aliases:\n"
                      "  test/local-first:\n"
                      "    description: local first, escalated below 0.75\n"
                      "    strategy: cost\n"
                      "    candidates: {models: [gpu-model, cloud-model]}\n"
                      "    local_first: {enabled: true}\n"
                      "quality:\n"
                      "  judge: {deployment: judge-model, sample_rate: 1.0, timeout_s: 10}\n")
    gpu = deployment("gpu", lf_upstreams["gpu"], litellm_params={"model": "hosted_vllm/llama-3b"})
    gpu["model_name"] = "gpu-model"
    cloud = deployment("cloud", lf_upstreams["cloud"])
    cloud["model_name"] = "cloud-model"
    judge = {"model_name": "judge-model", "model_info": {"id": "judge-1"},
             "litellm_params": {"model": "openai/grader-v1", "api_base": lf_judge.base_url, "api_key": "sk-fake",
                                "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}}
    config = {"model_list": [gpu, cloud, judge],
              "router_settings": {"routing_strategy": "simple-shuffle", "num_retries": 2, "timeout": 30},
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"], "request_timeout": 60}}
    p = start_proxy(config, work, env={"AISIA_POLICY": str(policy)})
    yield p
    p.stop()


def _judge_calls(admin) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(admin.get("/aisia/metrics").text):
        if family.name == "aisia_judge_calls":
            total += sum(s.value for s in family.samples if s.name == "aisia_judge_calls_total")
    return total


@pytest.mark.proxy
def test_a_local_answer_escalated_past_is_not_offered_to_the_judge(client, admin, lf_judge):
    """The spec: the judge grades alias answers 'after they were sent'; served_answer: 'the
    judge grades what a user read'. An unsure local answer is escalated: the client gets the
    cloud answer only (escalation.py marks the local one as never seen: turn_noted). The judge is
    offered both: two judge calls for one answer sent (sample_rate 1)."""
    from proxy_harness import chat

    before = _judge_calls(admin)
    served, headers, _ = chat(client, "test/local-first",
                              "Solve the equation 3x + 5 = 20 and compute the derivative of x^2.")
    assert served == "cloud" and "escalated to cloud" in headers["x-aisia-reason"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _judge_calls(admin) - before < 2:
        time.sleep(0.2)
    time.sleep(1.0)
    quoted = [r["messages"][1]["content"].split("<<answer-")[1] for r in lf_judge.requests]
    graded_local = [q for q in quoted if "served-by=gpu" in q]
    assert _judge_calls(admin) - before == 1 and not graded_local, \
        f"one answer was sent, {_judge_calls(admin) - before:.0f} were judged; the judge graded the local answer " \
        f"the client never saw: {graded_local[:1]}"



def _graded_since(lf_judge, before: int, admin, calls_before: float, expected: int) -> list:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _judge_calls(admin) - calls_before < expected:
        time.sleep(0.2)
    time.sleep(1.0)
    return [r["messages"][1]["content"].split("<<answer-")[1] for r in lf_judge.requests[before:]]


def test_a_local_answer_kept_is_offered_to_the_judge(client, admin, lf_judge):
    from proxy_harness import chat

    before, calls = len(lf_judge.requests), _judge_calls(admin)
    served, headers, _ = chat(client, "test/local-first", "Summarise the plot of a short story about a lighthouse.")
    assert served == "gpu" and "kept" in headers["x-aisia-reason"], headers["x-aisia-reason"]
    graded = _graded_since(lf_judge, before, admin, calls, 1)
    assert _judge_calls(admin) - calls == 1 and len(graded) == 1 and "served-by=gpu" in graded[0]
