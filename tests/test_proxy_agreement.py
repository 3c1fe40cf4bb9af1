"""The plugin says what the proxy does (issue 19 A/B), on a production-like LiteLLM config
(tests/fixtures/production-like: 8 deployments over 6 providers, an Azure deployment priced by
its `model_info.base_model`, a Groq model LiteLLM's cost map does not list, a self-hosted
`hosted_vllm/` model, every `api_base` on loopback) behind a real proxy with the plugin, each
deployment served by a simulated upstream:

- every deployment is priced as LiteLLM bills it: the plugin's price of a request's tokens is the
  proxy's `x-litellm-response-cost` for them, or the deployment is flagged unpriced where LiteLLM
  bills None; `/aisia/policy` and `aisia explain` show the same prices and sources;
- `aisia explain` on the same config, policy and prompt chooses what the proxy chooses;
- `aisia validate --deployments` refuses what the proxy refuses at start, with the same lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml

from aisia_plugin.decision import Deployment
from fault_helpers import wait_for
from proxy_harness import ProxyError, start_proxy, start_upstreams, stop_upstreams

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "production-like"
KEYS = {name: "sk-fake-upstream" for name in ("OPENAI_API_KEY", "AZURE_API_KEY", "ANTHROPIC_API_KEY",
                                                "GROQ_API_KEY", "DEEPSEEK_API_KEY")}
PROMPT = "Summarize the attached meeting notes in three bullet points"


def _fixture_text() -> str:
    return (FIXTURE / "litellm_config.yaml").read_text(encoding="utf-8")


def _deployments() -> list[dict]:
    return yaml.safe_load(re.sub(r"\$\{PORT_\w+\}", "1", _fixture_text()))["model_list"]


IDS = [d["model_info"]["id"] for d in _deployments()]


@pytest.fixture(scope="module")
def upstreams():
    """One simulated upstream per deployment, answering with the model its deployment names."""
    running = start_upstreams([{"name": d["model_info"]["id"], "model": d["litellm_params"]["model"].split("/", 1)[1]}
                               for d in _deployments()])
    yield running
    stop_upstreams(running)


@pytest.fixture(scope="module")
def files(tmp_path_factory, upstreams):
    """The fixture's config with each `${PORT_*}` replaced by its deployment's upstream, and the
    team policy without the price it gave the self-hosted model (free now without one)."""
    work = tmp_path_factory.mktemp("production-like")
    text = _fixture_text()
    ports = re.findall(r"\$\{(PORT_\w+)\}", text)
    assert len(ports) == len(upstreams)  # one upstream per deployment, in the config's order
    for name, upstream in zip(ports, upstreams):
        text = text.replace("${%s}" % name, str(upstream.port))
    config = work / "litellm_config.yaml"
    config.write_text(text, encoding="utf-8")
    team = yaml.safe_load((FIXTURE / "team-policy.yaml").read_text(encoding="utf-8"))
    team["deployments"]["vllm-llama-8b"] = {"tier": "free"}
    # A spend target over the Groq model LiteLLM does not price (it logs its calls at 0).
    team["aliases"]["auto/paced-groq"] = {"strategy": "ucb1", "candidates": {"ids": ["groq-llama-3.1-70b"]},
                                          "budget": {"target_usd_per_1k_requests": 0.01}}
    # A budget to use (a floor below 0) far above what the model costs: the multiplier goes negative.
    team["aliases"]["auto/paced-floor"] = {"strategy": "ucb1", "candidates": {"ids": ["groq-llama-3.1-70b"]},
                                           "budget": {"target_usd_per_1k_requests": 1000, "min_multiplier": -5}}
    policy = work / "team-policy.yaml"
    policy.write_text(yaml.safe_dump(team, sort_keys=False), encoding="utf-8")
    return {"config": config, "policy": policy, "work": work}


@pytest.fixture(scope="module")
def proxy(files):
    config = yaml.safe_load(files["config"].read_text(encoding="utf-8"))
    p = start_proxy(config, files["work"] / "proxy", env={**KEYS, "AISIA_POLICY": str(files["policy"])})
    yield p
    p.stop()


def _chat(proxy, model: str, prompt: str = PROMPT) -> httpx.Response:
    return httpx.post(proxy.base_url + "/chat/completions", headers=proxy.headers, timeout=60,
                      json={"model": model, "messages": [{"role": "user", "content": prompt}]})


def _explain(aisia, files, *argv):
    code, out, err = aisia("explain", "--json", "--policy", files["policy"], "--deployments", files["config"], *argv)
    assert code in (0, 3), err
    return code, json.loads(out)


def _price(view: dict, prompt_tokens: int, completion_tokens: int) -> float:
    """The plugin's price of a request of these token counts, from a deployment as it shows it."""
    d = Deployment(id=view["id"], model_name=view["model_name"], model=view["model"], provider=view["provider"],
                   input_cost_per_1m=view["input_cost_per_1m"], output_cost_per_1m=view["output_cost_per_1m"])
    return d.cost_usd(prompt_tokens, completion_tokens)


