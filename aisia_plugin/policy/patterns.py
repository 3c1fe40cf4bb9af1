"""User-editable patterns run on attacker-controlled prompts, so they are compiled with RE2,
whose matching time is linear in the input. A pattern RE2 cannot compile (backreferences,
lookaround) is rejected instead of being handed to a backtracking engine."""

from __future__ import annotations

from functools import lru_cache

import re2

_OPTIONS = re2.Options()
_OPTIONS.case_sensitive = False
_OPTIONS.log_errors = False
_OPTIONS.max_mem = 8 << 20


class PatternError(ValueError):
    pass


def compile_pattern(pattern: str):
    try:
        return _compiled(pattern)
    except re2.error as exc:
        raise PatternError(f"pattern '{pattern}' is rejected: {_reason(exc)}") from None


# RE2's own cache keeps the last 128 programs; a policy load checks some 280 (the shipped
# domains' and signals' patterns, then their alternations), in the same order each time, so that
# cache never hit and every load (each reload, each `aisia validate`) compiled them all again.
# A compiled program is immutable and shared the same way RE2's cache shares it.
@lru_cache(maxsize=4096)
def _compiled(pattern: str):
    return re2.compile(pattern, _OPTIONS)


_HINT = "patterns must be RE2 syntax, which matches in linear time: no backreferences or lookaround"


def _reason(exc: Exception) -> str:
    detail = exc.args[0] if exc.args else str(exc)
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    detail = str(detail)
    if "invalid escape sequence: \\" in detail and detail[-1:].isdigit():
        return f"backreference {detail.rsplit(': ', 1)[-1]} is not supported; {_HINT}"
    if "invalid perl operator: (?=" in detail or "invalid perl operator: (?!" in detail:
        return f"lookahead {detail.rsplit(': ', 1)[-1]} is not supported; {_HINT}"
    if "invalid perl operator: (?<" in detail:
        return f"lookbehind {detail.rsplit(': ', 1)[-1]} is not supported; {_HINT}"
    return f"RE2 error '{detail}'; {_HINT}"


def compile_alternation(patterns: list[str]):
    """One compiled RE2 program matching any of the patterns (each wrapped as a group)."""
    return compile_pattern("|".join(f"(?:{p})" for p in patterns))
