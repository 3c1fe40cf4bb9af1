"""Glob matching where the most specific pattern wins (never the first one inserted)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Iterable, Optional


def specificity(pattern: str) -> tuple[int, int]:
    """More literal characters is more specific; then the longer pattern."""
    literal = sum(1 for ch in pattern if ch not in "*?[]")
    return literal, len(pattern)


def matches_any(patterns: Iterable[str], names: Iterable[str]) -> bool:
    names = [n.lower() for n in names if n]
    return any(fnmatchcase(n, p.lower()) for p in patterns for n in names)


def most_specific(patterns: Iterable[str], names: Iterable[str]) -> Optional[str]:
    names = [n.lower() for n in names if n]
    best, best_key = None, None
    for p in patterns:
        if any(fnmatchcase(n, p.lower()) for n in names):
            key = specificity(p)
            if best_key is None or key > best_key:
                best, best_key = p, key
    return best
