"""Loading a policy from one or several YAML files, layered over the shipped defaults.

Steps, each reporting every problem it finds (never only the first): YAML syntax -> schema, per
file -> merge of the user's files -> layering over the shipped defaults -> schema defaults ->
semantic checks -> typed models.

Merge rule (see MERGE_RULE in reference.py for the user's wording): the user's files are read in
the order given; a directory contributes its *.yaml and *.yml files in lexical order. Mappings
merge key by key. A leaf (a scalar or a list) set by two of the user's files to different values
is a conflict, unless the later file says `overrides: true`, in which case its value wins.
Setting the same value twice is not a conflict.

Layering: the user's merged files lie over the shipped defaults (the package's policies/), and
there the user's values win without `overrides: true`: a team file that only annotates
`deployments:` or adds one alias needs no copy of the shipped policies. A file that says
`defaults: false` makes the user's files the whole policy. Shipped files the user names
themselves (`aisia validate policies/`) count as the user's and are not layered twice."""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from ..resources import policies_dir
from .errors import PolicyError, PolicyIssue, dotted
from .layers import LayerRef, build_layers, split_layers, typed_sections
from .models import Policy
from .schema import fill_defaults, schema_issues
from .semantic import _map, inert_settings, semantic_issues
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
        try:
            mode = p.stat().st_mode
        except OSError:
            issues.append(PolicyIssue(str(p), 0, 0, "", "no such file or directory", "io"))
            continue
        if stat.S_ISDIR(mode):
            found = sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml") and q.is_file())
            if not found:
                issues.append(PolicyIssue(str(p), 0, 0, "", "directory holds no .yaml or .yml policy file", "io"))
            files.extend(found)
        elif stat.S_ISREG(mode):
            files.append(p)
        else:  # a FIFO would block the reader, /dev/zero never ends
            issues.append(PolicyIssue(str(p), 0, 0, "", "not a regular file (a policy must be a file or a directory)", "io"))
    return files, issues


class LoadedPolicy:
    """A policy together with where each of its values came from: `files` are the user's,
    `default_files` the shipped defaults they were layered over (empty with `defaults: false`)."""

    def __init__(self, policy: Policy, locations: Locations, files: list[Path], default_files: list[Path] = (),
                 warnings: list[PolicyIssue] = (), layers: dict | None = None):
        self.policy = policy
        self.layers: dict[LayerRef, Policy] = dict(layers or {})  # each layer's effective policy
        self.locations = locations
        self.files = files
        self.default_files = list(default_files)
        self.warnings = list(warnings)  # settings that do nothing (semantic.inert_settings)


def load_policy(paths=None, *, known_strategies: set[str] | None = None) -> Policy:
    return load_policy_with_locations(paths, known_strategies=known_strategies).policy


