"""Filtering by what the request needs, through a real proxy (issue 39, acceptance 2;
docs/capabilities.md): an image request, a tools request and a JSON-schema request to `auto` reach
only the deployments that can take them, on a config mixing capable and incapable ones, whose
capabilities come from LiteLLM's model map (`openai/gpt-3.5-turbo`, `openai/gpt-4o`, pointed at
simulated upstreams) and from annotations (the policy's `deployments:` and `model_info.aisia`);
when no candidate can, the client gets the documented 400, no upstream is called and no breaker
moves."""

from __future__ import annotations

import openai
import pytest

from proxy_harness import deployment, start_proxy, stats, upstreams_fixture

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy

# name, the model the upstream reports (LiteLLM's model is openai/<it>), price per 1M tokens.
UPSTREAMS = [{"name": n, "model": m, "input_cost_per_1m": c, "output_cost_per_1m": c} for n, m, c in (
    ("cap-35", "gpt-3.5-turbo", 0.5),     # LiteLLM's map: tools, no vision, no response schema
    ("cap-blind", "fake-small", 0.1),    # unknown to LiteLLM; model_info.aisia: none of the three
    ("cap-4o", "gpt-4o", 5.0),           # LiteLLM's map: vision, tools, response schema
    ("cap-big", "fake-big", 2.0))]       # unknown to LiteLLM; the policy's deployments: all three

POLICY = """\
version: 1
aliases:
  auto:
    strategy: ucb1
    candidates: {models: [cap-35, cap-blind, cap-4o, cap-big]}
  auto/text:
    description: only text models
    strategy: ucb1
    candidates: {models: [cap-35, cap-blind]}
deployments:
  cap-big: {capabilities: {vision: true, function_calling: true, response_schema: true}}
"""