# -- A: one price, LiteLLM's --------------------------------------------------------------------
def test_every_deployment_is_priced_as_litellm_bills_it(proxy, files, aisia):
    served = httpx.get(proxy.url + "/aisia/policy", headers=proxy.headers, timeout=30).json()["deployments"]
    shown = {d["id"]: d for d in served}
    _, explained = _explain(aisia, files, "--alias", "auto/cheap", PROMPT)
    assert {d["id"]: d for d in explained["deployments"]} == shown  # one code builds both
    assert sorted(shown) == sorted(IDS)
    for dep_id in IDS:
        r = _chat(proxy, dep_id)
        assert r.status_code == 200, r.text
        assert r.headers["x-litellm-model-id"] == dep_id
        usage = r.json()["usage"]
        billed = r.headers.get("x-litellm-response-cost")
        view = shown[dep_id]
        if view["priced_by_litellm"]:
            assert float(billed) == pytest.approx(_price(view, usage["prompt_tokens"], usage["completion_tokens"]),
                                                  rel=1e-9, abs=1e-15), (dep_id, view)
        else:  # LiteLLM has no price: it says so, and so does the plugin
            assert billed in (None, "None"), (dep_id, billed, view)
            assert "LiteLLM has no price" in view["price_source"]
    azure = shown["azure-gpt-4o-eu"]
    assert azure["price_source"] == "litellm cost map: azure/gpt-4o (model_info.base_model)"
    assert (azure["input_cost_per_1m"], azure["output_cost_per_1m"]) == (
        shown["openai-gpt-4o-us"]["input_cost_per_1m"], shown["openai-gpt-4o-us"]["output_cost_per_1m"])
    assert shown["anthropic-claude-35-sonnet"]["price_source"] == "litellm: custom price in litellm_params"
    groq = shown["groq-llama-3.1-70b"]
    assert (groq["priced_by_litellm"], groq["price_basis"]) == (False, "table")
    assert groq["price_source"].startswith("policy costs.by_provider_prefix.groq (LiteLLM has no price for ")
    assert "aisia: LiteLLM has no price for deployment groq-llama-3.1-70b (groq/llama-3.1-70b-versatile): it bills " \
           "its requests None; the router ranks and budgets it at $0.3/$0.3 per 1M tokens in/out from policy " \
           "costs.by_provider_prefix.groq" in proxy.logs()  # said once at start, never a silent guess
    vllm = shown["vllm-llama-8b"]
    assert (vllm["price_basis"], vllm["input_cost_per_1m"], vllm["output_cost_per_1m"]) == ("self-hosted", 0.0, 0.0)


def test_a_strict_budget_refuses_azure_at_the_price_litellm_bills_it(proxy, files, aisia):
    """auto/eu (the EU deployments, at most $0.001 a request, strict): Azure billed as gpt-4o
    (its base_model) and Claude at its custom price both exceed it."""
    r = _chat(proxy, "auto/eu")
    assert r.status_code == 402, r.text
    code, explained = _explain(aisia, files, "--alias", "auto/eu", PROMPT)
    assert code == 3 and explained["decision"]["refused"] == "budget"
    over = {c["id"] for c in explained["decision"]["candidates"] if (c.get("excluded") or "").endswith("over budget")}
    assert over == {"azure-gpt-4o-eu", "anthropic-claude-35-sonnet"}


