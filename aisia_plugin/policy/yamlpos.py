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
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        return None, {}, [_nested_too_deeply(text, file)]
    except yaml.YAMLError as exc:
        return None, {}, [_syntax_error(exc, file)]
    if node is None:  # no document at all (empty, or only comments): the caller says what that means
        return None, {}, []
    builder = _Builder(file)
    try:
        data = builder.build(node, (), None)
    except _Stop:
        return None, {}, builder.issues
    return data, builder.locations, builder.issues


def _syntax_error(exc: yaml.YAMLError, file: str) -> PolicyIssue:
    """A YAML syntax error located at its mark, with its context and a hint where one helps."""
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
    return PolicyIssue(file, line, col, "", msg, "yaml")


class _Stop(Exception):
    """The document is refused as a whole (too many values, nested too deeply)."""


class _Builder:
    """Builds the document's data from its nodes, recording where each value was written and
    what is wrong with it (duplicate keys, non-scalar keys, bad merges, bad values)."""

    def __init__(self, file: str):
        self.file = file
        self.issues: list[PolicyIssue] = []
        self.locations: Locations = {}
        self.constructor = _Constructor()
        self.built = 0

    def _issue(self, n, path: tuple, message: str) -> None:
        self.issues.append(PolicyIssue(self.file, *_lc(n), ".".join(map(str, path)), message, "yaml"))

    def _stop(self, n, path: tuple, message: str):
        self._issue(n, path, message)
        raise _Stop

    def _key(self, key_node) -> str:
        key = self.constructor.construct_object(key_node)
        return key if isinstance(key, str) else str(key)

    def build(self, n, path: tuple, key_pos: Pos | None, depth: int = 0):
        self.built += 1
        if self.built > MAX_NODES:
            self._stop(n, path, f"the document expands to more than {MAX_NODES} values (YAML aliases such as *name "
                                "repeat what they refer to each time): refusing to expand it further")
        if depth > MAX_DEPTH:
            self._stop(n, (), f"nested too deeply: more than {MAX_DEPTH} levels of mappings and lists")
        self.locations[path] = {"key": key_pos, "value": _mark(self.file, n)}
        if isinstance(n, yaml.MappingNode):
            return self._mapping(n, path, depth)
        if isinstance(n, yaml.SequenceNode):
            return [self.build(item, path + (i,), None, depth + 1) for i, item in enumerate(n.value)]
        try:
            return self.constructor.construct_object(n)
        except yaml.YAMLError as exc:
            self._issue(n, path, f"bad YAML value: {exc}")
            return None

    def _mapping(self, n, path: tuple, depth: int) -> dict:
        out: dict = {}
        merged = []
        for key_node, value_node in n.value:
            if key_node.tag == _MERGE_TAG:
                merged.append(value_node)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self._issue(key_node, path, "keys must be plain scalars")
                continue
            key = self._key(key_node)
            if key in out:
                first = self.locations[path + (key,)]["key"]
                self._issue(key_node, path + (key,),
                            f"duplicate key '{key}' (first set at line {first.line}); only one value may be given")
                continue
            out[key] = self.build(value_node, path + (key,), _mark(self.file, key_node), depth + 1)
        for value_node in merged:
            self._merge(value_node, out, path, depth)
        return out

    def _merge(self, value_node, out: dict, path: tuple, depth: int) -> None:
        """Merge keys (`<<: *base`, `<<: [*a, *b]`): the mapping's own keys win, then the merged
        mappings in the order listed; merged values keep the position where they are written."""
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for src in sources:
            if not isinstance(src, yaml.MappingNode):
                self._issue(src, path, "a merge key '<<' takes a mapping or a list of mappings")
                continue
            for skey_node, svalue_node in src.value:
                if skey_node.tag == _MERGE_TAG or not isinstance(skey_node, yaml.ScalarNode):
                    continue
                skey = self._key(skey_node)
                if skey not in out:
                    out[skey] = self.build(svalue_node, path + (skey,), _mark(self.file, skey_node), depth + 1)


_MERGE_TAG = "tag:yaml.org,2002:merge"
# Bounds on what one document may expand to (documented in docs/policy-reference.md): the shipped
# policies hold under a thousand values and six levels; a "billion laughs" file of nested aliases
# would otherwise be expanded alias by alias until memory runs out.
MAX_NODES = 100_000
MAX_DEPTH = 64


def _nested_too_deeply(text: str, file: str) -> PolicyIssue:
    """Where the nesting of `text` first passes MAX_DEPTH (PyYAML's composer recurses once per
    level, so a deep enough document exhausts Python's stack before any value is built)."""
    depth = 0
    try:
        for tok in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(tok, (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken,
                                yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)):
                depth += 1
                if depth > MAX_DEPTH:
                    return PolicyIssue(file, *_lc(tok), "", f"nested too deeply: more than {MAX_DEPTH} levels "
                                                            "of mappings and lists", "yaml")
            elif isinstance(tok, (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)):
                depth -= 1
    except yaml.YAMLError:
        pass
    return PolicyIssue(file, 0, 0, "", f"nested too deeply: more than {MAX_DEPTH} levels of mappings and lists", "yaml")


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
