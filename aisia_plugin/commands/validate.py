"""`aisia validate [PATH ...]`: check policy files the way the router loads them.

YAML syntax, the JSON Schema (per file), the merge of the files, their layering over the shipped
defaults (unless a file says `defaults: false`: a team file checked alone in CI is checked as the
proxy loads it), and the semantic rules, every problem reported in one run as
`file:line:column: path.to.field: message`.

With `--domain-prompts FILE`, a valid policy's domain detection is also measured on labelled
prompts (JSON Lines, one {"prompt": ..., "domain": a domain or null, "accept": [domains],
"dataset": a name} per line; `accept` and `dataset` optional): per-domain precision and recall,
the accuracy and the most frequent errors; with `--propose-words`, the words of each domain's
prompts that its patterns lack (aisia_plugin/domain_eval.py: the method), for review. It
reports; it does not change the exit status, except for a file it cannot read (2).

Exit status: 0 valid, 1 invalid, 2 usage or I/O error (a path that does not exist, a file that
cannot be read)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..policy.errors import PolicyError, PolicyIssue
from ..policy.loader import default_policy_paths, expand_paths, load_policy_with_locations
from ..schema_defaults import RESTART_NOTE, start_only_settings

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def add_arguments(p):
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="policy files or directories (a directory contributes its *.yaml and *.yml files in "
                        "lexical order); default: the configured policy path ($AISIA_POLICY, else the shipped policies)")
    p.add_argument("--format", choices=("text", "json", "github"), default="text",
                   help="text: one 'file:line:column: field: message' line per error (default); json: one object; "
                        "github: GitHub Actions workflow annotations")
    p.add_argument("--deployments", metavar="FILE",
                   help="also check a LiteLLM config: its model_list (each deployment's model_info.aisia annotation, "
                        "prices, ids) and that every alias selects at least one of its deployments")
    p.add_argument("--strict", action="store_true",
                   help="count warnings (settings that would do nothing) as errors: exit 1")
    p.add_argument("--domain-prompts", metavar="FILE",
                   help="also measure the policy's domain detection on labelled prompts (JSON Lines: "
                        "{\"prompt\": ..., \"domain\": name or null, \"accept\": [names], \"dataset\": name}): "
                        "per-domain precision and recall, accuracy, the most frequent errors")
    p.add_argument("--propose-words", action="store_true",
                   help="with --domain-prompts: also propose, for review, the words that mark each domain's prompts "
                        "and that its patterns do not match yet")
    p.add_argument("--min-datasets", type=int, default=1, metavar="N",
                   help="with --propose-words: a word must occur in prompts of N datasets of its domain (default 1; "
                        "2 or more when the prompts come from several datasets: one dataset's quirk is not the domain's)")
    p.add_argument("--siblings", action="store_true",
                   help="check each given file together with the other policy files of its directory, so that "
                        "references to another file resolve (for pre-commit, which passes only the changed files)")


def _with_siblings(paths) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        out.append(p.parent if p.is_file() else p)
    return out


def _unique(files: list[Path]) -> list[Path]:
    seen, out = set(), []
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


class Report:
    """What one check found: the exit status, the user's files, the shipped default files they
    were layered over, every issue, and the number of aliases of a valid policy."""

    def __init__(self, status: int, files: list[Path], issues: list[PolicyIssue], aliases: int = 0,
                 default_files: list[Path] = (), warnings: list[PolicyIssue] = (), domains: dict | None = None,
                 read_at_start: list[PolicyIssue] = ()):
        self.status, self.files, self.issues, self.aliases = status, files, issues, aliases
        self.default_files = list(default_files)
        self.warnings = list(warnings)
        self.domains = domains  # the domain detection's figures on --domain-prompts
        self.read_at_start = list(read_at_start)  # the settings the files set that apply at start only


def read_at_start(loaded) -> list[PolicyIssue]:
    """The settings the policy's files set that the proxy reads at start only (the schema marks
    them: schema_defaults.start_only_settings), each where it is set."""
    out = []
    for path in start_only_settings():
        entry = loaded.locations.get(tuple(path.split(".")))
        if entry is not None:
            pos = entry.get("key") or entry["value"]
            out.append(PolicyIssue(pos.file, pos.line, pos.column, path, RESTART_NOTE, "restart"))
    return out


def read_labelled_prompts(path, known) -> tuple[list[tuple[str, str | None, set, str]], list[PolicyIssue]]:
    """(dataset, label, accepted domains, prompt) per line of a labelled prompts file, and an issue
    per line that is not such an object or names a domain the policy does not define."""
    rows, issues = [], []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                issues.append(PolicyIssue(str(path), n, 0, "", f"not JSON: {exc}", "io"))
                continue
            label = row.get("domain") if isinstance(row, dict) else None
            accept = (row.get("accept") or []) if isinstance(row, dict) else []
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                problem = 'expected an object with a string "prompt"'
            elif not isinstance(accept, list) or not all(isinstance(a, str) for a in accept):
                problem = '"accept" must be a list of domain names'
            else:
                unknown = [d for d in ([label] if label is not None else []) + accept if d not in known]
                problem = f"unknown domain {unknown[0]!r}; the policy defines: {', '.join(known)}" if unknown else None
            if problem:
                issues.append(PolicyIssue(str(path), n, 0, "", problem, "io"))
            else:
                rows.append((str(row.get("dataset", label)), label, set(accept), row["prompt"]))
    return rows, issues


def domain_report(policy, rows, propose_words: bool = False, min_datasets: int = 1) -> dict:
    """The figures of the policy's domain detector on labelled prompts (read_labelled_prompts) and,
    given ``propose_words``, the words mined from them that its patterns lack."""
    from dataclasses import asdict

    from ..domain_eval import documents, known_words, mine, score
    from ..domains import DomainDetector

    detector = DomainDetector(policy.domains)
    names = list(policy.domains.definitions)
    report = {"prompts": len(rows), **score([detector.detect(r[3]) for r in rows], [r[:3] for r in rows], names)}
    if propose_words:
        docs = documents(rows)
        found = mine(docs, names, known=known_words(detector, docs), min_datasets=min_datasets)
        report["proposed_words"] = {d: [asdict(w) for w in ws] for d, ws in found.items() if ws}
    return report


def check(paths, deployments=None, strict: bool = False, domain_prompts=None, propose_words: bool = False,
          min_datasets: int = 1) -> Report:
    files, issues = expand_paths(paths)
    files = _unique(files)
    if issues:  # a path that does not exist, or a directory without policy files
        return Report(EXIT_USAGE, files, issues)
    order = {str(f): i for i, f in enumerate(files)}

    def ranked(found):
        return sorted(found, key=lambda i: (order.get(i.file, len(order)), i.file, i.line, i.column))

    try:
        loaded = load_policy_with_locations(files)
    except PolicyError as exc:
        status = EXIT_USAGE if any(i.kind == "io" for i in exc.issues) else EXIT_INVALID
        return Report(status, files, ranked(exc.issues))
    config_warnings = []
    if deployments is not None:
        found, config_warnings = deployment_issues(loaded, deployments)
        if found:
            status = EXIT_USAGE if any(i.kind == "io" for i in found) else EXIT_INVALID
            return Report(status, files, ranked(found))
    warnings = ranked(loaded.warnings + config_warnings)
    if strict and warnings:
        return Report(EXIT_INVALID, files, warnings, warnings=warnings)
    domains = None
    if domain_prompts is not None:
        try:
            rows, found = read_labelled_prompts(domain_prompts, list(loaded.policy.domains.definitions))
        except (OSError, UnicodeDecodeError) as exc:
            rows, found = [], [PolicyIssue(str(domain_prompts), 0, 0, "", f"cannot read: {exc}", "io")]
        if found:
            return Report(EXIT_USAGE, files, found)
        domains = domain_report(loaded.policy, rows, propose_words, min_datasets)
    return Report(EXIT_OK, files, [], len(loaded.policy.aliases), loaded.default_files, warnings, domains,
                  read_at_start(loaded))


def deployment_issues(loaded, path) -> tuple[list[PolicyIssue], list[PolicyIssue]]:
    """(errors, warnings) of a LiteLLM config checked against the policy as the proxy checks it at
    start: its deployments built and priced as the proxy builds them, an alias named like one of
    the config's models or router aliases (the proxy exits), an alias that would select none of
    its deployments; warnings: an annotation that annotates no deployment, a deployment LiteLLM
    cannot price that the router prices by guess."""
    from ..deployments import DeploymentError, read_config_file
    from ..litellm.costs import proxy_deployments
    from ..litellm.groups import collision_issues, plan
    from ..policy.yamlpos import position_of

    try:
        config = read_config_file(path)
        deps = proxy_deployments(config, loaded.policy)
    except DeploymentError as exc:
        return list(exc.issues), []
    except (OSError, UnicodeDecodeError) as exc:
        return [PolicyIssue(str(path), 0, 0, "", f"cannot read: {exc}", "io")], []
    settings = config.router_settings
    group_alias = settings.get("model_group_alias")
    groups = settings.get("routing_groups")
    planned = plan(loaded.policy, deps,
                   [m["model_name"] for m in config.model_list if isinstance(m, dict) and m.get("model_name")],
                   group_alias if isinstance(group_alias, dict) else None,
                   [g.get("group_name") for g in groups if isinstance(g, dict)] if isinstance(groups, list) else ())
    out = collision_issues(planned.collisions, loaded.locations)
    for name in planned.empty:
        pos = position_of(loaded.locations, ("aliases", name, "candidates"), key=True)
        out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                               f"aliases.{name}.candidates",
                               f"selects none of the {len(deps)} deployments of {path}: the alias would answer "
                               "every request with 'no deployment is available'", "semantic"))
    out.extend(_empty_layer_aliases(loaded, config, deps, path))
    return out, (_unmatched_annotations(loaded, deps, path) + _unpriced(config, deps)
                 + _free_under_a_target(loaded, deps) + _required_capabilities(loaded, deps)
                 + _local_first_sides(loaded, deps))


def _required_capabilities(loaded, deps) -> list[PolicyIssue]:
    """An alias whose `requires:` names a capability none of its candidates is known to have
    (docs/capabilities.md): its requests needing it would be refused, or may be."""
    from ..capabilities import gaps
    from ..deployments import selects
    from ..policy.yamlpos import position_of

    out = []
    for name, alias in loaded.policy.aliases.items():
        if not alias.requires:
            continue
        for gap in gaps(name, alias.requires, [d for d in deps if selects(alias.candidates, d)]):
            path = ("aliases", name, "requires")
            pos = position_of(loaded.locations, path, key=True)
            out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                                   ".".join(path), gap.message(), "warning"))
    return out


def _empty_layer_aliases(loaded, config, deps, path) -> list[PolicyIssue]:
    """An alias of a team's or a named layer that selects none of the config's deployments the
    operator's alias selects (a layer only narrows: docs/teams.md)."""
    from ..deployments import selects
    from ..litellm.costs import proxy_deployments
    from ..policy.yamlpos import position_of

    out = []
    for ref, policy in loaded.layers.items():
        raw = getattr(loaded.policy, ref.section)[ref.name]
        views = proxy_deployments(config, policy) if raw.deployments else deps
        for name in raw.aliases:
            operator = {d.id for d in deps if selects(loaded.policy.aliases[name].candidates, d)}
            if operator and not any(d.id in operator and selects(policy.aliases[name].candidates, d) for d in views):
                where = (ref.section, ref.name, "aliases", name)
                pos = position_of(loaded.locations, where + ("candidates",), key=True) \
                    or position_of(loaded.locations, where, key=True)
                out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                       pos.column if pos else 0, ".".join(where),
                                       f"leaves alias '{name}' without candidates: none of the {len(operator)} "
                                       f"deployments of {path} the operator's alias selects is selected by this "
                                       "layer (a layer only narrows)", "semantic"))
    return out