def load_policy_with_locations(paths=None, *, known_strategies: set[str] | None = None) -> LoadedPolicy:
    """The policy of `paths` (default: the configured policy path) over the shipped defaults."""
    if paths is None:
        paths = default_policy_paths()
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files, issues = expand_paths(paths)
    if any(i.kind == "io" for i in issues):
        raise PolicyError(issues)
    merged, merged_locs = _read_and_merge(files, _read_named, issues)
    default_files: list[Path] = []
    layered = merged.get("defaults", True) is not False
    removals: list[PolicyIssue] = []
    if layered:
        mine = {f.resolve() for f in files}
        default_files = [f for f in expand_paths([policies_dir()])[0] if f.resolve() not in mine]
        if default_files:
            base, base_locs = _read_and_merge(default_files, _read_shipped, issues)
            removals = _removals_of_nothing(base, merged, merged_locs)
            # The user's values win over the defaults: no conflict is possible at this step.
            _merge_into(base, merged, (), base_locs, merged_locs, True, issues, "")
            merged, merged_locs = base, base_locs
    merged.pop("overrides", None)
    merged["overrides"] = False
    merged["defaults"] = layered
    if not issues and not merged.get("aliases"):
        where = files[0] if files else Path("<policy>")
        issues.append(PolicyIssue(str(where), 1 if files else 0, 1 if files else 0, "aliases",
                                  "the policy defines no alias: it would route nothing (add one under 'aliases:', "
                                  "or drop 'defaults: false' to keep the shipped auto/* aliases)", "semantic"))
    if known_strategies is None:
        from ..plugins import strategy_names

        known_strategies = set(strategy_names())
    # Semantic checks run even when the schema found problems, so that one run reports every
    # error; on a document the schema rejected they must tolerate odd shapes.
    # The teams' and the named layers are laid over the operator's document once it is valid
    # (policy/layers.py): their fields inherit, so no default is filled into them.
    base, raw_layers = split_layers(merged)
    try:
        filled = fill_defaults(base)
        issues.extend(semantic_issues(filled, merged_locs, known_strategies))
    except (AttributeError, TypeError, KeyError):
        if not issues:
            raise
    if issues:
        raise PolicyError(issues)
    try:
        policy = Policy.model_validate({**filled, **typed_sections(raw_layers)})
    except ValidationError as exc:  # the schema should have caught it: report, located
        for e in exc.errors():
            pos = position_of(merged_locs, tuple(e["loc"]))
            issues.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                      pos.column if pos else 0, dotted(e["loc"]), e["msg"], "schema"))
        raise PolicyError(issues) from None
    issues.extend(_engine_issues(policy, merged_locs))
    if issues:
        raise PolicyError(issues)
    layers, found = build_layers(base, merged_locs, raw_layers, policy, fill=fill_defaults, merge=_merge_into,
                                 check=lambda doc, locs: semantic_issues(doc, locs, known_strategies))
    found += _model_file_issues(policy, raw_layers, merged_locs)
    if found:
        raise PolicyError(found)
    from ..plugins import strategy_settings

    warnings = removals + inert_settings(base, merged_locs, strategy_settings)
    warnings += _inert_layer_settings(base, raw_layers, merged_locs, strategy_settings)
    return LoadedPolicy(policy, merged_locs, files, default_files, warnings, layers)


def _layer_aliases(raw_layers: dict):
    """(section, layer name, alias, its fields as the layer writes them) of every layer."""
    for section, layers in raw_layers.items():
        for name, layer in _map(layers).items():
            for alias, fields in _map(_map(layer).get("aliases")).items():
                yield section, name, alias, fields


def _removals_of_nothing(shipped: dict, mine: dict, locs: Locations) -> list[PolicyIssue]:
    """Warnings for a lexicon entry the user's files remove (``name: null``) that the shipped
    lexicons do not have (a misspelt name removes nothing, and the entry meant keeps firing)."""
    out = []
    theirs = _map(_map(shipped.get("signals")).get("lexicons"))
    for language, categories in _map(_map(mine.get("signals")).get("lexicons")).items():
        for category, entries in _map(categories).items():
            known = _map(_map(theirs.get(language)).get(category))
            for entry, pattern in _map(entries).items():
                if pattern is None and entry not in known:
                    path = ("signals", "lexicons", language, category, entry)
                    close = difflib.get_close_matches(str(entry), [str(k) for k in known], n=1, cutoff=0.6)
                    hint = f"; did you mean '{close[0]}'?" if close else ""
                    pos = position_of(locs, path, key=True)
                    out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                           pos.column if pos else 0, dotted(path),
                                           f"removes nothing: the shipped lexicons have no {language} {category} "
                                           f"entry '{entry}'{hint}", "warning"))
    return out


