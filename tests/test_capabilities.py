"""Filtering by what the request needs (docs/capabilities.md): a request's needs from its body, a
deployment's capabilities from its annotation and LiteLLM's model info, the engine leaving out the
deployments known not to take the request, and its 400 when none can."""

from __future__ import annotations

import random
import textwrap

import pytest

from helpers import deployment
from aisia_plugin.capabilities import gaps, lacking, request_needs
from aisia_plugin.deployments import build_deployment
from aisia_plugin.engine import UNSUPPORTED, Engine
from aisia_plugin.features import extract_features
from aisia_plugin.policy import load_policy

IMAGE = [{"role": "user", "content": [{"type": "text", "text": "what is in this picture?"},
                                      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
AUDIO = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]
PDF = [{"role": "user", "content": [{"type": "text", "text": "summarise"},
                                    {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA"}}]}]
TEXT = [{"role": "user", "content": "hello there"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}


def needs(messages, tools=None, body=None):
    return request_needs(extract_features(messages, tools), messages, tools, body)


def test_a_plain_text_request_needs_nothing():
    assert needs(TEXT) == frozenset()
    # Words that seem to ask for an image or audio are a guess: they never filter.
    assert needs([{"role": "user", "content": "Draw me a picture of a cat and read it aloud"}]) == frozenset()
    assert needs(TEXT, body={"temperature": 0.2, "response_format": {"type": "json_object"}}) == frozenset()


@pytest.mark.parametrize("messages, tools, body, expected", [
    (IMAGE, None, None, {"vision"}),
    (AUDIO, None, None, {"audio_input"}),
    (PDF, None, None, {"pdf_input"}),
    (TEXT, TOOLS, None, {"function_calling"}),
    (TEXT, None, {"tools": TOOLS}, {"function_calling"}),
    (TEXT, None, {"functions": [{"name": "f"}]}, {"function_calling"}),
    (TEXT, None, {"response_format": SCHEMA}, {"response_schema"}),
    (TEXT, None, {"reasoning_effort": "high"}, {"reasoning"}),
    (TEXT, None, {"thinking": {"type": "enabled", "budget_tokens": 1024}}, {"reasoning"}),
    (TEXT, None, {"modalities": ["text", "audio"], "audio": {"voice": "alloy"}}, {"audio_output"}),
    (IMAGE + PDF, TOOLS, {"response_format": SCHEMA}, {"vision", "pdf_input", "function_calling", "response_schema"}),
])
def test_needs_are_read_from_the_body(messages, tools, body, expected):
    assert needs(messages, tools, body) == frozenset(expected)


@pytest.mark.parametrize("body", [None, {}, {"tools": "x"}, {"tools": []}, {"response_format": "json_schema"},
                                  {"response_format": {"type": 3}}, {"reasoning_effort": None}, {"thinking": {}},
                                  {"functions": {"a": 1}}, {"modalities": ["text"]}, {"modalities": "audio"}])
def test_odd_bodies_need_nothing_and_never_raise(body):
    assert needs(TEXT, body=body) == frozenset()


def test_a_file_part_makes_a_request_not_plain_text():
    assert extract_features(PDF).modality == "mixed"
    assert extract_features([{"role": "user", "content": [{"type": "file", "file": {}}]}]).modality == "file"


def _policy(tmp_path, extra=""):
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""
        version: 1
        aliases:
          auto: {strategy: cost}
        """) + textwrap.dedent(extra))
    return load_policy([tmp_path / "p.yaml"])


def test_annotation_capabilities_merge_with_the_deployments_own_winning(tmp_path):
    policy = _policy(tmp_path, """
        deployments:
          "gpt*": {capabilities: {vision: false, function_calling: true}}
        """)
    raw = {"model_name": "gpt35", "litellm_params": {"model": "openai/gpt-3.5-turbo"},
           "model_info": {"id": "gpt35", "aisia": {"capabilities": {"vision": True}}}}
    d = build_deployment(raw, policy)
    assert d.capabilities == {"vision": True, "function_calling": True}
    assert d.capability_sources["vision"] == "model_info.aisia.capabilities"
    assert d.capability_sources["function_calling"] == "policy deployments.gpt*.capabilities"


def test_a_wrong_capability_annotation_is_a_located_error(tmp_path):
    from aisia_plugin.deployments import DeploymentError
    policy = _policy(tmp_path)
    raw = {"model_name": "x", "litellm_params": {"model": "openai/x"},
           "model_info": {"id": "x", "aisia": {"capabilities": {"vison": True}}}}
    with pytest.raises(DeploymentError, match="vison"):
        build_deployment(raw, policy)


def test_only_a_deployment_known_not_to_take_the_request_is_left_out():
    blind = deployment("a-blind", capabilities={"vision": False}, capability_sources={"vision": "LiteLLM"})
    seeing = deployment("b-seeing", capabilities={"vision": True})
    unknown = deployment("c-unknown")
    out = lacking([blind, seeing, unknown], frozenset({"vision"}))
    assert list(out) == ["a-blind"]
    assert "images in the messages" in out["a-blind"] and "LiteLLM" in out["a-blind"]


def test_the_engine_routes_an_image_only_to_a_capable_deployment(tmp_path):
    policy = _policy(tmp_path)
    # The cost strategy picks the cheapest: the blind one, listed first, unless it is filtered.
    blind = deployment("a-blind", 0.1, capabilities={"vision": False, "function_calling": True})
    seeing = deployment("b-seeing", 5.0, capabilities={"vision": True, "function_calling": True})
    engine = Engine(policy, rng=random.Random(1))
    assert engine.decide("auto", TEXT, [blind, seeing]).deployment_id == "a-blind"
    d = engine.decide("auto", IMAGE, [blind, seeing])
    assert d.deployment_id == "b-seeing"
    row = next(s for s in d.scores if s.id == "a-blind")
    assert "no vision" in row.excluded
    assert engine.decide("auto", TEXT, [blind, seeing], tools=TOOLS).deployment_id == "a-blind"


def test_no_capable_candidate_is_a_400_naming_the_capability(tmp_path):
    policy = _policy(tmp_path)
    a = deployment("a-one", capabilities={"response_schema": False})
    b = deployment("b-two", capabilities={"response_schema": False, "vision": True})
    d = Engine(policy, rng=random.Random(1)).decide("auto", TEXT, [a, b], request={"response_format": SCHEMA})
    assert d.refused == UNSUPPORTED and d.status_code == 400 and d.deployment_id is None
    assert "response_schema" in d.reason and "a-one" in d.reason and "b-two" in d.reason
    assert {s.id for s in d.scores if s.excluded} == {"a-one", "b-two"}


def test_a_retry_keeps_the_capability_filter(tmp_path):
    policy = _policy(tmp_path)
    blind = deployment("a-blind", 0.1, capabilities={"vision": False})
    seeing = [deployment(f"b-seeing{k}", 5.0 + k, capabilities={"vision": True}) for k in range(2)]
    d = Engine(policy, rng=random.Random(1)).decide("auto", IMAGE, [blind, *seeing], exclude=["b-seeing0"])
    assert d.deployment_id == "b-seeing1"


def test_gaps_name_what_an_alias_requires_and_nobody_has():
    a = deployment("a", capabilities={"vision": False})
    b = deployment("b", capabilities={"vision": True, "function_calling": False})
    c = deployment("c")
    assert gaps("auto", ["vision"], [a, b]) == []
    (g,) = gaps("auto", ["function_calling", "vision"], [a, b])
    assert g.capability == "function_calling" and g.lacking == ("b",) and g.unknown == ("a",)
    (g,) = gaps("auto", ["vision"], [a])
    assert "refused with a 400" in g.message()
    (g,) = gaps("auto", ["vision"], [a, c])
    assert g.unknown == ("c",) and "known" in g.message()


CONFIG = """\
model_list:
  - model_name: gpt35
    litellm_params: {model: openai/gpt-3.5-turbo, api_base: "http://127.0.0.1:9/v1", api_key: sk-x}
    model_info: {id: gpt35}
  - model_name: gpt4o
    litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:9/v1", api_key: sk-x}
    model_info: {id: gpt4o}
  - model_name: small
    litellm_params: {model: openai/fake-small, api_base: "http://127.0.0.1:9/v1", api_key: sk-x}
    model_info: {id: small, aisia: {capabilities: {vision: false}}}
  - model_name: llama
    litellm_params: {model: ollama/llama3, api_base: "http://127.0.0.1:9"}
    model_info: {id: llama}
"""


def test_explain_says_why_each_deployment_was_left_out(tmp_path, capsys):
    import json

    from aisia_plugin.cli import main

    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "request.json").write_text(json.dumps({"messages": IMAGE}))
    assert main(["explain", "--deployments", str(tmp_path / "config.yaml"), "--request",
                 str(tmp_path / "request.json")]) == 0
    out = capsys.readouterr().out
    assert "needs=vision" in out
    assert ("gpt35                            excluded: cannot take images in the messages "
            "(no vision: LiteLLM's model info for gpt-3.5-turbo)") in out
    assert "small                            excluded: cannot take images in the messages " \
           "(no vision: model_info.aisia.capabilities)" in out
    assert "decision:  gpt4o" in out
    # A prompt and a request at once, or neither: a usage error.
    assert main(["explain", "--request", str(tmp_path / "request.json"), "hello"]) == 2
    assert main(["explain"]) == 2


def test_validate_warns_about_an_alias_none_of_whose_candidates_has_what_it_requires(tmp_path, capsys):
    from aisia_plugin.cli import main

    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""\
        version: 1
        aliases:
          auto/text:
            candidates: {models: [gpt35, small]}
            requires: [vision, function_calling]
          auto/vision:
            candidates: {models: [gpt4o]}
            requires: [vision]
        """))
    assert main(["validate", str(tmp_path / "p.yaml"), "--deployments", str(tmp_path / "config.yaml")]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert (f"{tmp_path / 'p.yaml'}:5:5: aliases.auto/text.requires: warning: alias 'auto/text' requires vision, "
            "and none of its candidates has it (gpt35, small)") in text
    assert "auto/vision" not in text and "requires function_calling" not in text


def test_requires_names_only_known_capabilities(tmp_path):
    from aisia_plugin.policy import PolicyError

    (tmp_path / "bad.yaml").write_text("version: 1\naliases:\n  auto/x: {requires: [telepathy]}\n")
    with pytest.raises(PolicyError, match=r"bad.yaml:3:23: aliases.auto/x.requires.0: 'telepathy' is not one of vision"):
        load_policy([tmp_path / "bad.yaml"])
