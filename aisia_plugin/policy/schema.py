"""The JSON Schema: loading it, checking a document against it, filling its defaults.

The schema file in schemas/ is the single source of truth for field names, types, ranges and
defaults; nothing here repeats any of them."""

from __future__ import annotations

import difflib
import math
from functools import lru_cache

import jsonschema
from jsonschema import Draft202012Validator

from ..schema_defaults import fill_defaults, load_schema, resolve  # noqa: F401 (the loader's, from here)
from .errors import PolicyIssue, dotted
from .yamlpos import Locations, position_of


@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _allowed_keys(subschema: dict) -> list[str]:
    return list(resolve(subschema).get("properties", {}).keys())


@lru_cache(maxsize=None)
def _definition_validator(name: str) -> Draft202012Validator:
    schema = load_schema()
    return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]})


def definition_issues(name: str, data, locations: Locations, file: str, prefix: tuple = ()) -> list[PolicyIssue]:
    """Every violation of the schema's `$defs/<name>` by `data`, a value found at `prefix` of a
    document whose positions are `locations` (a deployment's `model_info.aisia` in a LiteLLM config)."""
    return _issues(_definition_validator(name), data, locations, file, tuple(prefix))


def schema_issues(data, locations: Locations, file: str) -> list[PolicyIssue]:
    """Every schema violation of one document, each located and worded for a person."""
    return _issues(_validator(), data, locations, file, ())


def _issues(validator, data, locations: Locations, file: str, prefix: tuple) -> list[PolicyIssue]:
    issues = []
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    # A value of the wrong type also fails the keywords that constrain that type (an enum, a
    # range): report only the type, the root cause.
    mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type" and not _about_key(e)}
    for err in errors:
        if err.validator != "type" and not _about_key(err) and tuple(err.absolute_path) in mistyped:
            continue
        issues.extend(_to_issues(err, locations, file, prefix))
    issues.extend(_non_finite_issues(data, prefix, locations, file))
    # One problem may be reported by several keywords; keep distinct messages per field.
    seen, unique = set(), []
    for i in issues:
        k = (i.line, i.column, i.path, i.message)
        if k not in seen:
            seen.add(k)
            unique.append(i)
    return unique


def _to_issues(err: jsonschema.ValidationError, locations: Locations, file: str, prefix: tuple) -> list[PolicyIssue]:
    path = prefix + tuple(err.absolute_path)
    schema = err.schema if isinstance(err.schema, dict) else {}
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = list(schema.get("properties", {}).keys())
        out = []
        for key in [k for k in err.instance if k not in allowed]:
            pos = position_of(locations, path + (key,), key=True)
            suggestion = difflib.get_close_matches(key, allowed, n=1, cutoff=0.5)
            if suggestion:
                hint = f"; did you mean '{suggestion[0]}'?"
            else:
                hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
            out.append(PolicyIssue(file, pos.line if pos else 0, pos.column if pos else 0,
                                   dotted(path + (key,)), f"unknown key '{key}'{hint}"))
        return out
    return [_to_issue(err, locations, file, prefix)]


def _about_key(err: jsonschema.ValidationError) -> bool:
    """Whether the error is about a mapping's key (a propertyNames failure), not a value."""
    return "propertyNames" in err.schema_path


def _to_issue(err: jsonschema.ValidationError, locations: Locations, file: str, prefix: tuple) -> PolicyIssue:
    path = prefix + tuple(err.absolute_path)
    validator = err.validator
    if _about_key(err):
        # jsonschema reports the failing keyword of the propertyNames subschema, at the path of
        # the mapping, with the offending name as the instance.
        bad = err.instance
        pos = position_of(locations, path + (bad,), key=True)
        if validator == "enum":
            choices = [str(c) for c in err.validator_value]
            suggestion = difflib.get_close_matches(str(bad), choices, n=1, cutoff=0.5)
            hint = f"; did you mean '{suggestion[0]}'?" if suggestion else f"; allowed keys: {', '.join(choices)}"
            msg = f"unknown key '{bad}'{hint}"
        elif validator == "pattern":
            msg = f"invalid name '{bad}': names here must match {err.validator_value}"
        else:
            msg = f"invalid name '{bad}': {err.message}"
        if str(bad) in ("True", "False"):  # YAML reads an unquoted no, yes, on, off (Norwegian's code too) as a boolean
            msg += "; YAML reads an unquoted no, yes, on or off as a boolean: quote the name ('no')"
        return PolicyIssue(file, pos.line if pos else 0, pos.column if pos else 0, dotted(path + (bad,)), msg)
    if validator == "required":
        # Point at the key of the mapping that lacks the field (its value starts at its first
        # present field, which is not where the missing one belongs).
        pos = position_of(locations, path, key=True)
        line, col = (pos.line, pos.column) if pos else (0, 0)
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return PolicyIssue(file, line, col, dotted(path + (missing,)), f"required field '{missing}' is missing")
    pos = position_of(locations, path)
    line, col = (pos.line, pos.column) if pos else (0, 0)
    if validator in ("minItems", "minProperties") and err.validator_value == 1:
        return PolicyIssue(file, line, col, dotted(path), "must not be empty")
    if validator == "type":
        expected = err.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        hint = ""
        if "number" in str(expected) and isinstance(err.instance, str) and _looks_numeric(err.instance):
            # YAML 1.1 (PyYAML) reads 1e-3 as a string: a float needs a dot and a signed exponent.
            hint = f"; YAML reads {err.instance} as text: write it as {_as_yaml_float(err.instance)}"
        return PolicyIssue(file, line, col, dotted(path),
                           f"expected {expected}, got {_type_name(err.instance)} {_short(err.instance)}{hint}")
    if validator == "enum":
        choices = [c for c in err.validator_value if c is not None]
        suggestion = difflib.get_close_matches(str(err.instance), [str(c) for c in choices], n=1, cutoff=0.5)
        hint = f"; did you mean '{suggestion[0]}'?" if suggestion else ""
        return PolicyIssue(file, line, col, dotted(path), f"{_short(err.instance)} is not one of {', '.join(map(str, choices))}{hint}")
    if validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        words = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[validator]
        return PolicyIssue(file, line, col, dotted(path), f"value {err.instance} is out of range: must be {words} {err.validator_value}")
    if validator == "const":
        return PolicyIssue(file, line, col, dotted(path), f"must be {err.validator_value!r}, got {_short(err.instance)}")
    return PolicyIssue(file, line, col, dotted(path), err.message)


def _non_finite_issues(value, path: tuple, locations: Locations, file: str) -> list[PolicyIssue]:
    """NaN and infinities (YAML .nan, .inf) pass JSON Schema's range keywords, which compare with
    < and >; no policy number may be one of them."""
    if isinstance(value, float) and not math.isfinite(value):
        pos = position_of(locations, path)
        shown = ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
        return [PolicyIssue(file, pos.line if pos else 0, pos.column if pos else 0, dotted(path),
                            f"must be a finite number, got {shown}")]
    out: list[PolicyIssue] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_non_finite_issues(v, path + (k,), locations, file))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_non_finite_issues(v, path + (i,), locations, file))
    return out


def _looks_numeric(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def _as_yaml_float(s: str) -> str:
    """'1e-3' -> '1.0e-3', a spelling YAML 1.1 reads as a number."""
    mantissa, _, exponent = s.lower().partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if exponent and exponent[0] not in "+-":
        exponent = "+" + exponent
    return f"{mantissa}e{exponent}" if exponent else mantissa


def _type_name(v) -> str:
    if v is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(type(v), type(v).__name__)


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."
