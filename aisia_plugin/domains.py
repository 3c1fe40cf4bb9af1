"""Domain detection (AISIA seed section 6).

A domain's score is the number of occurrences of its patterns in the prompt times its weight;
the best-scoring domain wins (a tie goes to the first domain in policy order) when its score
reaches ``min_matches``.

The patterns are user-editable and the prompts attacker-controlled, so matching is RE2 only
(linear time). All the policy's patterns are compiled into one program, scanned once over the
prompt's UTF-8 bytes without submatch tracking (RE2's fast path). Each match is then attributed
to its domain by running the same alternation, with one capture group per domain, anchored at
the match's start: the leftmost-first alternative that produced the match is the one whose group
is set, so the attribution is exactly that of a scan with capture groups, at a fraction of its
cost. Attributions are memoised on the matched bytes and the bytes around them (which is all
that ``\\b``, ``^`` and ``$`` can see), so a word that recurs costs one scan step only."""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

import re2
from re2 import _re2

from .policy.patterns import compile_pattern

_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_ANCHOR_START = _re2.RE2.Anchor.ANCHOR_START
_MEMO_MAX = 4096


def _options(capture: bool):
    opts = re2.Options()
    opts.case_sensitive = False
    opts.log_errors = False
    opts.never_capture = not capture
    opts.max_mem = 64 << 20
    return opts


_PROBES = ("", "a", " ", "a b", "é", "0")


def _matches_empty(pattern: str) -> bool:
    """Does the pattern match the empty string somewhere in ordinary text? (it also names a pattern
    RE2 rejects, through compile_pattern's error)"""
    rx = compile_pattern(pattern)
    for probe in _PROBES:
        m = rx.search(probe)
        if m is not None and m.end() == m.start():
            return True
    return False


class DomainDetector:
    """Compiled once from a policy's ``domains`` section; ``scores``/``detect`` never raise."""

    def __init__(self, domains):
        self.enabled = bool(domains.enabled)
        self.min_matches = domains.min_matches
        self.max_scan_chars = domains.max_scan_chars
        self.names: list[str] = list(domains.definitions)
        self.weights: list[float] = [float(domains.definitions[n].weight) for n in self.names]
        groups, owners = [], []
        for i, n in enumerate(self.names):
            # A pattern that can match the empty string would match everywhere (and, placed in one
            # alternation, shadow the patterns after it): it counts nothing, so it is left out.
            pats = [p for p in domains.definitions[n].patterns if not _matches_empty(p)]
            if pats:
                groups.append("(" + "|".join(f"(?:{p})" for p in pats) + ")")
                owners.append(i)
        self._scan = self._capture = None
        self._group_of: list[tuple[int, int]] = []  # (capture group index, domain index)
        self._memo: dict[tuple, int] = {}
        if not groups:
            return
        combined = "|".join(groups)
        self._scan = re2.compile(combined, _options(capture=False))._regexp
        self._capture = re2.compile(combined, _options(capture=True))._regexp
        # Patterns may hold capture groups of their own: note where each domain's group sits.
        index = 1
        for g, owner in zip(groups, owners):
            self._group_of.append((index, owner))
            index += 1 + re2.compile(g[1:-1], _options(capture=True))._regexp.NumberOfCapturingGroups()

    # -- scanning ---------------------------------------------------------------------------

    def _bounded(self, text: str) -> str:
        if len(text) > self.max_scan_chars:
            half = self.max_scan_chars // 2
            return text[:half] + "\n" + text[-half:]
        return text

    def _domain_at(self, data: bytes, start: int, end: int) -> int:
        n = len(data)
        key = (data[start - 1] if start else -1, data[start:end], data[end] if end < n else -1)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        spans = self._capture.Match(_ANCHOR_START, data, start, n)
        found = -1
        for g, owner in self._group_of:
            if spans[g][0] >= 0:
                found = owner
                break
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[key] = found
        return found

    def counts(self, text: str) -> list[int]:
        """Occurrences per domain (policy order); all zeros when disabled or on a non-str."""
        counts = [0] * len(self.names)
        if not self.enabled or self._scan is None or not isinstance(text, str) or not text:
            return counts
        data = self._bounded(text).encode("utf-8", "replace")
        scan, pos, n = self._scan.Match, 0, len(data)
        while pos <= n:
            (start, end), = scan(_UNANCHORED, data, pos, n)
            if start < 0:
                break
            if end > start:
                d = self._domain_at(data, start, end)
                if d >= 0:
                    counts[d] += 1
                pos = end
            else:  # a pattern that can match the empty string: step over one byte
                pos = end + 1
        return counts

    def scores(self, text: str) -> dict[str, float]:
        """domain -> match count * weight, for the domains with at least one match (policy order)."""
        counts = self.counts(text)
        return {n: c * self.weights[i] for i, (n, c) in enumerate(zip(self.names, counts)) if c}

    def detect(self, text: str) -> Optional[str]:
        """The best-scoring domain, or None (no match, best score < min_matches, disabled)."""
        scores = self.scores(text)
        if not scores:
            return None
        # max() keeps the first of equal scores and scores keeps policy order: a tie goes to the
        # first domain of the policy.
        best = max(scores, key=scores.__getitem__)
        return best if scores[best] >= self.min_matches else None


@lru_cache(maxsize=1)
def _default_detector() -> DomainDetector:
    from .policy import load_policy

    return DomainDetector(load_policy().domains)


def detect_domain(text: str) -> Optional[str]:
    """The domain of a prompt under the shipped default policy, or None."""
    return _default_detector().detect(text)
