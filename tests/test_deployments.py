"""Deployments from LiteLLM's config: model_info.aisia annotations (checked by the schema's
DeploymentAnnotation, errors located), their merge with the policy's deployments section,
locality inference, prices, ids; `aisia validate --deployments` and `aisia explain --deployments`."""

from __future__ import annotations

import json
import math
import random
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisia_plugin.cli import main
from aisia_plugin.deployments import (DeploymentError, Price, build_deployment, build_deployments,
                                      load_deployments_file, locality)
from aisia_plugin.engine import Engine
from aisia_plugin.policy import load_policy

POLICY = load_policy()


def dep(model="openai/gpt-4o", id_="d1", name=None, aisia=None, **params):
    info = {"id": id_}
    if aisia is not None:
        info["aisia"] = aisia
    return {"model_name": name or id_, "litellm_params": {"model": model, **params}, "model_info": info}


@pytest.fixture
def team_policy(tmp_path):
    p = tmp_path / "team.yaml"
    p.write_text(textwrap.dedent("""
        version: 1
        deployments:
          "coder-*":
            tier: pro
            tags: [from-policy]
            specialities: {coding: null, math: big-math-model}
            input_cost_per_1m: 1.0
            provider: acme
        """), encoding="utf-8")
    return load_policy([p])


# -- annotations -----------------------------------------------------------------------------------
def test_model_info_aisia_is_read():
    d = build_deployment(dep("openai/gpt-4o", "gpt", aisia={
        "tier": "ultra", "tags": ["smart"], "specialities": {"coding": "openai/o1"}, "provider": "oai",
        "input_cost_per_1m": 3.0, "output_cost_per_1m": 9.0}), POLICY)
    assert (d.tier, d.tags, d.specialities, d.provider) == ("ultra", ("smart",), {"coding": "openai/o1"}, "oai")
    assert (d.input_cost_per_1m, d.output_cost_per_1m) == (3.0, 9.0)
    assert d.cost_per_1m == pytest.approx(0.75 * 3 + 0.25 * 9)


def test_the_deployments_own_annotation_wins_over_the_policy_field_by_field(team_policy):
    plain = build_deployment(dep("openai/x", "coder-a"), team_policy)
    assert (plain.tier, plain.provider, plain.input_cost_per_1m, plain.output_cost_per_1m) == ("pro", "acme", 1.0, 1.0)
    own = build_deployment(dep("openai/x", "coder-a", tags=["from-litellm"], aisia={
        "tier": "free", "tags": ["own"], "specialities": {"math": None}, "output_cost_per_1m": 4.0}), team_policy)
    assert own.tier == "free"  # own wins
    assert own.provider == "acme"  # not set by the deployment: the policy's
    assert own.tags == ("from-litellm", "from-policy", "own")  # added together
    assert own.specialities == {"coding": None, "math": None}  # merged per domain, own wins
    assert (own.input_cost_per_1m, own.output_cost_per_1m) == (1.0, 4.0)


@pytest.mark.parametrize("model,params,local,reason", [
    ("ollama/llama3", {}, True, "self-hosted provider ollama/"),
    ("ollama_chat/llama3", {}, True, "self-hosted provider ollama_chat/"),
    ("hosted_vllm/mistral", {}, True, "self-hosted provider hosted_vllm/"),
    ("hosted_vllm/mistral", {"api_base": "http://127.0.0.1:8000/v1"}, True, "self-hosted provider hosted_vllm/ on loopback"),
    ("hosted_vllm/mistral", {"api_base": "http://gpu-7.internal:8000/v1"}, True, "self-hosted provider hosted_vllm/"),
    ("vllm/mistral", {}, True, "self-hosted provider vllm/"),
    ("lm_studio/qwen", {}, True, "self-hosted provider lm_studio/"),
    ("llamafile/phi", {}, True, "self-hosted provider llamafile/"),
    ("xinference/qwen", {}, True, "self-hosted provider xinference/"),
    ("openai/my-model", {"custom_llm_provider": "ollama"}, True, "self-hosted provider ollama/"),
    # A cloud provider behind a local egress proxy or sidecar listens on loopback too: an address
    # alone does not make a deployment local (issue 19 B).
    ("openai/my-model", {"api_base": "http://localhost:8000/v1"}, False,
     "provider openai/ is not self-hosted (a loopback api_base alone does not count)"),
    ("openai/my-model", {"api_base": "http://127.3.0.1:8000/v1"}, False,
     "provider openai/ is not self-hosted (a loopback api_base alone does not count)"),
    ("azure/gpt-4o-eu", {"api_base": "http://[::1]:8000"}, False,
     "provider azure/ is not self-hosted (a loopback api_base alone does not count)"),
    ("groq/llama-3", {"api_base": "localhost:11434"}, False,
     "provider groq/ is not self-hosted (a loopback api_base alone does not count)"),
    ("openai/gpt-4o", {}, False, "provider openai/ is not self-hosted"),
    ("openai/my-model", {"api_base": "https://api.example.com/v1"}, False, "provider openai/ is not self-hosted"),
    ("openai/my-model", {"api_base": "os.environ/MY_BASE"}, False, "provider openai/ is not self-hosted"),
])
def test_locality_is_inferred_from_the_provider_when_not_annotated(model, params, local, reason):
    assert locality(model, params) == (local, reason)
    d = build_deployment(dep(model, **params), POLICY)
    assert (d.local, d.local_reason) == (local, reason)