def _local_first_sides(loaded, deps) -> list[PolicyIssue]:
    """An alias with local-first on whose candidates hold no local deployment (local-first does
    nothing) or no cloud one (an unsure local answer has nowhere to go: it is kept)."""
    from ..deployments import selects
    from ..policy.yamlpos import position_of

    out = []
    for name, alias in loaded.policy.aliases.items():
        if not alias.local_first.enabled:
            continue
        chosen = [d for d in deps if selects(alias.candidates, d)]
        local = [d.id for d in chosen if d.local]
        if chosen and (not local or len(local) == len(chosen)):
            what = ("no local candidate (locality local, declared or inferred from a self-hosted provider): "
                    "local-first does nothing" if not local else
                    "no cloud candidate: an unsure local answer cannot be escalated and is kept")
            path = ("aliases", name, "local_first", "enabled")
            pos = position_of(loaded.locations, path, key=True)
            out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                                   ".".join(path), f"has {what} (docs/local-first.md)", "warning"))
    return out


def _free_under_a_target(loaded, deps) -> list[PolicyIssue]:
    """A spend target over a deployment LiteLLM has no price for and the router takes as free (a
    self-hosted provider): the target would count its calls at $0, as if they cost nothing."""
    from ..deployments import selects
    from ..pacing import rule_of
    from ..policy.yamlpos import position_of

    out = []
    for name, alias in loaded.policy.aliases.items():
        if rule_of(alias.budget) is None:
            continue
        free = [d for d in deps if selects(alias.candidates, d) and d.priced_by_litellm is False
                and d.input_cost_per_1m == 0 and d.output_cost_per_1m == 0]
        if not free:
            continue
        path = ("aliases", name, "budget", "target_usd_per_1k_requests")
        pos = position_of(loaded.locations, path, key=True)
        shown = ", ".join(f"{d.id} ({d.model}: {d.price_source.split(' (')[0]})" for d in free)
        out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                               ".".join(path), f"counts the calls of {shown} at $0: LiteLLM has no price for "
                               "them and the router takes them as free; if their calls cost anything, price them "
                               "(litellm_params input_cost_per_token/output_cost_per_token, or the policy's "
                               "deployments.<id>.input_cost_per_1m/output_cost_per_1m)", "warning"))
    return out