# -- B: explain predicts the proxy's choice ---------------------------------------------------------
@pytest.mark.parametrize("alias,prompt", [
    ("auto/cheap", PROMPT),
    ("auto/cheap", "Write a Python function that merges two sorted lists"),
    ("auto/offline", PROMPT),
    ("auto/eu", "hi"),
])
def test_explain_chooses_what_the_proxy_chooses(proxy, files, aisia, alias, prompt):
    r = _chat(proxy, alias, prompt)
    proxy_choice = r.headers["x-litellm-model-id"] if r.status_code == 200 else r.status_code
    code, explained = _explain(aisia, files, "--alias", alias, prompt)
    decision = explained["decision"]
    assert (decision["deployment_id"] if code == 0 else decision["status_code"]) == proxy_choice


def test_a_spend_target_counts_a_deployment_litellm_does_not_price_at_the_router_s_price(proxy):
    """LiteLLM logs a call to a model it cannot price at $0: the spend target would see nothing
    spent and its multiplier sink to 0. The router counts such a call at the price it ranked the
    deployment at (the policy's table, $0.3/$0.3 per 1M for Groq here), from the tokens billed."""
    tokens = []
    for _ in range(3):
        r = _chat(proxy, "auto/paced-groq")
        assert r.status_code == 200, r.text
        assert r.headers["x-litellm-model-id"] == "groq-llama-3.1-70b"
        assert r.headers.get("x-litellm-response-cost") in (None, "None", "0", "0.0")  # LiteLLM: no price
        usage = r.json()["usage"]
        tokens.append((usage["prompt_tokens"], usage["completion_tokens"]))
    expected = 1000 * sum((i * 0.3 + o * 0.3) / 1e6 for i, o in tokens) / len(tokens)
    assert expected > 0
    spend = _gauge_once(proxy, "aisia_spend_usd_per_1k_requests", "auto/paced-groq", bool, "the spend to be counted")
    assert spend == pytest.approx(expected, rel=1e-9), (spend, expected, tokens)


def _gauge(proxy, name: str, alias: str):
    """The plugin's gauge `name` for `alias` (None while it has no sample)."""
    text = httpx.get(proxy.url + "/aisia/metrics", headers=proxy.headers, timeout=30).text
    found = re.search(r'^%s\{alias="%s"\} (\S+)$' % (name, re.escape(alias)), text, re.M)
    return float(found.group(1)) if found else None


def _gauge_once(proxy, name: str, alias: str, holds, what: str) -> float:
    """The gauge once `holds(value)`: learning follows the answer, the gauges follow the store."""
    return wait_for(lambda: (v := _gauge(proxy, name, alias)) is not None and holds(v) and (v,), what, limit_s=10,
                    every_s=0.25, detail=lambda: _gauge(proxy, name, alias))[0]


def test_a_spend_target_with_a_floor_below_0_takes_its_multiplier_negative_through_the_proxy(proxy):
    """budget.min_multiplier loads in the proxy, and a target far above what the calls cost moves
    the multiplier by about -1 per call (pacing_rate 1), from 1 through 0 down to the floor."""
    for _ in range(3):
        r = _chat(proxy, "auto/paced-floor")
        assert r.status_code == 200, r.text
    m = _gauge_once(proxy, "aisia_spend_multiplier", "auto/paced-floor", lambda v: v < -1.5, "three calls paced")
    assert m == pytest.approx(-2.0, abs=1e-3)  # 1 - 3 x (1 - 1000 x cost / 1000), the cost ~1e-5
    for _ in range(4):
        assert _chat(proxy, "auto/paced-floor").status_code == 200
    # the floor, not the -6 seven calls would reach without it
    assert _gauge_once(proxy, "aisia_spend_multiplier", "auto/paced-floor", lambda v: v < -4.5, "seven calls") == -5.0


def test_auto_offline_keeps_the_self_hosted_model_only_and_says_why(proxy, files, aisia):
    """Every deployment's api_base is on loopback (simulated upstreams, as behind an egress
    proxy): only the self-hosted one is local."""
    r = _chat(proxy, "auto/offline")
    assert r.status_code == 200 and r.headers["x-litellm-model-id"] == "vllm-llama-8b"
    _, explained = _explain(aisia, files, "--alias", "auto/offline", PROMPT)
    rows = {d["id"]: d for d in explained["deployments"]}
    assert {i for i, d in rows.items() if d["local"]} == {"vllm-llama-8b"}
    assert rows["vllm-llama-8b"]["local_reason"] == "self-hosted provider hosted_vllm/ on loopback"
    assert rows["azure-gpt-4o-eu"]["local_reason"] == \
        "provider azure/ is not self-hosted (a loopback api_base alone does not count)"
    code, out, _ = aisia("explain", "--policy", files["policy"], "--deployments", files["config"],
                         "--alias", "auto/offline", PROMPT)
    line = next(x for x in out.splitlines() if x.strip().startswith("vllm-llama-8b "))
    assert line.endswith("local: self-hosted provider hosted_vllm/ on loopback")


