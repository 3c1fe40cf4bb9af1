"""Domain detection (docs/design.md#the-15-domains).

A domain's score is the number of occurrences of its patterns in the prompt times its weight;
the best-scoring domain wins (a tie goes to the first domain in policy order) when its score
reaches ``min_matches`` and, where the domain sets ``min_density``, that many per full 1,000
characters of the prompt as scanned (``needed``: a long passage mentioning a topic a few times is
not a request for its specialist). The occurrences are those of one leftmost-first scan with all the
policy's patterns; each counts once, for the first domain (in policy order) whose patterns match
where it starts. The scan goes on after an occurrence's end, or after its first word when it is a
short phrase of several words (``_resume``): "write a Python function" is a coding request and
names a language, two occurrences. The prompt is read as NFC, without format characters
(features.clean_text), so that NFD accents and zero-width characters hide no word.

The patterns are user-editable and the prompts attacker-controlled, so matching is RE2 only
(linear time in the prompt, never a backtracking engine), on the prompt's UTF-8 bytes cut to
``max_scan_chars`` (its start and its end). Through the Python binding the cost is the number of
native calls (about 1 us each) plus the bytes the DFAs read (about 5 us per 2 KB pass, more while
RE2's lazy DFA meets new text), so ``detect`` makes as few of both as its answer needs:

1. The union of all the patterns (one program, no submatch tracking: RE2's DFA alone) finds the
   first occurrence. None: no domain, after a single pass.
2. Its domain is the first whose patterns match there: one short call to an anchored
   ``RE2::Set`` (one entry per domain), memoised on the occurrence and the byte on each side,
   which decide it (``\\b``, ``^`` and ``$`` see no further), so a recurring word costs a dict
   look-up.
3. An unanchored ``RE2::Set`` over the rest of the prompt (the rest of the same pass) tells which
   domains occur after it. None: the counts are final. A single domain: every later occurrence
   is its own and the others' counts are final, so it wins as soon as its count times its weight
   beats theirs and reaches ``min_matches``: on the shipped policy (min_matches 2) a topic domain
   found again is decided right there, with no counting at all. Several domains: the scan goes on
   to the end (step 1 from the end of each occurrence, step 2 for its domain), which is what
   ``counts``/``scores`` always do. A weight is > 0, so a partial count is a lower bound of the
   score and these early answers are exactly those of the full count.

So a prompt with no domain or a single one (two prompts out of three on RouterArena) costs one
pass and at most three calls, however many keywords it holds (a keyword-dense prompt no longer
costs a call per keyword); a prompt mixing domains costs about two passes and one call per
occurrence. The Sets read the bytes after a position through a one-byte window (entries
prefixed with ``\\C``, any byte) so that ``\\b`` and ``^`` keep their true left context. A Set
cannot fall back to the NFA and would report a failure as "no match", but RE2 keeps flushing a
Set's DFA cache rather than giving up, and a budget too small for the DFA fails at
``Compile()``: at policy load, never silently on a prompt.

When the caller's own pass already said which domains occur (``detect(text, present)``: the
engine's one Set over the prompt, scan.PromptScanner, carries the domains' alternations after the
features' entries), steps 1 and 3 are skipped: no domain costs nothing, a single one only the
union scans that find the occurrences its score needs, several the counting sweep from the start.

Patterns that can match the empty string are left out (they would count everywhere and, in the
union, shadow the patterns after them); the test is exact, over every context an empty match can
depend on.

The detector takes its section as data (``DomainsSection``: a policy's ``domains``, or any object
of that shape) and imports no policy code: the policy loader checks the patterns (each one RE2
accepts) and builds the detector (through ``scan.scanner_for``); ``policy.default_domain_detector``
is the shipped policy's."""

from __future__ import annotations

import math
from typing import Mapping, Optional, Protocol, Sequence

import re2

from .features import scanned_bytes
from .re2compat import ANCHOR_BOTH, ANCHOR_START, UNANCHORED, Set, match_of, search_options

_UNANCHORED, _ANCHOR_START, _ANCHOR_BOTH = UNANCHORED, ANCHOR_START, ANCHOR_BOTH
_MAX_MEM = 64 << 20  # per unanchored program (RE2's budget for its lazy DFA cache)
_ANCHORED_MAX_MEM = 8 << 20  # the anchored Sets only read one occurrence at a time
_MEMO_MAX = 4096  # memoised occurrences (the memo is cleared when full)
_MEMO_SPAN = 256  # longer occurrences are not memoised


def _options(max_mem: int = _MAX_MEM):
    return search_options(max_mem)