def _unmatched_annotations(loaded, deps, path) -> list[PolicyIssue]:
    """A `deployments:` key that matches no deployment (a misspelt id), or whose every deployment
    a more specific key annotates (only the most specific key applies): it annotates nothing."""
    import difflib

    from ..deployments import annotation_key
    from ..globs import matches_any
    from ..policy.yamlpos import position_of

    out = []
    ids = [d.id for d in deps]
    for key in loaded.policy.deployments:
        matched = [d for d in deps if matches_any([key], (d.id, d.model_name, d.model))]
        pos = position_of(loaded.locations, ("deployments", key), key=True)
        if matched:
            winners = {annotation_key(loaded.policy, d.id, d.model_name, d.model) for d in matched}
            if key not in winners:
                out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                       pos.column if pos else 0, f"deployments.{key}",
                                       f"annotates none of the {len(matched)} deployments it matches in {path}: a "
                                       f"more specific key annotates each ({', '.join(sorted(winners))}), and only "
                                       "the most specific key applies; move its settings there", "warning"))
            continue
        closest = difflib.get_close_matches(key, ids, n=1, cutoff=0.0)
        hint = f"; did you mean {closest[0]!r}?" if closest else ""
        out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                               f"deployments.{key}", f"annotates none of the {len(deps)} deployments of {path} "
                               f"(keys match an id, a model_name or a model){hint}", "warning"))
    return out


