"""Loading a policy from one or several YAML files.

Steps, each reporting every problem it finds (never only the first): YAML syntax -> schema, per
file -> merge of the files -> schema defaults -> semantic checks -> typed models.

Merge rule: files are read in the order given; a directory contributes its *.yaml and *.yml files
in lexical order. Mappings merge key by key. A leaf (a scalar or a list) set by two files to
different values is a conflict, unless the later file says `overrides: true`, in which case its
value wins. Setting the same value twice is not a conflict."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from ..resources import policies_dir
from .errors import PolicyError, PolicyIssue, dotted
from .models import Policy
from .schema import fill_defaults, schema_issues
from .semantic import semantic_issues
from .yamlpos import Locations, Pos, load_yaml_with_positions, position_of

POLICY_ENV = "AISIA_POLICY"


def default_policy_paths() -> list[Path]:
    """The configured policy path: $AISIA_POLICY (files or directories separated by os.pathsep),
    else the policies shipped with the package."""
    env = os.environ.get(POLICY_ENV)
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [policies_dir()]


def expand_paths(paths) -> tuple[list[Path], list[PolicyIssue]]:
    files, issues = [], []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml") and q.is_file())
            if not found:
                issues.append(PolicyIssue(str(p), 0, 0, "", "directory holds no .yaml or .yml policy file", "io"))
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            issues.append(PolicyIssue(str(p), 0, 0, "", "no such file or directory", "io"))
    return files, issues


class LoadedPolicy:
    """A policy together with where each of its values came from."""

    def __init__(self, policy: Policy, locations: Locations, files: list[Path]):
        self.policy = policy
        self.locations = locations
        self.files = files


def load_policy(paths=None, *, known_strategies: set[str] | None = None) -> Policy:
    return load_policy_with_locations(paths, known_strategies=known_strategies).policy


def load_policy_with_locations(paths=None, *, known_strategies: set[str] | None = None) -> LoadedPolicy:
    if paths is None:
        paths = default_policy_paths()
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files, issues = expand_paths(paths)
    if any(i.kind == "io" for i in issues):
        raise PolicyError(issues)
    documents = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            issues.append(PolicyIssue(str(f), 0, 0, "", f"cannot read: {exc}", "io"))
            continue
        data, locs, yaml_issues = load_yaml_with_positions(text, str(f))
        issues.extend(yaml_issues)
        if data is None:
            continue
        if not isinstance(data, dict):
            issues.append(PolicyIssue(str(f), 1, 1, "", "a policy file must be a mapping at the top level", "schema"))
            continue
        issues.extend(schema_issues(data, locs, str(f)))
        documents.append((f, data, locs))
    merged, merged_locs, merge_issues = merge_documents(documents)
    issues.extend(merge_issues)
    merged.pop("overrides", None)
    merged["overrides"] = False
    if known_strategies is None:
        from ..plugins import strategy_names

        known_strategies = set(strategy_names())
    # Semantic checks run even when the schema found problems, so that one run reports every
    # error; on a document the schema rejected they must tolerate odd shapes.
    try:
        filled = fill_defaults(merged)
        issues.extend(semantic_issues(filled, merged_locs, known_strategies))
    except (AttributeError, TypeError, KeyError):
        if not issues:
            raise
    if issues:
        raise PolicyError(issues)
    try:
        policy = Policy.model_validate(filled)
    except ValidationError as exc:  # the schema should have caught it: report, located
        for e in exc.errors():
            pos = position_of(merged_locs, tuple(e["loc"]))
            issues.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                      pos.column if pos else 0, dotted(e["loc"]), e["msg"], "schema"))
        raise PolicyError(issues) from None
    return LoadedPolicy(policy, merged_locs, files)


def merge_documents(documents):
    merged: dict = {}
    locs: Locations = {}
    issues: list[PolicyIssue] = []
    for f, data, dlocs in documents:
        may_override = bool(data.get("overrides", False))
        _merge_into(merged, data, (), locs, dlocs, may_override, issues, str(f))
    return merged, locs, issues


def _merge_into(target: dict, source: dict, path: tuple, locs, slocs, may_override, issues, file):
    for key, value in source.items():
        p = path + (key,)
        if key == "overrides" and not path:
            continue
        if key not in target:
            target[key] = value
            _copy_locs(locs, slocs, p)
            continue
        existing = target[key]
        if isinstance(existing, dict) and isinstance(value, dict):
            _merge_into(existing, value, p, locs, slocs, may_override, issues, file)
            continue
        if existing == value:
            continue
        if may_override:
            target[key] = value
            _copy_locs(locs, slocs, p)
            continue
        first = position_of(locs, p)
        here = position_of(slocs, p)
        issues.append(PolicyIssue(
            file, here.line if here else 0, here.column if here else 0, dotted(p),
            f"conflicts with {first.file}:{first.line} which sets it to {existing!r}; "
            f"this file sets {value!r} (add 'overrides: true' to this file to make it win)",
            "conflict",
        ))


def _copy_locs(locs, slocs, prefix):
    n = len(prefix)
    for k in [k for k in locs if k[:n] == prefix]:
        del locs[k]
    for k, v in slocs.items():
        if k[:n] == prefix:
            locs[k] = v
    # Parents created by this file keep their first position.
    for i in range(n):
        locs.setdefault(prefix[:i], slocs.get(prefix[:i], {"key": None, "value": Pos("<merged>", 0, 0)}))