# Whether an RE2 pattern matches the empty string at a position depends only on the assertions
# true there (^ $ \A \z \b \B, multi-line or not), i.e. on the byte before the position (none,
# a newline, a word byte, another byte) and the byte after it (the same four cases): the 16
# contexts below cover them all, so the test is exact, not a sample.
_SIDES = ("", "\n", "a", " ")
_CONTEXTS = tuple(((before + after).encode(), len(before)) for before in _SIDES for after in _SIDES)


def _matches_empty(pattern: str, domain: str) -> bool:
    """Can the pattern match the empty string anywhere? (The policy loader names a pattern RE2
    rejects, at its line, before it builds a detector; built from other data, the detector
    names it here.)"""
    try:
        match = match_of(re2.compile(pattern, _options()))
    except re2.error as exc:
        raise DomainPatternsError(f"domain '{domain}': pattern {pattern!r} is not RE2 syntax ({exc})", domain) from None
    return any(match(_ANCHOR_BOTH, text, pos, pos)[0][0] >= 0 for text, pos in _CONTEXTS)


class DomainPatternsError(ValueError):
    """The domains' patterns do not compile into the programs the engine runs (each fits alone,
    together they pass RE2's memory budget). ``domain`` names the first domain whose addition
    does not fit (None when it cannot be told); the policy loader reports it at its line."""

    def __init__(self, message: str, domain: Optional[str] = None):
        super().__init__(message)
        self.domain = domain


def too_big(domain: Optional[str], program: str) -> DomainPatternsError:
    where = f"domain '{domain}'" if domain else "the domain patterns"
    return DomainPatternsError(
        f"{where}: the patterns do not fit RE2's memory budget for {program} (simplify them: bounded "
        "repeats such as \\w{0,50} multiply a program's size, as do many long alternatives)", domain)


def first_not_fitting(fits, entries: list[str], names: list[str]) -> Optional[str]:
    """The domain (names[k]) whose entry, added after entries[:k], first makes `fits` fail."""
    for k in range(1, len(entries) + 1):
        if not fits(entries[:k]):
            return names[k - 1]
    return None


def _set_fits(anchor, opts):
    def fits(entries: list[str]) -> bool:
        rset = Set(anchor, opts)
        return all(rset.Add(e.encode("utf-8")) >= 0 for e in entries) and rset.Compile()
    return fits


def _compiled_set(anchor, entries: list[str], opts, names: list[str]):
    rset = Set(anchor, opts)
    for k, entry in enumerate(entries):
        if rset.Add(entry.encode("utf-8")) != k:
            raise DomainPatternsError(f"domain '{names[k]}': RE2 cannot add its patterns to a set", names[k])
    if not rset.Compile():
        raise too_big(first_not_fitting(_set_fits(anchor, opts), entries, names), "the domains' combined set")
    return rset.Match


def _compiled(pattern: str, opts, what: str, culprit):
    try:
        return match_of(re2.compile(pattern, opts))
    except re2.error:
        raise too_big(culprit(), what) from None


class DomainDefinition(Protocol):
    """One domain as the detector reads it (a policy's ``domains.definitions[name]``)."""

    patterns: Sequence[str]
    weight: float
    min_density: float


class DomainsSection(Protocol):
    """What the detector reads of a policy's ``domains`` section (policy.models.Domains)."""

    enabled: bool
    min_matches: int
    max_scan_chars: int
    definitions: Mapping[str, DomainDefinition]