# -- B: validate refuses what the proxy refuses at start ----------------------------------------------
COLLIDING = """\
version: 1
aliases:
  gpt4:
    description: named like the config's model_group_alias
    strategy: cost
  gpt-4o:
    description: named like one of the config's model names
    strategy: cost
"""


@pytest.mark.proxy  # starts a LiteLLM proxy
def test_validate_refuses_the_aliases_the_proxy_refuses_with_the_same_lines(files, aisia, tmp_path):
    policy = tmp_path / "colliding.yaml"
    policy.write_text(COLLIDING, encoding="utf-8")
    code, out, _ = aisia("validate", "--deployments", files["config"], policy)
    assert code == 1
    refused = out.splitlines()
    assert refused == [
        f"{policy}:3:3: aliases.gpt4: the alias collides with the LiteLLM router_settings.model_group_alias 'gpt4'; "
        "rename the alias",
        f"{policy}:6:3: aliases.gpt-4o: the alias collides with the LiteLLM model_name 'gpt-4o' of the model_list; "
        "rename the alias"]
    config = yaml.safe_load(files["config"].read_text(encoding="utf-8"))
    with pytest.raises(ProxyError) as err:
        # (failing closed: by default the proxy would start and answer the aliases with 503)
        start_proxy(config, tmp_path / "proxy", env={**KEYS, "AISIA_POLICY": str(policy), "AISIA_FAIL_CLOSED": "true"},
                    timeout_s=90).stop()
    logged = (tmp_path / "proxy" / "litellm.log").read_text(errors="replace")
    assert "exited" in str(err.value)
    for line in refused:
        assert line in logged


def test_an_annotation_of_no_deployment_is_a_warning_naming_the_closest_id(files, aisia, tmp_path):
    policy = tmp_path / "typo.yaml"
    policy.write_text("version: 1\ndeployments:\n  groq-llama-70b: {tier: pro}\n  vllm-llama-8b: {tier: free}\n",
                      encoding="utf-8")
    code, out, _ = aisia("validate", "--deployments", files["config"], policy)
    assert code == 0
    assert f"{policy}:3:3: deployments.groq-llama-70b: warning: annotates none of the 8 deployments of " \
           f"{files['config']} (keys match an id, a model_name or a model); did you mean 'groq-llama-3.1-70b'?" \
           in out.splitlines()
    assert not any("deployments.vllm-llama-8b" in line for line in out.splitlines())
    assert aisia("validate", "--strict", "--deployments", files["config"], policy)[0] == 1


def test_an_annotation_a_more_specific_key_shadows_everywhere_is_a_warning_naming_its_line(files, aisia, tmp_path):
    """Only the most specific matching key annotates a deployment: `openai-*` annotates
    openai-gpt-35-turbo; `groq-*`'s only deployment is annotated by its own id's key."""
    policy = tmp_path / "shadowed.yaml"
    policy.write_text("version: 1\ndeployments:\n  groq-*: {tier: pro}\n  groq-llama-3.1-70b: {tier: free}\n"
                      "  openai-*: {tier: pro}\n  openai-gpt-4o*: {tier: free}\n", encoding="utf-8")
    code, out, _ = aisia("validate", "--deployments", files["config"], policy)
    assert code == 0
    assert f"{policy}:3:3: deployments.groq-*: warning: annotates none of the 1 deployments it matches in " \
           f"{files['config']}: a more specific key annotates each (groq-llama-3.1-70b), and only the most " \
           "specific key applies; move its settings there" in out.splitlines(), out
    assert not any(k in line for line in out.splitlines()
                   for k in ("deployments.openai-*:", "deployments.openai-gpt-4o*", "deployments.groq-llama"))
