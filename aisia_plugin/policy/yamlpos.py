"""YAML loading that remembers where every key and value came from (line and column)."""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from yaml.constructor import SafeConstructor

from .errors import PolicyIssue


@dataclass(frozen=True)
class Pos:
    file: str
    line: int
    column: int


Locations = dict  # tuple(path) -> {"key": Pos | None, "value": Pos}


class _Constructor(SafeConstructor):
    pass


def _mark(file: str, node) -> Pos:
    return Pos(file, node.start_mark.line + 1, node.start_mark.column + 1)


def load_yaml_with_positions(text: str, file: str) -> tuple[object, Locations, list[PolicyIssue]]:
    """Parse one YAML document; return (data, locations, issues).

    Duplicate keys are reported (PyYAML would silently keep the last one: a silently ignored
    setting)."""
    issues: list[PolicyIssue] = []
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark else 0
        col = mark.column + 1 if mark else 0
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        cmark = getattr(exc, "context_mark", None)
        if context and cmark is not None and mark is not None and (cmark.line, cmark.column) != (mark.line, mark.column):
            context = f"{context} started at line {cmark.line + 1}, column {cmark.column + 1}"
        msg = f"YAML syntax error: {problem}" + (f" ({context})" if context else "")
        for start, hint in _HINTS:
            if problem.startswith(start):
                msg += f"; {hint}"
                break
        return None, {}, [PolicyIssue(file, line, col, "", msg, "yaml")]
    if node is None:
        return {}, {(): {"key": None, "value": Pos(file, 1, 1)}}, []
    constructor = _Constructor()
    locations: Locations = {}

    def build(n, path: tuple, key_pos: Pos | None):
        locations[path] = {"key": key_pos, "value": _mark(file, n)}
        if isinstance(n, yaml.MappingNode):
            out: dict = {}
            for key_node, value_node in n.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    issues.append(PolicyIssue(file, *_lc(key_node), ".".join(map(str, path)), "keys must be plain scalars", "yaml"))
                    continue
                key = constructor.construct_object(key_node)
                if not isinstance(key, str):
                    key = str(key)
                if key in out:
                    first = locations[path + (key,)]["key"]
                    issues.append(PolicyIssue(
                        file, *_lc(key_node), ".".join(map(str, path + (key,))),
                        f"duplicate key '{key}' (first set at line {first.line}); only one value may be given",
                        "yaml",
                    ))
                    continue
                out[key] = build(value_node, path + (key,), _mark(file, key_node))
            return out
        if isinstance(n, yaml.SequenceNode):
            return [build(item, path + (i,), None) for i, item in enumerate(n.value)]
        try:
            return constructor.construct_object(n)
        except yaml.YAMLError as exc:
            issues.append(PolicyIssue(file, *_lc(n), ".".join(map(str, path)), f"bad YAML value: {exc}", "yaml"))
            return None

    data = build(node, (), None)
    return data, locations, issues


# Plain-words hints for PyYAML's most common complaints.
_HINTS = (
    ("expected <block end>", "check the indentation of this line against the keys above it"),
    ("mapping values are not allowed here", "a value containing ': ' must be quoted"),
    ("found character '\\t'", "YAML indentation must use spaces, not tabs"),
    ("could not find expected ':'", "a key needs a ':' after it, or a multi-line value needs quoting"),
)


def _lc(node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def position_of(locations: Locations, path: tuple, *, key: bool = False) -> Pos | None:
    """The closest known position of path (walking up to a parent when path is absent)."""
    p = tuple(path)
    while True:
        entry = locations.get(p)
        if entry is not None:
            if key and entry.get("key") is not None:
                return entry["key"]
            return entry["value"]
        if not p:
            return None
        p = p[:-1]
