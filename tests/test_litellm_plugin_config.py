"""A user's existing LiteLLM config with only the callback line added (and AISIA_POLICY naming a
team file that annotates a deployment and adds one alias) serves every shipped alias; an alias
colliding with a model name, or an invalid policy, leaves the proxy up with the alias refused (the
model keeps its name), or stops it at start-up with a located error when failing closed."""

from __future__ import annotations

import openai
import pytest

from proxy_harness import ProxyError, deployment, parse_reply, start_proxy, start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

SHIPPED = ("auto", "auto/coding", "auto/fast", "auto/cheap", "auto/offline", "auto/smart", "auto/lkgp")
CODING = "Write a Python function that parses a CSV file, with unit tests"

TEAM = """\
# yaml-language-server: $schema=../schemas/aisia-policy.schema.json
version: 1
deployments:
  coder-1:
    specialities:
      coding: null
aliases:
  team/support:
    description: Support questions, cheapest first.
    strategy: cost
"""


@pytest.fixture(scope="module")
def upstreams():
    running = start_upstreams([
        {"name": "gpt-east", "input_cost_per_1m": 2.5, "output_cost_per_1m": 10.0},
        {"name": "gpt-west", "input_cost_per_1m": 2.5, "output_cost_per_1m": 10.0},
        {"name": "coder", "input_cost_per_1m": 0.5, "output_cost_per_1m": 1.0},
        {"name": "mini", "input_cost_per_1m": 0.15, "output_cost_per_1m": 0.6},
        {"name": "onprem", "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0},
    ])
    yield {u.name: u for u in running}
    stop_upstreams(running)


def existing_config(upstreams) -> dict:
    """What a platform team already runs: two deployments behind one model name, a coding
    model, a small model, a self-hosted vLLM model (the one auto/offline keeps: every simulated
    upstream listens on loopback, which alone makes no deployment local), their own router
    settings."""
    return {
        "model_list": [
            deployment("gpt-4o", upstreams["gpt-east"], id="gpt-4o-east"),
            deployment("gpt-4o", upstreams["gpt-west"], id="gpt-4o-west"),
            deployment("deepseek-coder", upstreams["coder"], id="coder-1"),
            deployment("gpt-4o-mini", upstreams["mini"], id="mini-1"),
            deployment("llama-onprem", upstreams["onprem"], id="onprem-1", litellm_params={"model": "hosted_vllm/onprem"}),
        ],
        "router_settings": {"routing_strategy": "simple-shuffle", "num_retries": 1, "timeout": 30},
        "litellm_settings": {"drop_params": True},
    }


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, upstreams):
    work = tmp_path_factory.mktemp("existing")
    team = work / "team.yaml"
    team.write_text(TEAM)
    config = existing_config(upstreams)
    config["litellm_settings"]["callbacks"] = ["aisia_plugin.litellm.plugin"]  # the one added line
    config["environment_variables"] = {"AISIA_POLICY": str(team)}
    p = start_proxy(config, work)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(proxy):
    return openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0, timeout=30)


@pytest.mark.parametrize("alias", SHIPPED + ("team/support",))
def test_every_alias_is_served(client, alias):
    raw = client.chat.completions.with_raw_response.create(
        model=alias, messages=[{"role": "user", "content": "What is the capital of France?"}])
    completion = raw.parse()
    served_by = parse_reply(completion.choices[0].message.content)[0]
    assert served_by in ("gpt-east", "gpt-west", "coder", "mini", "onprem")
    assert completion.model == alias
    assert raw.headers["x-aisia-alias"] == alias
    assert raw.headers["x-litellm-model-id"] in ("gpt-4o-east", "gpt-4o-west", "coder-1", "mini-1", "onprem-1")
    if alias == "auto/offline":
        assert served_by == "onprem"


def test_the_users_models_keep_working_and_the_team_annotation_applies(client):
    r = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert parse_reply(r.choices[0].message.content)[0] in ("gpt-east", "gpt-west")
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(
            model="auto/coding", messages=[{"role": "user", "content": CODING}])
        assert raw.headers["x-litellm-model-id"] == "coder-1"  # the team file's coding specialist
    cheap = client.chat.completions.with_raw_response.create(
        model="team/support", messages=[{"role": "user", "content": "My invoice is wrong"}])
    assert cheap.headers["x-litellm-model-id"] == "mini-1"


def test_streaming_through_an_alias(client):
    chunks = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}], stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert parse_reply(text)[0] in ("gpt-east", "gpt-west", "coder", "mini", "onprem")


def test_an_alias_named_like_a_model_leaves_the_proxy_up_with_the_model_keeping_its_name(tmp_path, upstreams):
    config = existing_config(upstreams)
    config["model_list"].append(deployment("auto/fast", upstreams["mini"], id="my-fast"))
    config["litellm_settings"]["callbacks"] = ["aisia_plugin.litellm.plugin"]
    p = start_proxy(config, tmp_path, timeout_s=120)
    try:
        with openai.OpenAI(base_url=p.base_url, api_key=p.master_key, max_retries=0, timeout=30) as c:
            plain = c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
            assert parse_reply(plain.choices[0].message.content)[0] in ("gpt-east", "gpt-west")
            mine = c.chat.completions.with_raw_response.create(model="auto/fast",
                                                              messages=[{"role": "user", "content": "hi"}])
            assert mine.headers["x-litellm-model-id"] == "my-fast" and "x-aisia-alias" not in mine.headers
            with pytest.raises(openai.APIStatusError) as refused:
                c.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 503
        text = str(refused.value)
        assert "aliases.auto/fast" in text and "aliases.yaml:" in text and "model_name 'auto/fast'" in text
    finally:
        p.stop()


def test_fail_closed_stops_the_proxy_on_an_alias_named_like_a_model_with_both_names(tmp_path, upstreams):
    team = tmp_path / "team.yaml"
    team.write_text("version: 1\nproxy:\n  fail_closed: true\n")
    config = existing_config(upstreams)
    config["model_list"].append(deployment("auto/fast", upstreams["mini"], id="my-fast"))
    config["litellm_settings"]["callbacks"] = ["aisia_plugin.litellm.plugin"]
    with pytest.raises(ProxyError) as err:
        start_proxy(config, tmp_path, env={"AISIA_POLICY": str(team)}, timeout_s=60).stop()
    text = str(err.value)
    assert "exited" in text
    assert "aliases.auto/fast" in text and "aliases.yaml:" in text and "model_name 'auto/fast'" in text


def test_fail_closed_stops_the_proxy_on_an_invalid_policy_with_located_errors(tmp_path, upstreams):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\naliases:\n  team/x:\n    description: x\n    strategy: fastest\n")
    config = existing_config(upstreams)
    config["litellm_settings"]["callbacks"] = ["aisia_plugin.litellm.plugin"]
    with pytest.raises(ProxyError) as err:
        start_proxy(config, tmp_path, env={"AISIA_POLICY": str(bad), "AISIA_FAIL_CLOSED": "true"},
                    timeout_s=60).stop()
    assert f"{bad}:5:" in str(err.value) and "aliases.team/x.strategy" in str(err.value)
