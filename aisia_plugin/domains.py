"""Domain detection (AISIA seed section 6), with the policy's patterns compiled into one RE2
program: one linear-time scan per prompt, each match attributed to its domain by capture group."""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from .policy.patterns import compile_pattern


class DomainDetector:
    def __init__(self, domains):
        self.enabled = domains.enabled
        self.min_matches = domains.min_matches
        self.max_scan_chars = domains.max_scan_chars
        self.names = list(domains.definitions)
        self.weights = [domains.definitions[n].weight for n in self.names]
        groups = ["(" + "|".join(f"(?:{p})" for p in domains.definitions[n].patterns) + ")" for n in self.names]
        self._rx = compile_pattern("|".join(groups)) if groups else None
        # A user pattern may hold capturing groups of its own: record where each domain's outer
        # group sits in the combined program.
        self._group_index, index = [], 1
        for g in groups:
            self._group_index.append(index)
            index += compile_pattern(g).groups

    def scores(self, text: str) -> dict[str, float]:
        if not self.enabled or self._rx is None or not isinstance(text, str) or not text:
            return {}
        if len(text) > self.max_scan_chars:
            half = self.max_scan_chars // 2
            text = text[:half] + "\n" + text[-half:]
        counts = [0] * len(self.names)
        for m in self._rx.finditer(text):
            for i, g in enumerate(self._group_index):
                if m.start(g) >= 0:
                    counts[i] += 1
                    break
        return {n: counts[i] * self.weights[i] for i, n in enumerate(self.names) if counts[i]}

    def detect(self, text: str) -> Optional[str]:
        scores = self.scores(text)
        if not scores:
            return None
        # max() keeps the first of equal scores and dicts keep policy order: a tie goes to the
        # first domain in the policy.
        best = max(scores, key=scores.get)
        return best if scores[best] >= self.min_matches else None


@lru_cache(maxsize=1)
def _default_detector() -> DomainDetector:
    from .policy import load_policy

    return DomainDetector(load_policy().domains)


def detect_domain(text: str) -> Optional[str]:
    """The domain of a prompt under the shipped default policy, or None."""
    return _default_detector().detect(text)
