"""`aisia validate [PATH ...]`: check policy files the way the router loads them.

YAML syntax, the JSON Schema (per file), the merge of the files, and the semantic rules, every
problem reported in one run as `file:line:column: path.to.field: message`.

Exit status: 0 valid, 1 invalid, 2 usage or I/O error (a path that does not exist, a file that
cannot be read)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..policy.errors import PolicyError, PolicyIssue
from ..policy.loader import default_policy_paths, expand_paths, load_policy_with_locations

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def add_arguments(p):
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="policy files or directories (a directory contributes its *.yaml and *.yml files in "
                        "lexical order); default: the configured policy path ($AISIA_POLICY, else the shipped policies)")
    p.add_argument("--format", choices=("text", "json", "github"), default="text",
                   help="text: one 'file:line:column: field: message' line per error (default); json: one object; "
                        "github: GitHub Actions workflow annotations")
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


def check(paths) -> tuple[int, list[Path], list[PolicyIssue], int]:
    """(exit status, files checked, issues, number of aliases) for the given paths."""
    files, issues = expand_paths(paths)
    files = _unique(files)
    if issues:  # a path that does not exist, or a directory without policy files
        return EXIT_USAGE, files, issues, 0
    try:
        loaded = load_policy_with_locations(files)
    except PolicyError as exc:
        order = {str(f): i for i, f in enumerate(files)}
        ranked = sorted(exc.issues, key=lambda i: (order.get(i.file, len(order)), i.file, i.line, i.column))
        status = EXIT_USAGE if any(i.kind == "io" for i in ranked) else EXIT_INVALID
        return status, files, ranked, 0
    return EXIT_OK, files, [], len(loaded.policy.aliases)


def run(args) -> int:
    paths = args.paths or default_policy_paths()
    if args.siblings:
        paths = _with_siblings(paths)
    status, files, issues, n_aliases = check(paths)
    out = sys.stdout
    if args.format == "json":
        json.dump({
            "valid": status == EXIT_OK,
            "files": [str(f) for f in files],
            "aliases": n_aliases if status == EXIT_OK else None,
            "errors": [i.as_dict() for i in issues],
        }, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return status
    if args.format == "github":
        for i in issues:
            out.write(github_annotation(i) + "\n")
    else:
        for i in issues:
            out.write(i.format() + "\n")
    if status == EXIT_OK:
        out.write(f"ok: {_plural(len(files), 'file')}, {_plural(n_aliases, 'alias', 'aliases')}\n")
    else:
        bad_files = len({i.file for i in issues})
        what = "I/O error" if status == EXIT_USAGE else "invalid policy"
        sys.stderr.write(f"{what}: {_plural(len(issues), 'error')} in {_plural(bad_files, 'file')}\n")
    return status


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotation(issue: PolicyIssue) -> str:
    """A GitHub Actions `::error` workflow command for one issue."""
    props = [f"file={_escape_property(issue.file)}"]
    if issue.line > 0:
        props.append(f"line={issue.line}")
        if issue.column > 0:
            props.append(f"col={issue.column}")
    props.append("title=aisia policy")
    where = issue.path or "<document>"
    return f"::error {','.join(props)}::{_escape_data(f'{where}: {issue.message}')}"
