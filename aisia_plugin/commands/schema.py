"""`aisia schema`: print the policy JSON Schema (for editors, CI and other tools)."""

from __future__ import annotations

import sys

from ..resources import schema_path


def add_arguments(p):
    p.add_argument("--path", action="store_true", help="print where the schema file is instead of its content")


def run(args) -> int:
    try:
        path = schema_path()
        if args.path:
            sys.stdout.write(f"{path}\n")
            return 0
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        sys.stderr.write(f"aisia schema: cannot read the schema: {exc}\n")
        return 2
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
