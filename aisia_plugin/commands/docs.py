"""`aisia docs [--check]`: regenerate docs/policy-reference.md from the policy JSON Schema.

With --check nothing is written: the exit status is 1 when the file on disk differs from what
the schema generates (a stale reference), 0 when it is current, 2 when it cannot be read."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from ..policy.reference import reference_path, render

MAX_DIFF_LINES = 40


def add_arguments(p):
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 if the reference is out of date with the schema")
    p.add_argument("--output", metavar="FILE", type=Path, default=None,
                   help="the reference file (default: docs/policy-reference.md of the source tree)")


def run(args) -> int:
    target: Path = args.output or reference_path()
    expected = render()
    if args.check:
        try:
            current = target.read_text(encoding="utf-8")
        except FileNotFoundError:
            sys.stderr.write(f"{target}: missing; run `aisia docs` to generate it\n")
            return 1
        except (OSError, UnicodeDecodeError) as exc:
            sys.stderr.write(f"{target}: cannot read: {exc}\n")
            return 2
        if current == expected:
            sys.stdout.write(f"ok: {target} is up to date with the schema\n")
            return 0
        diff = list(difflib.unified_diff(current.splitlines(), expected.splitlines(),
                                         f"{target} (on disk)", f"{target} (from the schema)", lineterm=""))
        sys.stderr.write(f"{target} is out of date with the schema; run `aisia docs` to regenerate it.\n")
        for line in diff[:MAX_DIFF_LINES]:
            sys.stderr.write(line + "\n")
        if len(diff) > MAX_DIFF_LINES:
            sys.stderr.write(f"... ({len(diff) - MAX_DIFF_LINES} more diff lines)\n")
        return 1
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text(encoding="utf-8") != expected:
            target.write_text(expected, encoding="utf-8")
            sys.stdout.write(f"wrote {target}\n")
        else:
            sys.stdout.write(f"{target} is already up to date\n")
    except OSError as exc:
        sys.stderr.write(f"{target}: cannot write: {exc}\n")
        return 2
    return 0
