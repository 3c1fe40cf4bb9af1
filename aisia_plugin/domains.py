"""Domain detection (AISIA seed section 6).

A domain's score is the number of occurrences of its patterns in the prompt times its weight;
the best-scoring domain wins (a tie goes to the first domain in policy order) when its score
reaches ``min_matches``. The occurrences are those of one leftmost-first scan with all the
policy's patterns: each is counted once, for the first domain (in policy order) whose patterns
match where it starts.

The patterns are user-editable and the prompts attacker-controlled, so matching is RE2 only
(linear time in the prompt, never a backtracking engine), on the prompt's UTF-8 bytes cut to
``max_scan_chars`` (its start and its end). What costs is the number of native calls (about a
microsecond each through the binding) and the number of passes over the bytes (a few microseconds
per 2 KB each), so ``detect`` makes as few of both as the answer needs:

1. The union program (every domain's patterns, no submatch tracking: RE2's DFA fast path) finds
   the first occurrence. None: no domain, after a single pass.
2. Its domain is the first one whose patterns match where it starts: an anchored ``RE2::Set``
   (one entry per domain) answers in one short call, memoised on the occurrence's bytes and the
   byte on each side, which is all that ``\\b``, ``^`` and ``$`` can see (a recurring word costs
   a dictionary look-up).
3. An unanchored ``RE2::Set`` over the rest of the prompt tells which domains occur after it, in
   the same pass. None: the answer is that one occurrence. Only the same domain: every later
   occurrence is also its own, so its count is at least 2 and, when that is enough to reach
   ``min_matches`` (the shipped policy's case), the answer is known without counting further.
   Otherwise the scan goes on to the end of the prompt (step 1 from the end of each occurrence,
   step 2 for its domain), which is what ``counts`` always does.

So a prompt with no domain or with one domain (three prompts out of four on RouterArena) costs
one pass and two or three calls, however many keywords it holds; a prompt mixing domains costs
two passes and two calls per occurrence (one when memoised). The Sets see the bytes after a
position through a one-byte window (entries prefixed with ``\\C``, any byte), so that ``\\b`` and
``^`` keep their true left context. A Set cannot fall back to the NFA and reports a failure as
"no match", but RE2 keeps flushing its DFA cache on a Set match rather than giving up, and a budget
too small for the DFA fails at ``Compile()``: at policy load, never silently on a prompt.

Patterns that can match the empty string are left out: they would count everywhere, and, placed
in the union, shadow the patterns after them. The test is exact (every assertion context)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional

import re2
from re2 import _re2

from .policy.patterns import compile_pattern

_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_ANCHOR_START = _re2.RE2.Anchor.ANCHOR_START
_ANCHOR_BOTH = _re2.RE2.Anchor.ANCHOR_BOTH
_MAX_MEM = 64 << 20
_MEMO_MAX = 4096


def _options():
    opts = re2.Options()
    opts.case_sensitive = False
    opts.log_errors = False
    opts.never_capture = True
    opts.max_mem = _MAX_MEM
    return opts


# Whether an RE2 pattern matches the empty string at a position depends only on the assertions
# true there (^ $ \A \z \b \B, multi-line or not), i.e. on the byte before the position (none,
# a newline, a word byte, another byte) and the byte after it (the same four cases): the 16
# contexts below cover them all, so the test is exact, not a sample.
_SIDES = ("", "\n", "a", " ")
_CONTEXTS = tuple(((before + after).encode(), len(before)) for before in _SIDES for after in _SIDES)


def _matches_empty(pattern: str) -> bool:
    """Can the pattern match the empty string anywhere? (compile_pattern first names a pattern
    RE2 rejects, with the policy's error message)"""
    compile_pattern(pattern)
    match = re2.compile(pattern, _options())._regexp.Match
    return any(match(_ANCHOR_BOTH, text, pos, pos)[0][0] >= 0 for text, pos in _CONTEXTS)


def _compiled_set(anchor, entries: list[str], opts, names: list[str]):
    rset = _re2.Set(anchor, opts)
    for k, entry in enumerate(entries):
        if rset.Add(entry.encode("utf-8")) != k:
            raise ValueError(f"domain '{names[k]}': RE2 cannot add its patterns to a set")
    if not rset.Compile():
        raise ValueError("domain patterns: the RE2 set does not fit its memory budget")
    return rset.Match


class DomainDetector:
    """Compiled once from a policy's ``domains`` section; ``scores``/``detect`` never raise."""

    def __init__(self, domains):
        self.enabled = bool(domains.enabled)
        self.min_matches = domains.min_matches
        self.max_scan_chars = domains.max_scan_chars
        self.names: list[str] = list(domains.definitions)
        self.weights: list[float] = [float(domains.definitions[n].weight) for n in self.names]
        # The early answers rely on a partial count times the weight being a lower bound of the
        # score: true for the weights the schema allows (> 0); any other falls back to counting.
        self._bounds_hold = all(w > 0 and math.isfinite(w) for w in self.weights)
        alternations, self._owner = [], []  # per Set entry: its patterns, its domain's index
        for i, n in enumerate(self.names):
            pats = [p for p in domains.definitions[n].patterns if not _matches_empty(p)]
            if pats:
                alternations.append("|".join(f"(?:{p})" for p in pats))
                self._owner.append(i)
        self._memo: dict[tuple, int] = {}
        self._scan = None
        if not alternations:
            return
        opts = _options()
        owners = [self.names[i] for i in self._owner]
        windowed = [f"\\C(?:{a})" for a in alternations]
        self._scan = re2.compile("|".join(f"(?:{a})" for a in alternations), opts)._regexp.Match
        self._at_start = _compiled_set(_ANCHOR_START, alternations, opts, owners)  # at byte 0
        self._at = _compiled_set(_ANCHOR_START, windowed, opts, owners)  # at p, on data[p-1:]
        self._after = _compiled_set(_UNANCHORED, windowed, opts, owners)  # from p, on data[p-1:]

    # -- scanning ---------------------------------------------------------------------------

    def _bounded(self, text: str) -> str:
        if len(text) > self.max_scan_chars:
            half = self.max_scan_chars // 2
            return text[:half] + "\n" + text[-half:]
        return text

    def _domain_at(self, data: bytes, view: memoryview, start: int, end: int) -> int:
        """The domain of the occurrence data[start:end]: the first whose patterns match at start."""
        n = len(data)
        key = (data[start - 1] if start else -1, data[start:end], data[end] if end < n else -1)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        entries = self._at(view[start - 1:]) if start else self._at_start(data)
        found = self._owner[min(entries)] if entries else -1
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[key] = found
        return found

    def _sweep(self, data: bytes, view: memoryview, pos: int, counts: list[int]) -> list[int]:
        """Add the occurrences from ``pos`` to the end to ``counts`` (per domain, policy order)."""
        scan, n = self._scan, len(data)
        while pos <= n:
            (start, end), = scan(_UNANCHORED, data, pos, n)
            if start < 0:
                break
            if end > start:
                d = self._domain_at(data, view, start, end)
                if d >= 0:
                    counts[d] += 1
                pos = end
            else:  # unreachable (no pattern matches the empty string): step over one byte
                pos = end + 1
        return counts

    def _data(self, text) -> Optional[bytes]:
        if not self.enabled or self._scan is None or not isinstance(text, str) or not text:
            return None
        return self._bounded(text).encode("utf-8", "replace")

    def counts(self, text: str) -> list[int]:
        """Occurrences per domain (policy order); all zeros when disabled or on a non-str."""
        data = self._data(text)
        if data is None:
            return [0] * len(self.names)
        return self._sweep(data, memoryview(data), 0, [0] * len(self.names))

    def scores(self, text: str) -> dict[str, float]:
        """domain -> match count * weight, for the domains with at least one match (policy order)."""
        counts = self.counts(text)
        return {n: c * self.weights[i] for i, (n, c) in enumerate(zip(self.names, counts)) if c}

    def detect(self, text: str) -> Optional[str]:
        """The best-scoring domain, or None (no match, best score < min_matches, disabled).

        The same answer as the best of ``scores(text)``, found with fewer calls (module
        docstring): counting stops once the answer cannot change."""
        data = self._data(text)
        if data is None:
            return None
        n = len(data)
        (start, end), = self._scan(_UNANCHORED, data, 0, n)
        if start < 0:
            return None
        view = memoryview(data)
        counts = [0] * len(self.names)
        if end == start or not self._bounds_hold:  # (unreachable / outside the schema)
            return self._best(self._sweep(data, view, 0, counts))
        scan, names, weights, needed = self._scan, self.names, self.weights, self.min_matches
        first = self._domain_at(data, view, start, end)
        (start, end2), = scan(_UNANCHORED, data, end, n)
        if start < 0:  # a single occurrence
            return names[first] if first >= 0 and weights[first] >= needed else None
        if end2 == start:  # (unreachable)
            return self._best(self._sweep(data, view, 0, counts))
        second, end = self._domain_at(data, view, start, end2), end2
        if second == first >= 0:
            # Two occurrences of one domain: if no other domain occurs after them, it wins as
            # soon as its count times its weight reaches min_matches.
            later = self._after(view[end - 1:]) if end < n else ()
            if all(self._owner[k] == first for k in later):
                found, weight = 2, weights[first]
                if (found + bool(later)) * weight >= needed:
                    return names[first]
                pos = end
                while pos <= n:  # every later occurrence is its own
                    (start, end), = scan(_UNANCHORED, data, pos, n)
                    if start < 0:
                        break
                    if end > start:
                        found, pos = found + 1, end
                        if found * weight >= needed:
                            return names[first]
                    else:
                        pos = end + 1
                return None
        for d in (first, second):
            if d >= 0:
                counts[d] += 1
        return self._best(self._sweep(data, view, end, counts))

    def _best(self, counts: list[int]) -> Optional[str]:
        scores = {n: c * self.weights[i] for i, (n, c) in enumerate(zip(self.names, counts)) if c}
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
