"""The schema's defaults, for the routing core as for the loader: schemas/ is the only place a
default is written (plain JSON read here, no jsonschema: importing the engine stays light).

``defaults_of("Sla")`` is a definition's defaults as a mapping (``{"target_p95_ms": 2000, ...}``);
code that needs a default outside a loaded policy (a context built without one, a strategy called
by a plugin or a test) reads it from there instead of writing the number again. It lives beside
the core, beneath the policy package (whose loader fills a policy from it), because the core's
own defaults (decision.AliasSettings) come from here and the core imports nothing above it."""

from __future__ import annotations

import copy
import json
from functools import lru_cache

from .resources import schema_path


@lru_cache(maxsize=1)
def load_schema() -> dict:
    with open(schema_path(), encoding="utf-8") as fh:
        return json.load(fh)


def resolve(subschema: dict) -> dict:
    """Follow a local $ref (the schema only uses #/$defs/... references)."""
    schema = load_schema()
    while "$ref" in subschema:
        ref = subschema["$ref"]
        assert ref.startswith("#/$defs/"), ref
        target = schema["$defs"][ref[len("#/$defs/"):]]
        # Sibling keywords next to $ref (description, default) only annotate.
        subschema = target
    return subschema


def fill_defaults(instance, subschema: dict | None = None):
    """Return a copy of instance with every absent property that has a schema default set.

    Defaults are filled recursively, so an absent object property defaulting to {} receives its
    own properties' defaults too."""
    if subschema is None:
        subschema = load_schema()
    sub = resolve(subschema)
    if isinstance(instance, dict) and sub.get("type") in ("object", None):
        out = dict(instance)
        props = sub.get("properties", {})
        for name, prop in props.items():
            if name not in out:
                default = prop["default"] if "default" in prop else resolve(prop).get("default", _MISSING)
                if default is _MISSING:
                    continue
                out[name] = copy.deepcopy(default)
        for name, value in list(out.items()):
            if name in props:
                out[name] = fill_defaults(value, props[name])
            elif isinstance(sub.get("additionalProperties"), dict):
                out[name] = fill_defaults(value, sub["additionalProperties"])
        return out
    if isinstance(instance, list) and isinstance(sub.get("items"), dict):
        return [fill_defaults(v, sub["items"]) for v in instance]
    return instance


_MISSING = object()


@lru_cache(maxsize=None)
def _defaults_of(name: str) -> dict:
    return fill_defaults({}, {"$ref": f"#/$defs/{name}"})


def defaults_of(name: str) -> dict:
    """The filled defaults of the schema's definition `name` (a fresh copy, safe to change)."""
    return copy.deepcopy(_defaults_of(name))


def range_of(name: str, field: str) -> tuple:
    """The inclusive bounds (minimum, maximum) the schema's definition `name` sets on `field`
    (None where it sets none): for code that must accept exactly what a policy may say."""
    prop = resolve(load_schema()["$defs"][name]["properties"][field])
    return prop.get("minimum"), prop.get("maximum")


# The schema's mark on a setting (or on a definition: all of its settings) that the proxy reads
# when it starts only: a hot reload reports a change of one and the proxy keeps the value it
# started with (litellm/reload.py), `aisia validate` and the reference list them.
START_ONLY_MARK = "x-aisia-read-at-start"
RESTART_NOTE = ("read at start only: a change applies when the proxy restarts (a hot reload reports it and keeps "
                "the value the proxy started with)")


@lru_cache(maxsize=1)
def start_only_settings() -> tuple[str, ...]:
    """The dotted paths of the settings marked ``START_ONLY_MARK``, in the schema's order
    (``("proxy.fail_closed", "state.backend", ...)``)."""
    out: list[str] = []

    def walk(sub: dict, path: tuple, marked: bool) -> None:
        target = resolve(sub)
        marked = marked or bool(sub.get(START_ONLY_MARK) or target.get(START_ONLY_MARK))
        props = target.get("properties") if target.get("type") == "object" else None
        if props and len(path) < 8:  # (settings sit a few levels down; the bound keeps a cycle finite)
            for name, prop in props.items():
                walk(prop, path + (name,), marked)
        elif marked:
            out.append(".".join(path))

    walk(load_schema(), (), False)
    return tuple(out)
