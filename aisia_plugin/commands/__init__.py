"""One module per `aisia` sub-command, each with add_arguments(parser) and run(args) -> int."""

from __future__ import annotations

import sys


def read_input(command: str, load, invalid, path, what: str):
    """load(path), or the exit status after the message on stderr: 1 when the file is invalid
    (``invalid``'s located problems), 2 when it cannot be read."""
    try:
        return load(path)
    except invalid as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except (OSError, UnicodeDecodeError) as exc:
        print(f"aisia {command}: cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 2
