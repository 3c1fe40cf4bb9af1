"""One linear pass over the prompt for every keyword question of a decision.

The request features (features.SCAN_ENTRIES: task words, creative, real-time, code syntax...) and
the policy's domains (which of them occur: DomainDetector.alternations) are entries of a single
RE2 Set, compiled once per policy: one DFA pass over the prompt's bytes answers both, where two
Sets would read the prompt twice. The features read the entry numbers below
len(SCAN_ENTRIES); the domains above are handed to ``DomainDetector.detect(text, present)``,
which then has nothing left to scan when no domain or a single one occurs. RE2 only (linear
time on attacker-controlled prompts)."""

from __future__ import annotations

from typing import Optional

from .domains import DomainDetector, DomainPatternsError, first_not_fitting, too_big
from .features import SCAN_ENTRIES, RequestFeatures, features_and_hits
from .re2compat import UNANCHORED, Options, Set

_MAX_MEM = 64 << 20  # RE2's budget for the Set's lazy DFA cache


_BUILT: dict = {}


def scanner_for(domains) -> PromptScanner:
    """The PromptScanner (and its DomainDetector, ``.detector``) of a policy's ``domains``
    section, compiled once per distinct section: the policy loader builds it to check that the
    engine can (DomainPatternsError otherwise), and the engines of that policy reuse it."""
    key = domains.model_dump_json()
    hit = _BUILT.get(key)
    if hit is None:
        if len(_BUILT) >= 8:
            _BUILT.clear()
        hit = _BUILT[key] = PromptScanner(DomainDetector(domains), domains.max_scan_chars)
    return hit


class PromptScanner:
    def __init__(self, detector: DomainDetector, max_chars: int):
        self.detector = detector
        self.max_chars = max_chars
        opts = Options()
        opts.case_sensitive = False
        opts.log_errors = False
        opts.never_capture = True
        opts.max_mem = _MAX_MEM
        rset = Set(UNANCHORED, opts)
        for k, (_, pattern) in enumerate(SCAN_ENTRIES):
            if rset.Add(pattern.encode("utf-8")) != k:
                raise ValueError(f"feature entry {k}: RE2 cannot add it to the prompt scan")
        self._first_domain = len(SCAN_ENTRIES)
        # Entry number -> domain index, for the entries after the features'.
        self._owner: list[int] = []
        for alternation, owner in detector.alternations:
            if rset.Add(alternation.encode("utf-8")) < 0:
                name = detector.names[owner]
                raise DomainPatternsError(f"domain '{name}': RE2 cannot add its patterns to the prompt scan", name)
            self._owner.append(owner)
        if not rset.Compile():
            def fits(entries):
                trial = Set(UNANCHORED, opts)
                for entry in [p for _, p in SCAN_ENTRIES] + entries:
                    trial.Add(entry.encode("utf-8"))
                return trial.Compile()

            alternations = [a for a, _ in detector.alternations]
            names = [detector.names[o] for _, o in detector.alternations]
            raise too_big(first_not_fitting(fits, alternations, names), "the prompt scan (features and domains)")
        self._match = rset.Match
        # Entry number -> its domain, None for the features' entries (read with one C-level map).
        self._domain_of_entry = ([None] * self._first_domain + self._owner).__getitem__

    def scan(self, messages, tools=None, request_modalities=None,
             question: Optional[str] = None) -> tuple[RequestFeatures, set]:
        """``features.extract_features`` of the request, and the domains (indices in policy
        order) occurring in its text, for ``DomainDetector.detect(features.text, present)``; one
        pass over the text. ``question``: ``features.features_and_hits``'."""
        feats, hits = features_and_hits(messages, tools, request_modalities, max_chars=self.max_chars,
                                        scan=self._match, question=question)
        present = set(map(self._domain_of_entry, hits))
        present.discard(None)
        return feats, present

    def features_and_domain(self, messages, tools=None, request_modalities=None) -> tuple[RequestFeatures, Optional[str]]:
        """``features.extract_features`` and ``DomainDetector.detect`` of the request."""
        feats, present = self.scan(messages, tools, request_modalities)
        return feats, self.detector.detect(feats.text, present)
