"""The policy reference (docs/policy-reference.md), generated from the JSON Schema.

Every field path is listed with its type, default, range or allowed values and description,
grouped by top-level section. Nothing here repeats a field name, a default or a range: they are
all read from the schema, so `aisia docs --check` (and tests/test_schema_models.py) notice when
the reference falls behind the schema."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..schema_defaults import RESTART_NOTE, start_only_settings
from .schema import load_schema
from .semantic import TASK_TYPES
from .yamlpos import MAX_DEPTH, MAX_NODES

# How the key of each map is shown in a field path (aliases.<alias>.strategy); `<name>` elsewhere.
PLACEHOLDERS = {
    "aliases": "<alias>",
    "teams": "<team>",
    "layers": "<layer>",
    "mode_packs": "<pack>",
    "mode_packs.<pack>.weights": "<factor>",
    "domains.definitions": "<domain>",
    "deployments": "<glob>",
    "deployments.<glob>.specialities": "<domain>",
    "task_fitness.models": "<model glob>",
    "task_fitness.models.<model glob>": "<task>",
    "costs.by_provider_prefix": "<prefix>",
    "signals.lexicons": "<language>",
}

MERGE_RULE = """\
A policy may be split over several files. They are read in the order given (on the command line,
with `--policy`, or in `$AISIA_POLICY`, whose entries are separated like `PATH`); a directory
stands for its `*.yaml` and `*.yml` files, taken in lexical order. Mappings are combined key by
key, so each file may add its own aliases, domains or mode packs. A leaf, meaning a scalar or a
whole list, that two of your files set to different values is a conflict, reported with both
locations; it is allowed only when the later file declares `overrides: true`, and then the later
value wins. Setting the same value in two files is not a conflict.

