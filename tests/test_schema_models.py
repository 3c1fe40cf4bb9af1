"""The JSON Schema, the pydantic models, the shipped policies and the generated reference agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from aisia_plugin.policy import load_policy
from aisia_plugin.policy.models import FACTORS, MODELS_BY_DEF, FitnessBoost, Policy
from aisia_plugin.policy.reference import fields, reference_path, render
from aisia_plugin.policy.schema import fill_defaults, load_schema
from aisia_plugin.resources import policies_dir, schema_path

REPO = Path(__file__).resolve().parent.parent
SCHEMA = load_schema()
POLICY_FILES = sorted(p for p in policies_dir().iterdir() if p.suffix in (".yaml", ".yml"))
# $defs that deliberately have no model class of their own (a model field is a plain dict).
UNMAPPED_DEFS = {"PackWeights": "ModePack.weights is dict[str, float]; its keys are checked against Weights below",
                 "LexiconEntries": "each SignalLexicon category is dict[str, Optional[str]] (entry name -> pattern)"}


def _def(name: str) -> dict:
    return SCHEMA if name == "" else SCHEMA["$defs"][name]


def _walk(node, path=()):
    """Every subschema of the schema, with a readable path."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            if k in ("properties", "$defs"):
                for name, sub in v.items():
                    yield from _walk(sub, path + (k, name))
            elif isinstance(v, dict):
                yield from _walk(v, path + (k,))
            elif isinstance(v, list) and k in ("allOf", "anyOf", "oneOf", "prefixItems"):
                for i, sub in enumerate(v):
                    yield from _walk(sub, path + (k, str(i)))


def _where(path) -> str:
    return "/".join(path) or "<root>"


@pytest.mark.parametrize("def_name", sorted(MODELS_BY_DEF), ids=lambda n: n or "<root>")
def test_schema_properties_equal_model_fields(def_name):
    model = MODELS_BY_DEF[def_name]
    props = set(_def(def_name).get("properties", {}))
    model_fields = set(model.model_fields)
    only_schema, only_model = sorted(props - model_fields), sorted(model_fields - props)
    assert not only_schema, f"{def_name or '<root>'}: in the schema but not in {model.__name__}: {only_schema}"
    assert not only_model, f"{model.__name__}: fields missing from schema {def_name or '<root>'}: {only_model}"


def test_inline_boost_schema_equals_its_model():
    items = SCHEMA["$defs"]["TaskFitness"]["properties"]["boosts"]["items"]
    assert set(items["properties"]) == set(FitnessBoost.model_fields)


def test_every_def_has_a_model_or_a_reason():
    missing = set(SCHEMA["$defs"]) - set(MODELS_BY_DEF) - set(UNMAPPED_DEFS)
    assert not missing, f"$defs without a model in MODELS_BY_DEF: {sorted(missing)}"


def test_mode_pack_factors_are_the_weights_fields():
    assert SCHEMA["$defs"]["PackWeights"]["propertyNames"]["enum"] == list(FACTORS)
    assert list(SCHEMA["$defs"]["Weights"]["properties"]) == list(FACTORS)


def test_required_fields_of_the_schema_have_no_default():
    for path, node in _walk(SCHEMA):
        for name in node.get("required", []):
            assert "default" not in node["properties"][name], f"{_where(path)}: required '{name}' has a default"


def test_every_property_has_a_description():
    missing = [_where(path + ("properties", name))
               for path, node in _walk(SCHEMA)
               for name, prop in node.get("properties", {}).items()
               if not prop.get("description")]
    assert not missing, f"properties without a description: {missing}"
    assert all(d.get("description") for d in SCHEMA["$defs"].values())


def test_every_object_schema_closes_its_additional_properties():
    bad = [_where(path) for path, node in _walk(SCHEMA)
           if node.get("type") == "object"
           and not (node.get("additionalProperties") is False or isinstance(node.get("additionalProperties"), dict))]
    assert not bad, f"object schemas accepting any extra key: {bad}"


def test_schema_file_has_no_duplicate_keys():
    def pairs(items):
        keys = [k for k, _ in items]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        assert not dup, f"duplicate keys {dup} in one object of the schema (JSON keeps only the last)"
        return dict(items)

    json.loads(schema_path().read_text(encoding="utf-8"), object_pairs_hook=pairs)


def test_schema_is_valid_draft_2020_12_with_an_id():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA.get("$id", "").startswith("https://")
    Draft202012Validator.check_schema(SCHEMA)


def test_local_refs_resolve():
    for path, node in _walk(SCHEMA):
        if "$ref" in node:
            assert node["$ref"].startswith("#/$defs/") and node["$ref"][len("#/$defs/"):] in SCHEMA["$defs"], _where(path)