def _inert_layer_settings(base: dict, raw_layers: dict, locs: Locations, settings_of) -> list[PolicyIssue]:
    """``inert_settings`` of each layer's aliases as they take effect (the operator's alias with the
    layer's fields over it), for the settings the layer itself writes, at the layer's lines."""
    out = []
    operator = _map(base.get("aliases"))
    for section, name, alias, fields in _layer_aliases(raw_layers):
        prefix = (section, name)
        mine, theirs = _map(fields), _map(operator.get(alias))
        effective = {**theirs, **mine}
        for key in ("budget", "contextual"):  # (one level deeper, as the merge does)
            if isinstance(mine.get(key), dict) and isinstance(theirs.get(key), dict):
                effective[key] = {**theirs[key], **mine[key]}
        at = {path[len(prefix):]: where for path, where in locs.items()
              if path[:len(prefix) + 2] == (*prefix, "aliases", alias)}
        for issue in inert_settings({"aliases": {alias: effective}}, at, settings_of):
            head, written = dotted(("aliases", alias)) + ".", mine
            for part in issue.path[len(head):].split(".") if issue.path.startswith(head) else ():
                written = written.get(part) if isinstance(written, dict) else None  # what the layer wrote
            if written is not None:
                out.append(replace(issue, path=f"{section}.{name}.{issue.path}"))
    return out


def peek_setting(path: tuple, paths=None):
    """The value the user's policy files give `path` (e.g. ``("proxy", "fail_closed")``), read
    from whichever of them parse as YAML even when the policy as a whole is invalid (a setting
    about what to do with an invalid policy must be readable then); the last file that sets it
    wins, as the merge would have it. None when no file sets it."""
    files, _ = expand_paths(default_policy_paths() if paths is None else paths)
    found = None
    for f in files:
        try:
            data, _, _ = load_yaml_with_positions(f.read_text(encoding="utf-8"), str(f))
        except (OSError, UnicodeDecodeError):
            continue
        for key in path:
            data = data.get(key) if isinstance(data, dict) else None
        if data is not None:
            found = data
    return found


def _engine_issues(policy: Policy, locs: Locations) -> list[PolicyIssue]:
    """What the engine builds from the policy that the schema and the semantic checks cannot
    foresee: the domains' and the signal lexicons' combined RE2 programs (each pattern compiles alone;
    together they may pass RE2's memory budget). Built here exactly as the engine builds them (scan.scanner_for,
    whose result the engine reuses)."""
    from ..domains import DomainPatternsError
    from ..scan import scanner_for

    from ..signals import SignalPatternError, reader_for

    try:
        scanner_for(policy.domains)
    except DomainPatternsError as exc:
        path = ("domains", "definitions", exc.domain) if exc.domain else ("domains", "definitions")
        pos = position_of(locs, path, key=True)
        return [PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                            dotted(path), str(exc).split(": ", 1)[-1] if exc.domain else str(exc), "semantic")]
    try:
        reader_for(policy.signals)
    except SignalPatternError as exc:  # the lexicon's combined programs (each entry was checked alone)
        e = exc.entry
        path = ("signals", "lexicons", e.language, e.category, e.name) if e else ("signals", "lexicons")
        pos = position_of(locs, path, key=True)
        return [PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                            dotted(path), str(exc), "semantic")]
    return []


def _model_file_issues(policy: Policy, raw_layers: dict, locs: Locations) -> list[PolicyIssue]:
    """Each ``contextual.prior_model`` the operator's aliases or a layer's name, read as the
    engine will read it (contextual_io.load_model_file, relative to this process's working
    directory): a file that cannot be read or is no model is the policy's error, at its field,
    not a failure of the proxy's start or of a team's first request."""
    from ..contextual import ModelFileError
    from ..contextual_io import load_model_file

    named = [(("aliases", alias, "contextual", "prior_model"), ap.contextual.prior_model)
             for alias, ap in policy.aliases.items() if ap.contextual is not None and ap.contextual.prior_model]
    for section, name, alias, fields in _layer_aliases(raw_layers):
        path = _map(_map(fields).get("contextual")).get("prior_model")
        if isinstance(path, str) and path:
            named.append(((section, name, "aliases", alias, "contextual", "prior_model"), path))
    issues, problems = [], {}
    for field, path in named:
        if path not in problems:
            try:
                load_model_file(path)
                problems[path] = None
            except ModelFileError as exc:
                problems[path] = "; ".join(exc.problems)
        if problems[path] is not None:
            pos = position_of(locs, field)
            issues.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                                      dotted(field), problems[path], "semantic"))
    return issues


