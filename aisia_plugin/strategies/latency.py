"""The "latency" strategy (alias fast; docs/design.md#latency): lowest p95 latency + error rate x 1000 ms.

The error-rate penalty ranks an unreliable candidate lower even when its nominal latency is low
(the source document's formula: docs/design.md#sources). OPEN breakers are dropped (all OPEN: the whole pool
competes); ties in pool order. Score = best effective latency / the candidate's (1 for the
winner, higher is better); the parts are in the terms."""

from __future__ import annotations

import math

from ..breaker import OPEN
from ..decision import Candidate, Decision, Pool, RoutingContext, atoms
from .rules import OwnScores, finish, finite, relative_score, sort_key

ERROR_PENALTY_MS = 1000.0


def effective_latency_ms(c: Candidate) -> float:
    return sort_key(c.p95_latency_ms) + finite(c.error_rate) * ERROR_PENALTY_MS


def effective_latencies_ms(pool: Pool) -> list[float]:
    """``effective_latency_ms`` of every member, from the pool's columns (a NaN p95 ranks last; a
    non-finite error rate counts as 0)."""
    inf = math.inf
    out = []
    for p95, err in zip(pool.p95_ms, pool.error_rates):
        if p95 != p95:
            p95 = inf
        if err != err or err == inf or err == -inf:
            err = 0.0
        out.append(p95 + err * ERROR_PENALTY_MS)
    return out


class LatencyStrategy:
    name = "latency"
    description = "Lowest p95 latency + error rate x 1000 ms; OPEN breakers dropped"
    settings = frozenset({"exploration"})  # the alias settings it reads

    def select(self, pool, context: RoutingContext) -> Decision:
        pool = Pool.of(pool)
        eligible = pool.not_open()
        keys = effective_latencies_ms(eligible)
        low = min(keys)
        i = keys.index(low)  # first of equals: pool order
        all_open = eligible.breakers[i] == OPEN
        own = (atoms(eligible.ids), atoms(keys), atoms(eligible.p95_ms), atoms(eligible.error_rates), low, i, all_open)
        return finish(self.name, pool, eligible, _LATENCY, own, i, context,
                      final_score=lambda j: relative_score(low, keys[j]))


class _LatencyExplained(OwnScores):
    """facts: (ids, None, excluded, drew, competing ids, their effective latencies, p95s and
    error rates, the lowest, the winner's index among them, whether every candidate is OPEN)."""

    __slots__ = ()

    def own_scores(self, facts):
        low = facts[8]
        return [relative_score(low, k) for k in facts[5]]

    def why(self, facts) -> str:
        ids, keys, p95s, errs, low, i, all_open = facts[4:]
        nxt = min(keys[:i] + keys[i + 1:], default=None)
        vs = f" (next {nxt:.0f} ms)" if nxt is not None else ""
        every = "; every candidate is OPEN" if all_open else ""
        return (f"latency picked {ids[i]}: p95 {sort_key(p95s[i]):.0f} ms + error rate "
                f"{finite(errs[i]):.3f} x 1000 = {low:.0f} ms, the lowest{vs}{every}")

    def terms(self, facts):
        return {c: {"p95_latency_ms": round(sort_key(p), 3), "error_rate": round(finite(e), 6),
                    "effective_ms": round(k, 3)} for c, k, p, e in zip(*facts[4:8])}


_LATENCY = _LatencyExplained()