class DomainDetector:
    """Compiled once from a policy's ``domains`` section; ``scores``/``detect`` never raise."""

    def __init__(self, domains: DomainsSection):
        self.enabled = bool(domains.enabled)
        self.min_matches = domains.min_matches
        self.max_scan_chars = domains.max_scan_chars
        self.names: list[str] = list(domains.definitions)
        self.weights: list[float] = [float(domains.definitions[n].weight) for n in self.names]
        # Per domain, the score needed per full 1,000 scanned characters on top of min_matches.
        self.densities: list[float] = [float(getattr(domains.definitions[n], "min_density", 0) or 0)
                                       for n in self.names]
        self._dense = [(i, dens) for i, dens in enumerate(self.densities) if dens > 0]
        self._max_density = max(self.densities, default=0.0)
        self._flat: list[float] = [float(self.min_matches)] * len(self.names)
        # The early answers rely on a partial count times the weight being a lower bound of the
        # score: true for the weights the schema allows (> 0); any other falls back to counting.
        self._bounds_hold = all(w > 0 and math.isfinite(w) for w in self.weights)
        alternations, self._owner = [], []  # per Set entry: its patterns, its domain's index
        for i, n in enumerate(self.names):
            pats = [p for p in domains.definitions[n].patterns if not _matches_empty(p, n)]
            if pats:
                alternations.append("|".join(f"(?:{p})" for p in pats))
                self._owner.append(i)
        self._memo: dict[tuple, int] = {}
        self._scan = None
        # Per entry: the domain's patterns as one RE2 alternation, and the domain's index; a Set of
        # these over the whole prompt tells which domains occur (scan.PromptScanner).
        self.alternations: list[tuple[str, int]] = list(zip(alternations, self._owner))
        if not alternations:
            return
        opts = _options()
        owners = [self.names[i] for i in self._owner]
        windowed = [f"\\C(?:{a})" for a in alternations]
        union = [f"(?:{a})" for a in alternations]

        def union_fits(entries):
            try:
                re2.compile("|".join(entries), opts)
                return True
            except re2.error:
                return False

        self._scan = _compiled("|".join(union), opts, "the domains' union",
                               lambda: first_not_fitting(union_fits, union, owners))
        small = _options(_ANCHORED_MAX_MEM)
        self._at_start = _compiled_set(_ANCHOR_START, alternations, small, owners)  # at byte 0
        self._at = _compiled_set(_ANCHOR_START, windowed, small, owners)  # at p, on data[p-1:]
        self._after = _compiled_set(_UNANCHORED, windowed, opts, owners)  # from p, on data[p-1:]
        # Each domain's own program: where it is the only domain occurring, the union's
        # occurrences are exactly its own, and its smaller DFA finds them faster.
        self._alone: dict[int, object] = {
            owner: _compiled(a, small, "its own program", lambda n=self.names[owner]: n)
            for a, owner in zip(alternations, self._owner)}

    # -- scanning ---------------------------------------------------------------------------

    def _domain_at(self, data: bytes, start: int, end: int) -> int:
        """The domain of the union's occurrence data[start:end]: the first whose patterns match at
        ``start``. That is the first domain able to match exactly these bytes between these two
        neighbours (an earlier one able to would have been the union's choice), so the answer is
        memoised on ``data[start-1:end+1]`` (a tuple at the prompt's edges)."""
        n = len(data)
        if 0 < start and end < n:
            key = data[start - 1:end + 1]
        else:
            key = (start == 0, end == n, data[start - 1 if start else 0:end + 1])
        hit = self._memo.get(key)
        if hit is None:
            entries = self._at(memoryview(data)[start - 1:]) if start else self._at_start(data)
            hit = self._owner[min(entries)] if entries else -1
            if end - start <= _MEMO_SPAN:
                if len(self._memo) >= _MEMO_MAX:
                    self._memo.clear()
                self._memo[key] = hit
        return hit

    def _sweep(self, data: bytes, pos: int, counts: list[int]) -> list[int]:
        """Add the occurrences from ``pos`` to the end to ``counts`` (per domain, policy order)."""
        scan, n, memo, domain_at = self._scan, len(data), self._memo, self._domain_at
        while pos <= n:
            (start, end), = scan(_UNANCHORED, data, pos, n)
            if start < 0:
                break
            if end == start:  # unreachable (no pattern matches the empty string): step over a byte
                pos = end + 1
                continue
            d = memo.get(data[start - 1:end + 1]) if 0 < start and end < n else None
            if d is None:
                d = domain_at(data, start, end)
            if d >= 0:
                counts[d] += 1
            pos = _resume(data, start, end)
        return counts

    def _data(self, text, clean: bool = True) -> Optional[bytes]:
        """The bytes scanned: the text cut to max_scan_chars (its start and its end) and, unless
        the caller's own pass already did it (the engine's features), cleaned (features.scanned_bytes)."""
        if not self.enabled or self._scan is None or not isinstance(text, str) or not text:
            return None
        if len(text) > self.max_scan_chars:
            half = self.max_scan_chars // 2
            text = text[:half] + "\n" + text[-half:]
        if clean:
            return scanned_bytes(text)[1]
        return text.encode("utf-8", "replace")

    def counts(self, text: str) -> list[int]:
        """Occurrences per domain (policy order); all zeros when disabled or on a non-str."""
        data = self._data(text)
        counts = [0] * len(self.names)
        return counts if data is None else self._sweep(data, 0, counts)

    def scores(self, text: str) -> dict[str, float]:
        """domain -> match count * weight, for the domains with at least one match (policy order)."""
        counts = self.counts(text)
        return {n: c * self.weights[i] for i, (n, c) in enumerate(zip(self.names, counts)) if c}

    def detect(self, text: str, present=None) -> Optional[str]:
        """The best-scoring domain, or None (no match, best score below min_matches or its min_density, disabled).

        The same answer as the best of ``scores(text)``, with fewer calls (module docstring).
        ``present``, when the caller's own pass over the text already told it, is the set of the
        domains (indices in policy order) whose patterns occur in the text: no domain then costs
        nothing more, a single one only the scans its count needs, and several the counting
        sweep alone (the Set pass that would look for an early answer costs more than it saves
        once the first pass has said that several domains occur)."""
        data = self._data(text, clean=present is None)
        if data is None:
            return None
        needs = self.needed(text)
        if present is not None:
            if not present:
                return None
            if len(present) == 1 and self._bounds_hold:
                (d,) = present
                return self._count_alone(data, d, 0, [0] * len(self.names), at_least=1, needs=needs)
            return self._best(self._sweep(data, 0, [0] * len(self.names)), needs)
        n = len(data)
        (start, end), = self._scan(_UNANCHORED, data, 0, n)
        if start < 0:
            return None
        if end == start or not self._bounds_hold:  # (unreachable / outside the schema)
            return self._best(self._sweep(data, 0, [0] * len(self.names)), needs)
        first = self._domain_at(data, start, end)
        if first < 0:  # (unreachable: the union matched, so some domain does)
            return self._best(self._sweep(data, 0, [0] * len(self.names)), needs)
        counts = [0] * len(self.names)
        counts[first] = 1
        nxt = _resume(data, start, end)
        later = self._after(memoryview(data)[nxt - 1:]) if nxt < n else ()
        if not later:  # a single occurrence
            return self.names[first] if self.weights[first] >= needs[first] else None
        live = {self._owner[k] for k in later}
        if len(live) > 1:
            return self._best(self._sweep(data, nxt, counts), needs)
        # Only one domain occurs from here on: every later occurrence is its own (there is at
        # least one: the Set saw it), the others' counts are final.
        (d,) = live
        return self._count_alone(data, d, nxt, counts, at_least=1, needs=needs)

    def needed(self, text: str) -> list[float]:
        """Per domain (policy order), the score it needs to be reported on ``text``: min_matches,
        or min_density times the full thousands of its characters as scanned (at most
        max_scan_chars, its start and its end) where that is more. Shared, not to be modified."""
        chars = len(text) if len(text) <= self.max_scan_chars else 2 * (self.max_scan_chars // 2) + 1
        thousands = chars // 1000
        if thousands * self._max_density <= self.min_matches:  # also when no domain sets one
            return self._flat
        needs = list(self._flat)
        for i, dens in self._dense:
            if thousands * dens > needs[i]:
                needs[i] = thousands * dens
        return needs

    def _count_alone(self, data: bytes, d: int, pos: int, counts: list[int], at_least: int = 0,
                     needs: Optional[list[float]] = None) -> Optional[str]:
        """The answer when `d` is the only domain occurring from `pos` on (at least `at_least`
        times), `counts` holding every count before `pos`: each union occurrence from `pos` is
        `d`'s (no other domain's pattern matches there, so the union's leftmost-first matches are
        those of `d`'s own program) and the other counts are final, so `d` wins as soon as its
        score beats theirs and reaches the score it needs (``needs[d]``, min_matches by default),
        and the scan stops there."""
        needs = needs or self._flat
        weight, needed = self.weights[d], needs[d]
        # The best other score, and whether d wins a tie with it (a tie goes to the first domain
        # in policy order: the first k reaching the best score is the one that matters).
        rival, tie_wins = -1.0, True
        if any(counts):
            for k, c in enumerate(counts):
                if c and k != d:
                    score = c * self.weights[k]
                    if score > rival:
                        rival, tie_wins = score, d < k
        found = counts[d]
        score = (found + at_least) * weight
        if at_least and score >= needed and (score > rival or (tie_wins and score == rival)):
            return self.names[d]
        scan, n = self._alone[d], len(data)
        while pos <= n:
            (start, end), = scan(_UNANCHORED, data, pos, n)
            if start < 0:
                break
            if end > start:
                found, pos = found + 1, _resume(data, start, end)
                score = found * weight
                if score >= needed and (score > rival or (tie_wins and score == rival)):
                    return self.names[d]
            else:
                pos = end + 1
        counts[d] = found
        return self._best(counts, needs)

    def _best(self, counts: list[int], needs: Optional[list[float]] = None) -> Optional[str]:
        scores = {n: c * self.weights[i] for i, (n, c) in enumerate(zip(self.names, counts)) if c}
        if not scores:
            return None
        # max() keeps the first of equal scores and scores keeps policy order: a tie goes to the
        # first domain of the policy.
        best = max(scores, key=scores.__getitem__)
        return best if scores[best] >= (needs or self._flat)[self.names.index(best)] else None


def _resume(data: bytes, start: int, end: int) -> int:
    """Where the scan goes on after the occurrence data[start:end]: after its first word when it
    spans several and is short, else at its end. An explicit request ("write a Python function")
    holds words that count on their own ("Python"), which a scan resuming at its end would
    swallow. Linear: each occurrence is re-read for at most _RESUME_SPAN bytes."""
    if end - start <= _RESUME_SPAN:
        gap = data.find(b" ", start + 1, end - 1)
        if gap > 0:
            return gap + 1
    return end


_RESUME_SPAN = 96