@lru_cache(maxsize=1)
def default_signal_reader():
    """The signals.SignalReader of the shipped default policy (the one the loader checked)."""
    from ..signals import reader_for

    return reader_for(load_policy().signals)


@lru_cache(maxsize=1)
def default_domain_detector():
    """The domains.DomainDetector of the shipped default policy, built once (the one the loader
    checked, through scan.scanner_for)."""
    from ..scan import scanner_for

    return scanner_for(load_policy().domains).detector


def detect_domain(text: str):
    """The domain of a prompt under the shipped default policy, or None."""
    return default_domain_detector().detect(text)


def _read_and_merge(files, read, issues: list):
    """The files read with `read` and merged by the conflict rule; their issues go to `issues`."""
    documents = []
    for f in files:
        data, locs, file_issues = read(f)
        issues.extend(file_issues)
        if data is not None:
            documents.append((f, data, locs))
    merged, locs, merge_issues = merge_documents(documents)
    issues.extend(merge_issues)
    return merged, locs


def _read_document(f: Path):
    """One policy file: (data or None, locations, issues), its schema already checked."""
    try:
        text = f.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # located at the first byte that is not UTF-8
        before = exc.object[: exc.start]
        line, column = before.count(b"\n") + 1, exc.start - before.rfind(b"\n")
        return None, {}, [PolicyIssue(str(f), line, column, "", f"cannot read: {exc}", "io")]
    except OSError as exc:
        return None, {}, [PolicyIssue(str(f), 0, 0, "", f"cannot read: {exc}", "io")]
    data, locs, issues = load_yaml_with_positions(text, str(f))
    if issues and data is None:
        return None, {}, issues
    if data is None:
        return None, {}, issues + [PolicyIssue(
            str(f), 1, 1, "", "the file holds no policy (it is empty, only comments, or null); "
            "a policy file is a mapping such as 'version: 1' followed by its sections", "schema")]
    if not isinstance(data, dict):
        return None, {}, issues + [PolicyIssue(str(f), 1, 1, "", "a policy file must be a mapping at the top level", "schema")]
    return data, locs, issues + schema_issues(data, locs, str(f))


# Shipped files, read once per process (and again when one changes on disk): every load layers
# them, and YAML parsing is most of a load's time.
_SHIPPED: dict = {}


def _read_shipped(f: Path):
    try:
        st = f.stat()
    except OSError:
        return _read_document(f)
    key = (str(f.resolve()), st.st_mtime_ns, st.st_size)
    hit = _SHIPPED.get(key)
    if hit is None:
        if len(_SHIPPED) >= 64:
            _SHIPPED.clear()
        hit = _SHIPPED[key] = _read_document(f)
    # The merge builds the policy inside the documents' own mappings: hand out a copy.
    data, locs, issues = hit
    return _copy_tree(data), dict(locs), list(issues)


def _copy_tree(value):
    """A copy of a YAML document's mappings and lists, which a merge changes; its scalars are
    immutable and shared (copy.deepcopy took half of a policy load's time). The locations'
    table above is copied the same way: the merge replaces its entries, never changes one."""
    if isinstance(value, dict):
        return {k: _copy_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_tree(v) for v in value]
    return value


def _read_named(f: Path):
    """One of the user's files: a shipped one (`aisia validate policies/`, the default policy
    path) is read through the shipped files' cache, any other afresh."""
    try:
        shipped = f.resolve().parent == policies_dir().resolve()
    except OSError:
        shipped = False
    return _read_shipped(f) if shipped else _read_document(f)


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