def _unpriced(config, deps) -> list[PolicyIssue]:
    """A deployment LiteLLM has no price for, which the router prices from its costs table."""
    out = []
    for k, d in enumerate(deps):
        if d.priced_by_litellm is not False or d.price_basis not in ("table", "default"):
            continue
        line, column = config.where(("model_list", k, "litellm_params", "model"))
        out.append(PolicyIssue(config.file, line, column, f"model_list.{k}.litellm_params.model",
                               f"LiteLLM has no price for {d.model}: it bills its requests None, and the router "
                               f"ranks and budgets it at ${d.input_cost_per_1m:g}/${d.output_cost_per_1m:g} per 1M "
                               f"tokens in/out from {d.price_source.split(' (')[0]}; price it in its litellm_params "
                               "(input_cost_per_token, output_cost_per_token) or name its model_info.base_model",
                               "warning"))
    return out


def run(args) -> int:
    paths = args.paths or default_policy_paths()
    if args.siblings:
        paths = _with_siblings(paths)
    if args.propose_words and not args.domain_prompts:
        print("aisia validate: --propose-words needs --domain-prompts FILE (the labelled prompts to mine)", file=sys.stderr)
        return EXIT_USAGE
    report = check(paths, args.deployments, args.strict, args.domain_prompts, args.propose_words, args.min_datasets)
    status, files, issues = report.status, report.files, report.issues
    out = sys.stdout
    if args.format == "json":
        json.dump({
            "valid": status == EXIT_OK,
            "files": [str(f) for f in files],
            "default_files": [str(f) for f in report.default_files],
            "aliases": report.aliases if status == EXIT_OK else None,
            "errors": [i.as_dict() for i in issues],
            "warnings": [i.as_dict() for i in report.warnings if i not in issues],
            "read_at_start": [i.as_dict() for i in report.read_at_start],
            "start_only_settings": list(start_only_settings()),
            **({"domain_detection": report.domains} if report.domains is not None else {}),
        }, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return status
    shown = issues + [w for w in report.warnings if w not in issues]
    for i in shown:
        if args.format == "github":
            out.write(github_annotation(i) + "\n")
        else:
            out.write(i.format() + "\n")
    if status == EXIT_OK:
        over = f" over the shipped defaults ({_plural(len(report.default_files), 'file')})" if report.default_files else ""
        out.write(f"ok: {_plural(len(files), 'file')}{over}, {_plural(report.aliases, 'alias', 'aliases')}\n")
        if args.format == "text":
            for i in report.read_at_start:
                out.write(i.format() + "\n")
        if report.domains is not None and args.format == "text":
            out.write(_domain_text(report.domains))
    else:
        bad_files = len({i.file for i in issues})
        what = "I/O error" if status == EXIT_USAGE else "invalid policy"
        sys.stderr.write(f"{what}: {_plural(len(issues), 'error')} in {_plural(bad_files, 'file')}\n")
    return status


def _domain_text(d: dict) -> str:
    from ..domain_eval import table

    fp = d["unlabelled_false_positive_rate"]
    lines = ["", f"domain detection on {_plural(d['prompts'], 'labelled prompt')}: accuracy "
             f"{'-' if d['accuracy'] is None else format(d['accuracy'], '.3f')} (label or accepted domain), "
             f"false-positive rate on the {d['unlabelled']} expecting no domain: {'-' if fp is None else f'{fp:.3f}'}",
             "", *table(d)]
    if d["errors"]:
        lines += ["", "most frequent errors (dataset -> predicted):"]
        lines += [f"  {k}: {v}" for k, v in list(d["errors"].items())[:10]]
    if "proposed_words" in d:
        lines += ["", "words the patterns do not match yet, by domain (for review; z: log-odds score, in n of the "
                  "domain's prompts / m others):"]
        lines += [f"  {dom}: " + ", ".join(f"{w['word']} (z {w['z']:.1f}, {w['support']}/{w['others']})" for w in ws)
                  for dom, ws in d["proposed_words"].items()] or ["  none"]
    return "\n".join(lines) + "\n"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotation(issue: PolicyIssue) -> str:
    """A GitHub Actions `::error` (or `::warning`) workflow command for one issue."""
    props = [f"file={_escape_property(issue.file)}"]
    if issue.line > 0:
        props.append(f"line={issue.line}")
        if issue.column > 0:
            props.append(f"col={issue.column}")
    props.append("title=aisia policy")
    where = issue.path or "<document>"
    level = "warning" if issue.kind == "warning" else "error"
    return f"::{level} {','.join(props)}::{_escape_data(f'{where}: {issue.message}')}"