def test_schema_defaults_validate_under_the_schema():
    # The defaults alone form a valid policy, and it builds the models.
    filled = fill_defaults({})
    Draft202012Validator(SCHEMA).validate(filled)
    Policy.model_validate(filled)


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.name)
def test_each_default_policy_file_validates_and_builds_the_models(path):
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "# yaml-language-server: $schema=../schemas/aisia-policy.schema.json"
    data = yaml.safe_load(text)
    errors = sorted(Draft202012Validator(SCHEMA).iter_errors(data), key=lambda e: list(map(str, e.path)))
    assert not errors, [f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors]
    Policy.model_validate(fill_defaults(data))


def test_the_default_policy_files_together_build_the_models():
    # Strategy names are the strategies' business (test_validate checks them against the
    # registry); here, only the schema and the models.
    used = {a.get("strategy", "ucb1") for p in POLICY_FILES
            for a in (yaml.safe_load(p.read_text(encoding="utf-8")) or {}).get("aliases", {}).values()}
    policy = load_policy(POLICY_FILES, known_strategies=used)
    assert isinstance(policy, Policy)
    assert policy.aliases and policy.mode_packs and policy.domains.definitions


def test_reference_is_current():
    on_disk = reference_path().read_text(encoding="utf-8")
    assert on_disk == render(), "docs/policy-reference.md is stale: run `aisia docs`"
    assert reference_path() == REPO / "docs" / "policy-reference.md"


def test_reference_lists_every_field_path_with_its_default_and_range():
    text = render()
    rows = {f.path: f for f in fields()}
    assert "## How several files combine" in text and "overrides: true" in text
    for name in SCHEMA["properties"]:
        assert f"| `{name}` |" in text
    for name in SCHEMA["$defs"]["Alias"]["properties"]:
        assert f"aliases.<alias>.{name}" in rows
    for name in FACTORS:
        assert f"rules.weights.{name}" in rows
    assert rows["aliases.<alias>.exploration"].range == "[0, 1]"
    assert rows["aliases.<alias>.exploration"].default == "`0.0`"
    assert rows["domains.definitions.<domain>.patterns"].default == "required"
    assert rows["circuit_breaker.timeout_s"].range == "(0, 86400]"
    assert rows["state.backend"].range == 'one of `"memory"`, `"redis"`'
    assert rows["task_fitness.boosts[].boost"].range == "[-1, 1]"
    # Every leaf property of the schema appears under some path.
    leaves = {name for _, node in _walk(SCHEMA) for name in node.get("properties", {})}
    assert leaves <= {p.replace("[]", "").rsplit(".", 1)[-1] for p in rows}


def test_importing_the_engine_imports_neither_yaml_nor_jsonschema():
    """Issue 11, the house: the routing core imports the typed models only (the loader, with
    YAML and the JSON Schema validator, comes on first use of load_policy)."""
    import subprocess
    import sys

    code = ("import sys, aisia_plugin.engine; "
            "print(sorted(m for m in ('yaml', 'jsonschema') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "[]"


def test_the_cores_defaults_are_read_from_the_schema(tmp_path):
    """Issue 11, the house: a default is written once, in the schema. The defaults the core uses
    without a loaded policy (a context built by a test or a plugin, the rules strategy's fallback
    weights, the SLA strategy's limits, the contextual strategy's settings) are the schema's: a
    schema with other defaults gives other values (in a fresh process, which reads it)."""
    import json
    import subprocess
    import sys

    schema = json.loads(schema_path().read_text(encoding="utf-8"))
    d = schema["$defs"]
    d["Bandit"]["properties"]["cost_weight"]["default"] = 0.375
    d["Weights"]["properties"]["quality"]["default"] = 0.625
    d["Sla"]["properties"]["target_p95_ms"]["default"] = 1234
    d["Contextual"]["properties"]["noise_variance"]["default"] = 0.25
    other = tmp_path / "schema.json"
    other.write_text(json.dumps(schema), encoding="utf-8")
    code = ("import pathlib, sys, aisia_plugin.resources as r; r.schema_path = lambda: pathlib.Path(sys.argv[1]); "
            "from types import SimpleNamespace; from aisia_plugin import decision, weights; "
            "from aisia_plugin.strategies import contextual, sla; "
            "print(decision.AliasSettings().cost_weight, weights.DEFAULT_WEIGHTS['quality'], sla.sla_limits(None)[0], "
            "contextual.settings_of(SimpleNamespace(policy=None, alias='auto'))[1])")
    for path, want in ((other, "0.375 0.625 1234.0 0.25"), (schema_path(), "0.1 0.03 2000.0 0.1")):
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                             check=True).stdout
        assert out.split() == want.split()