def test_an_explicit_local_wins_over_the_inference(tmp_path):
    d = build_deployment(dep("ollama/llama3", aisia={"local": False}), POLICY)
    assert (d.local, d.local_reason) == (False, "model_info.aisia: local: false")
    d = build_deployment(dep("openai/gpt-4o", aisia={"local": True}, api_base="http://127.0.0.1:9/v1"), POLICY)
    assert (d.local, d.local_reason) == (True, "model_info.aisia: local: true")
    team = tmp_path / "team.yaml"
    team.write_text("version: 1\ndeployments:\n  'sidecar-*': {local: true}\n", encoding="utf-8")
    policy = load_policy([team])
    d = build_deployment(dep("openai/gpt-4o", "sidecar-1"), policy)
    assert (d.local, d.local_reason) == (True, "policy deployments.sidecar-*: local: true")


def test_auto_offline_works_on_a_plain_config():
    deps = build_deployments([dep("openai/gpt-4o", "gpt"), dep("ollama/llama3", "llama"),
                              dep("anthropic/claude", "claude")], POLICY)
    engine = Engine(POLICY, clock=lambda: 0.0, rng=random.Random(1))
    d = engine.decide("auto/offline", [{"role": "user", "content": "hello"}], deps)
    assert d.deployment_id == "llama" and not d.refused


# -- errors ----------------------------------------------------------------------------------------
def test_a_bad_annotation_is_named_by_deployment_and_field_without_a_file():
    with pytest.raises(DeploymentError) as e:
        build_deployment(dep(id_="gpt", aisia={"tier": "gold", "speciality": {}, "input_cost_per_1m": -1000}), POLICY)
    assert str(e.value).splitlines() == [
        "deployment 'gpt': model_info.aisia.speciality: unknown key 'speciality'; did you mean 'specialities'?",
        "deployment 'gpt': model_info.aisia.input_cost_per_1m: value -1000 is out of range: must be >= 0",
        "deployment 'gpt': model_info.aisia.tier: 'gold' is not one of ultra, pro, standard, free",
    ]


def test_an_unknown_speciality_domain_is_rejected():
    with pytest.raises(DeploymentError, match=r"model_info\.aisia\.specialities\.codng: unknown domain 'codng'"):
        build_deployment(dep(aisia={"specialities": {"codng": None}}), POLICY)


@pytest.mark.parametrize("price,ok", [(-1, False), (float("nan"), False), ("cheap", False), (True, False),
                                      ("1e-6", True), (0, True), (2.5e-6, True)])
def test_per_token_prices_must_be_numbers_at_least_zero(price, ok):
    raw = dep()
    raw["model_info"]["input_cost_per_token"] = price
    if ok:
        d = build_deployment(raw, POLICY)
        assert d.input_cost_per_1m == pytest.approx(float(price) * 1e6)
    else:
        with pytest.raises(DeploymentError, match=r"deployment 'd1': model_info\.input_cost_per_token: must be a "
                                                  r"number >= 0"):
            build_deployment(raw, POLICY)