Your files are layered over the shipped default policies (the package's `policies/`): the
defaults are merged first, then your merged files over them, and there your values win without
`overrides: true`. A team file that only annotates `deployments:` or adds one alias is therefore a
complete policy; `aisia validate team.yaml`, `aisia explain --policy team.yaml` and the proxy
(`AISIA_POLICY=team.yaml`) all read it this way. A file saying `defaults: false` turns the
layering off: your files are then the whole policy. A shipped file you name yourself (as in
`aisia validate policies/`) counts as one of yours. The schema's defaults are applied after
merging, to whatever no file set."""


@dataclass(frozen=True)
class Field:
    section: str
    path: str
    type: str
    default: str
    range: str
    description: str


def reference_path() -> Path:
    """docs/policy-reference.md of the source checkout (the folder holding schemas/)."""
    from ..resources import schema_path

    return schema_path().parent.parent / "docs" / "policy-reference.md"


def _resolve(sub: dict, schema: dict) -> dict:
    while isinstance(sub, dict) and "$ref" in sub:
        sub = schema["$defs"][sub["$ref"].rsplit("/", 1)[-1]]
    return sub


def _ref_name(sub: dict) -> str | None:
    ref = sub.get("$ref") if isinstance(sub, dict) else None
    return ref.rsplit("/", 1)[-1] if ref else None


def _is_map(sub: dict) -> bool:
    return sub.get("type") == "object" and not sub.get("properties") and isinstance(sub.get("additionalProperties"), dict)


def _type(sub: dict, schema: dict) -> str:
    name = _ref_name(sub)
    sub = _resolve(sub, schema)
    t = sub.get("type")
    if _is_map(sub):
        return f"map of {_group(_type(sub['additionalProperties'], schema))}"
    if t == "object" and name:
        return f"object ({name})"
    if t == "array":
        items = sub.get("items", {})
        return f"list of {_group(_type(items, schema))}" if items else "list"
    if isinstance(t, list):
        return " or ".join(t)
    return t or "any"


def _group(t: str) -> str:
    return f"({t})" if " or " in t else t


def _json(v) -> str:
    return "`" + json.dumps(v, ensure_ascii=False) + "`"


def _bounds(sub: dict) -> str:
    lo, hi = sub.get("minimum"), sub.get("maximum")
    xlo, xhi = sub.get("exclusiveMinimum"), sub.get("exclusiveMaximum")
    low = (f"[{lo}" if lo is not None else f"({xlo}" if xlo is not None else None)
    high = (f"{hi}]" if hi is not None else f"{xhi})" if xhi is not None else None)
    if low and high:
        return f"{low}, {high}"
    if low:
        return (">= " if lo is not None else "> ") + str(lo if lo is not None else xlo)
    if high:
        return ("<= " if hi is not None else "< ") + str(hi if hi is not None else xhi)
    return ""


def _range(sub: dict, schema: dict) -> str:
    sub = _resolve(sub, schema)
    parts = []
    b = _bounds(sub)
    if b:
        parts.append(b)
    if "const" in sub:
        parts.append(f"must be {_json(sub['const'])}")
    if "enum" in sub:
        parts.append("one of " + ", ".join(_json(v) for v in sub["enum"]))
    if sub.get("minLength") == 1:
        parts.append("non-empty")
    elif "minLength" in sub:
        parts.append(f"at least {sub['minLength']} characters")
    if "maxLength" in sub:
        parts.append(f"at most {sub['maxLength']} characters")
    if "pattern" in sub:
        parts.append(f"matches `{sub['pattern']}`")
    if "minItems" in sub:
        parts.append(f"at least {sub['minItems']} item{'s' if sub['minItems'] != 1 else ''}")
    if "minProperties" in sub:
        parts.append(f"at least {sub['minProperties']} entr{'ies' if sub['minProperties'] != 1 else 'y'}")
    names = sub.get("propertyNames")
    if isinstance(names, dict):
        if "pattern" in names:
            parts.append(f"names match `{names['pattern']}`")
        if "enum" in names:
            parts.append("keys: " + ", ".join(f"`{n}`" for n in names["enum"]))
    if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
        items = _resolve(sub["items"], schema)
        if items.get("type") != "object":
            inner = _range(items, schema)
            if inner:
                parts.append(f"each: {inner}")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|") or "-"


def fields(schema: dict | None = None) -> list[Field]:
    """Every field path of the policy language, in schema order."""
    schema = schema or load_schema()
    out: list[Field] = []

    def walk(section: str, prefix: str, obj: dict, required: set):
        for name, prop in obj.get("properties", {}).items():
            path = f"{prefix}{name}"
            emit(section, path, prop, name in required)

    def emit(section: str, path: str, prop: dict, required: bool):
        target = _resolve(prop, schema)
        same = prop.get("x-aisia-layer-of")  # a layer's section: the fields of another, inherited (docs/teams.md)
        if same:
            out.append(Field(section, path, _type(prop, schema), "inherited", "-",
                             f"{prop.get('description', '')} Its fields are those of `{same}`."))
            return
        if "default" in prop:
            default = _json(prop["default"])
        elif "default" in target:
            default = _json(target["default"])
        else:
            default = "required" if required else "-"
        description = prop.get("description") or target.get("description", "")
        if path in start_only_settings():
            description += f" {RESTART_NOTE[0].upper()}{RESTART_NOTE[1:]}."
        out.append(Field(section, path, _type(prop, schema), default, _range(prop, schema), description))
        descend(section, path, target)

    def descend(section: str, path: str, target: dict):
        if target.get("type") == "object" and target.get("properties"):
            walk(section, path + ".", target, set(target.get("required", [])))
        elif _is_map(target):
            value = target["additionalProperties"]
            key = PLACEHOLDERS.get(path, "<name>")
            vt = _resolve(value, schema)
            if vt.get("type") == "object" and (vt.get("properties") or _is_map(vt)):
                entry = f"{path}.{key}"
                out.append(Field(section, entry, _type(value, schema), "-", _range(value, schema),
                                 value.get("description") or vt.get("description", "")))
                descend(section, entry, vt)
            else:
                out.append(Field(section, f"{path}.{key}", _type(value, schema), "-", _range(value, schema),
                                 value.get("description") or vt.get("description", "")))
        elif target.get("type") == "array" and isinstance(target.get("items"), dict):
            items = _resolve(target["items"], schema)
            if items.get("type") == "object" and items.get("properties"):
                walk(section, path + "[].", items, set(items.get("required", [])))

    root_required = set(schema.get("required", []))
    for name, prop in schema["properties"].items():
        target = _resolve(prop, schema)
        nested = target.get("type") == "object" and (target.get("properties") or _is_map(target))
        emit(name if nested else "", name, prop, name in root_required)
    return out


def render(schema: dict | None = None) -> str:
    """The whole reference, as markdown."""
    schema = schema or load_schema()
    rows = fields(schema)
    lines = [
        "# Policy reference",
        "",
        "<!-- Generated by `aisia docs` from schemas/aisia-policy.schema.json; do not edit by hand. -->",
        "",
        f"{schema.get('title', 'Policy')} (`{schema.get('$id', '')}`).",
        "",
        _cell(schema.get("description", "")),
        "",
        "Each table lists every field path of a section: `<alias>`, `<domain>` and the like stand for a",
        "key you choose, `[]` for every item of a list. *Default* is the value used when no file sets",
        "the field; *required* fields have none. Ranges use interval notation: `[0, 1]` includes both",
        "ends, `(0, 60]` excludes 0.",
        "",
        "Check a policy with `aisia validate [PATH ...]`; print the schema with `aisia schema`. Editors",
        "that speak the YAML language server validate as you type when a file starts with",
        "`# yaml-language-server: $schema=../schemas/aisia-policy.schema.json`.",
        "",
        "## How several files combine",
        "",
        MERGE_RULE,
        "",
        "## Checks beyond the schema",
        "",
        "`aisia validate` and the router also reject a policy when:",
        "",
        "- an alias's `strategy` is not provided by an installed plugin (built-in or third-party);",
        "- an alias's `mode_pack` is not a key of `mode_packs`, or its `domain_hint` not a key of `domains.definitions`;",
        "- a deployment's `specialities` names a domain that `domains.definitions` lacks;",
        f"- a task type (`task_hint`, the keys of `task_fitness.models.<model glob>`, `task_fitness.boosts[].tasks`) is not one of {', '.join(f'`{t}`' for t in TASK_TYPES)};",
        "- a number is NaN or infinite (`.nan`, `.inf`), or a set of weights (`rules.weights`, `mode_packs.<pack>.weights`) is all zero;",
        "- the reward's `quality_weight`, `latency_weight` and `feedback_weight` are all zero;",
        "- `circuit_breaker.max_retry_after_s` is below `circuit_breaker.rate_limit_cooldown_s`;",
        "- a domain pattern is not valid RE2 (RE2 matches in linear time, so backreferences and lookaround are rejected);",
        "- a signal lexicon entry (`signals.lexicons.<language>.<category>.<name>`) is not valid RE2, or matches the empty string;",
        "- a key appears twice in one mapping, or two of your files set a value differently without `overrides: true`;",
        "- a file is empty (or only comments, or `null`), or the merged policy defines no alias;",
        f"- a file expands to more than {MAX_NODES} values (YAML aliases `*name` repeat what they refer to each time) "
        f"or nests mappings and lists deeper than {MAX_DEPTH} levels. Merge keys (`<<: *base`) work: a mapping's own "
        "keys win over the merged ones.",
        "",
        "A `candidates` selector that matches no deployment is not an error: deployments come from",
        "LiteLLM at run time.",
    ]
    sections: dict[str, list[Field]] = {}
    for f in rows:
        sections.setdefault(f.section, []).append(f)
    for section, items in sections.items():
        lines += ["", f"## {section}" if section else "## Document", ""]
        if section:
            prop = schema["properties"][section]
            target = _resolve(prop, schema)
            intro = [prop.get("description", "")]
            # A definition's own description is added when it says more than its name
            # ("Bandit parameters."), like the reward formula.
            if _ref_name(prop) and len(target.get("description", "")) >= 60 and target["description"] != intro[0]:
                intro.append(target["description"])
            lines += [_cell(" ".join(i for i in intro if i)), ""]
        else:
            lines += ["Top-level fields of every policy file.", ""]
        lines += ["| Field | Type | Default | Range / values | Description |", "|---|---|---|---|---|"]
        for f in items:
            lines.append(f"| `{f.path}` | {_cell(f.type)} | {_cell(f.default)} | {_cell(f.range)} | {_cell(f.description)} |")
    return "\n".join(lines) + "\n"