IMAGE = [{"role": "user", "content": [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"
                                                 "AAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}}]}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]

upstreams = upstreams_fixture(UPSTREAMS)


@pytest.fixture(scope="module")
def proxy(upstreams, tmp_path_factory):
    work = tmp_path_factory.mktemp("capabilities")
    (work / "policy.yaml").write_text(POLICY)
    models = []
    for name, up in upstreams.items():
        extra = {"aisia": {"capabilities": {"vision": False, "function_calling": False, "response_schema": False}}} \
            if name == "cap-blind" else {}
        models.append(deployment(name, up, **extra))
    p = start_proxy({"model_list": models, "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}},
                    work / "proxy", env={"AISIA_POLICY": str(work / "policy.yaml")})
    yield p
    p.stop()


def served_by(client, alias: str, n: int, **request) -> list[str]:
    """The deployment (x-litellm-model-id) that served each of `n` requests."""
    out = []
    for _ in range(n):
        raw = client.chat.completions.with_raw_response.create(model=alias, **request)
        raw.parse()
        out.append(raw.headers["x-litellm-model-id"])
    return out


def test_a_text_request_reaches_every_candidate(client):
    # The control: ucb1 tries every candidate once at cold start, the incapable ones too.
    assert set(served_by(client, "auto", 8, messages=ASK)) == {"cap-35", "cap-blind", "cap-4o", "cap-big"}


@pytest.mark.parametrize("request_, capable", [
    ({"messages": IMAGE}, {"cap-4o", "cap-big"}),
    ({"messages": ASK, "tools": TOOLS}, {"cap-35", "cap-4o", "cap-big"}),
    ({"messages": ASK, "response_format": SCHEMA}, {"cap-4o", "cap-big"}),
], ids=["image", "tools", "json-schema"])
def test_a_request_reaches_only_capable_deployments(client, upstreams, request_, capable):
    before = {n: u.stats()["calls"] for n, u in upstreams.items()}
    served = served_by(client, "auto", 6, **request_)
    # Every capable one is reached (ucb1's cold start tries each), an incapable one never.
    assert set(served) == capable, served
    called = {n for n, u in upstreams.items() if u.stats()["calls"] > before[n]}
    assert called == capable


def test_no_capable_candidate_is_a_400_naming_the_capability_and_the_alias(client, admin, upstreams):
    before = {n: u.stats()["calls"] for n, u in upstreams.items()}
    learned = {n: (row["count"], row["breaker"]) for n, row in stats(admin).items() if n in ("cap-35", "cap-blind")}
    for _ in range(3):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="auto/text", messages=IMAGE)
        body = err.value.body
        assert body["message"] == ("alias 'auto/text': no candidate can take this request: it needs vision "
                                   "(images in the messages); cap-35 lacks vision; cap-blind lacks vision"), body
        assert body["type"] == "invalid_request_error"  # LiteLLM's type of any 400; the plugin's kind below
        assert body["provider_specific_fields"]["error"]["type"] == "aisia_unsupported_request"
        assert body["provider_specific_fields"]["error"]["tried"] == []
    # No provider saw it, no breaker moved, nothing was learned.
    assert {n: u.stats()["calls"] for n, u in upstreams.items()} == before
    now = stats(admin)
    assert {n: (now[n]["count"], now[n]["breaker"]) for n in learned} == learned
    assert all(breaker == "CLOSED" for _, breaker in learned.values())
    # The proxy's explain log says why each was left out.
    r = admin.get("/aisia/explain", params={"limit": 1000})
    assert r.status_code == 200, r.text
    refused = [e for e in r.json()["decisions"] if e["alias"] == "auto/text"]
    assert len(refused) == 3  # one decision per request: LiteLLM does not retry the refusal
    entry = refused[0]
    assert entry["alias"] == "auto/text" and entry["refused"] == "unsupported_request"
    rows = {c["id"]: c.get("excluded") for c in entry["candidates"]}
    assert rows["cap-35"] == "cannot take images in the messages (no vision: LiteLLM's model info for gpt-3.5-turbo)"
    assert rows["cap-blind"] == "cannot take images in the messages (no vision: model_info.aisia.capabilities)"


# -- In this process, LiteLLM's Router and the plugin's filter (no proxy) -------------------------
async def test_capable_candidates_litellm_cools_down_are_a_503_not_a_400(tmp_path):
    """LiteLLM hands the filter only the deployments it is not cooling down: when the ones left
    cannot take the request, the alias still has capable candidates, and the client is told they
    are unavailable (503), not that the request cannot be served (400)."""
    from router_harness import PluginRouters

    from aisia_plugin.litellm.callback import Refused

    (tmp_path / "policy.yaml").write_text("version: 1\naliases:\n  v/pool:\n    strategy: cost\n"
                                          "    candidates: {models: [v-35, v-4o]}\n  v/text:\n    strategy: cost\n"
                                          "    candidates: {models: [v-35]}\n")
    routers = PluginRouters([tmp_path / "policy.yaml"])
    try:
        router, plugin = routers.make(
            [deployment("v-35", "http://127.0.0.1:9/v1", litellm_params={"model": "openai/gpt-3.5-turbo"}),
             deployment("v-4o", "http://127.0.0.1:9/v1", litellm_params={"model": "openai/gpt-4o"})],
            disable_cooldowns=True)
        raws = {d["model_info"]["id"]: d for d in router.model_list}
        with pytest.raises(Refused) as cooled:
            await plugin.async_filter_deployments("v/pool", [raws["v-35"]], IMAGE,
                                                  request_kwargs={"messages": IMAGE, "metadata": {}})
        assert cooled.value.status_code == 503, cooled.value.text
        assert "unavailable now" in cooled.value.text and "v-35 lacks vision" in cooled.value.text
        with pytest.raises(Refused) as none:
            await plugin.async_filter_deployments("v/text", [raws["v-35"]], IMAGE,
                                                  request_kwargs={"messages": IMAGE, "metadata": {}})
        assert none.value.status_code == 400 and none.value.kind == "aisia_unsupported_request"
        # Both handed over: the capable one is ranked first.
        ranked = await plugin.async_filter_deployments("v/pool", [raws["v-35"], raws["v-4o"]], IMAGE,
                                                       request_kwargs={"messages": IMAGE, "metadata": {}})
        assert [d["model_info"]["id"] for d in ranked] == ["v-4o"]
    finally:
        routers.close()