def test_a_price_lookup_answer_that_is_no_price_is_ignored():
    d = build_deployment(dep("openai/gpt-4o"), POLICY, lambda raw: Price(-1.0, float("nan"), "broken"))
    assert d.input_cost_per_1m == POLICY.costs.by_provider_prefix["openai"]
    assert (d.price_basis, d.priced_by_litellm) == ("table", False)
    d = build_deployment(dep("openai/gpt-4o"), POLICY, lambda raw: Price(1.0, 2.0, "litellm cost map: x"))
    assert (d.input_cost_per_1m, d.output_cost_per_1m) == pytest.approx((1.0, 2.0))
    assert (d.price_basis, d.price_source, d.priced_by_litellm) == ("litellm", "litellm cost map: x", True)


@pytest.mark.parametrize("raw,field", [
    ("not a mapping", "<deployment>"),
    ({"model_name": "x", "litellm_params": ["openai/gpt-4o"]}, "litellm_params"),
    ({"model_name": "x", "litellm_params": {"model": 42}}, "litellm_params.model"),
    ({"model_name": "x", "litellm_params": {"model": "a/b"}, "model_info": "id-1"}, "model_info"),
    ({"model_name": "x", "litellm_params": {"model": "a/b", "tags": "fast"}}, "litellm_params.tags"),
    ({"model_name": "x", "litellm_params": {"model": "a/b", "api_base": 8000}}, "litellm_params.api_base"),
    ({"model_name": "x", "litellm_params": {"model": "a/b"}, "model_info": {"id": ["x"]}}, "model_info.id"),
    ({"model_name": "x", "litellm_params": {"model": "a/b"}, "model_info": {"aisia": ["tier"]}}, "model_info.aisia"),
    ({}, "litellm_params.model"),
])
def test_malformed_deployments_raise_deployment_error_naming_the_field(raw, field):
    with pytest.raises(DeploymentError) as e:
        build_deployment(raw, POLICY)
    assert f": {field}: " in str(e.value)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
_keys = st.sampled_from(["model_name", "litellm_params", "model_info", "id", "model", "tags", "api_base", "aisia",
                         "input_cost_per_token", "output_cost_per_token", "tier", "local", "specialities"])
_shaped = st.recursive(_json, lambda inner: st.dictionaries(_keys, inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_shaped)
def test_any_shape_gives_a_deployment_or_a_deployment_error(raw):
    try:
        d = build_deployment(raw, POLICY)
    except DeploymentError as exc:
        assert str(exc)
        return
    assert d.id and d.model
    assert math.isfinite(d.input_cost_per_1m) and d.input_cost_per_1m >= 0
    assert math.isfinite(d.output_cost_per_1m) and d.output_cost_per_1m >= 0


def test_duplicate_ids_are_an_error_and_derived_ids_are_made_unique():
    with pytest.raises(DeploymentError, match=r"deployment 'a': model_info\.id: duplicate deployment id 'a' "
                                              r"\(also at deployment #1\)"):
        build_deployments([dep(id_="a"), dep(id_="a")], POLICY)
    same_group = [{"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o"}},
                  {"model_name": "gpt", "litellm_params": {"model": "azure/gpt-4o"}}]
    assert [d.id for d in build_deployments(same_group, POLICY)] == ["gpt", "gpt#2"]


# -- files: located errors -----------------------------------------------------------------------------
CONFIG = """\
model_list:
  - model_name: gpt-4o
    litellm_params: &openai
      model: openai/gpt-4o
    model_info:
      id: gpt-4o
      aisia:
        tier: gold
  - model_name: local
    litellm_params:
      model: ollama/llama3
    model_info:
      id: gpt-4o
      input_cost_per_token: free
  - model_name: copy
    litellm_params:
      <<: *openai
      api_base: http://127.0.0.1:9/v1
"""


def test_a_config_file_gives_file_line_errors(tmp_path):
    cfg = tmp_path / "litellm_config.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    with pytest.raises(DeploymentError) as e:
        load_deployments_file(cfg, POLICY)
    assert str(e.value).splitlines() == [
        f"{cfg}:8:15: model_list.0.model_info.aisia.tier: 'gold' is not one of ultra, pro, standard, free",
        f"{cfg}:14:29: model_list.1.model_info.input_cost_per_token: must be a number >= 0 (USD per token), got 'free'",
    ]


def test_a_valid_config_file_with_merge_keys(tmp_path):
    cfg = tmp_path / "litellm_config.yaml"
    cfg.write_text(CONFIG.replace("tier: gold", "tier: pro").replace("      id: gpt-4o\n      input_cost_per_token: free",
                                                                     "      id: llama"), encoding="utf-8")
    deps = load_deployments_file(cfg, POLICY)
    assert [(d.id, d.model, d.tier, d.local) for d in deps] == [
        ("gpt-4o", "openai/gpt-4o", "pro", False), ("llama", "ollama/llama3", None, True),
        ("copy", "openai/gpt-4o", None, False)]
    # the merged litellm_params, with its own loopback api_base (which does not make openai/ local)
    assert deps[2].local_reason == "provider openai/ is not self-hosted (a loopback api_base alone does not count)"


def test_explain_on_a_malformed_config_exits_1_with_located_errors(tmp_path, capsys):
    cfg = tmp_path / "litellm_config.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    assert main(["explain", "--deployments", str(cfg), "hello"]) == 1
    _, err = capsys.readouterr()
    assert err.startswith(f"{cfg}:8:15: model_list.0.model_info.aisia.tier: ") and "Traceback" not in err
    cfg.write_text("model_list: {a: 1}\n", encoding="utf-8")
    assert main(["explain", "--deployments", str(cfg), "hello"]) == 1
    assert capsys.readouterr().err == f"{cfg}:1:13: model_list: must be a list of deployments\n"
    cfg.write_text("model_list:\n  - 3\n  - {model_name: x, litellm_params: {model: a/b}, model_info: {id: [1]}}\n",
                   encoding="utf-8")
    assert main(["explain", "--deployments", str(cfg), "hello"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{cfg}:2:5: model_list.0: a deployment must be a mapping with model_name, litellm_params and model_info, got int",
        f"{cfg}:3:68: model_list.1.model_info.id: must be a non-empty string, got [1]",
    ]


def test_validate_deployments_checks_the_config_and_the_selectors(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("AISIA_POLICY", raising=False)
    cfg = tmp_path / "litellm_config.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    assert main(["validate", "--deployments", str(cfg)]) == 1
    out, _ = capsys.readouterr()
    assert out.splitlines()[0] == f"{cfg}:8:15: model_list.0.model_info.aisia.tier: 'gold' is not one of ultra, pro, standard, free"
    cfg.write_text("model_list:\n  - {model_name: gpt, litellm_params: {model: openai/gpt-4o}}\n", encoding="utf-8")
    assert main(["validate", "--format", "json", "--deployments", str(cfg)]) == 1
    (err,) = json.loads(capsys.readouterr()[0])["errors"]
    assert err["path"] == "aliases.auto/offline.candidates" and err["file"].endswith("aliases.yaml")
    assert err["line"] > 0 and "selects none of the 1 deployments" in err["message"]
    cfg.write_text("model_list:\n  - {model_name: gpt, litellm_params: {model: openai/gpt-4o}}\n"
                   "  - {model_name: llama, litellm_params: {model: ollama/llama3}}\n", encoding="utf-8")
    assert main(["validate", "--deployments", str(cfg)]) == 0
    assert main(["validate", "--deployments", str(tmp_path / "missing.yaml")]) == 2


def test_explain_on_an_invalid_candidates_file_exits_1_and_on_a_missing_one_2(tmp_path, capsys):
    """Exit status as documented: 1 an invalid deployments file (a replay candidates file too,
    its problem located), 2 one that cannot be read."""
    cands = tmp_path / "candidates.yaml"
    cands.write_text("candidates:\n  a: {input_cost_per_1m: -1}\n", encoding="utf-8")
    assert main(["explain", "--deployments", str(cands), "hello"]) == 1
    err = capsys.readouterr().err
    assert str(cands) in err and "Traceback" not in err
    missing = tmp_path / "nope.yaml"
    assert main(["explain", "--deployments", str(missing), "hello"]) == 2
    assert capsys.readouterr().err.startswith(f"aisia explain: cannot read the deployments file {missing}: ")
