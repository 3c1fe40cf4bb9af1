"""The "latency" strategy (alias fast; docs/design.md#latency): lowest p95 latency + error rate x 1000 ms.

The error-rate penalty ranks an unreliable candidate lower even when its nominal latency is low
(the source document's formula: docs/design.md#sources). OPEN breakers are dropped (all OPEN: the whole pool
competes); ties in pool order. Score = best effective latency / the candidate's (1 for the
winner, higher is better); the parts are in the terms."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..breaker import OPEN
from ..decision import Candidate, Decision, Pool, RoutingContext, atoms
from .rules import LowestFacts, LowestWins, finish, finite, relative_score, sort_key

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
        return finish(self.name, pool, eligible, _LATENCY, i, context, final_score=lambda j: relative_score(low, keys[j]),
                      facts=LatencyFacts, competing=atoms(eligible.ids), keys=atoms(keys), p95s=atoms(eligible.p95_ms),
                      error_rates=atoms(eligible.error_rates), lowest=low, winner=i, all_open=all_open)


@dataclass(slots=True, kw_only=True)
class LatencyFacts(LowestFacts):
    """A latency decision's facts: ``LowestFacts`` whose keys are the effective latencies, with
    the competing members' p95s and error rates."""

    p95s: tuple
    error_rates: tuple


class _LatencyExplained(LowestWins):
    """Explains a latency decision from its ``LatencyFacts``."""

    __slots__ = ()

    def why(self, facts: LatencyFacts) -> str:
        keys, i = facts.keys, facts.winner
        nxt = min(keys[:i] + keys[i + 1:], default=None)
        vs = f" (next {nxt:.0f} ms)" if nxt is not None else ""
        every = "; every candidate is OPEN" if facts.all_open else ""
        return (f"latency picked {facts.competing[i]}: p95 {sort_key(facts.p95s[i]):.0f} ms + error rate "
                f"{finite(facts.error_rates[i]):.3f} x 1000 = {facts.lowest:.0f} ms, the lowest{vs}{every}")

    def terms(self, facts: LatencyFacts):
        return {c: {"p95_latency_ms": round(sort_key(p), 3), "error_rate": round(finite(e), 6),
                    "effective_ms": round(k, 3)}
                for c, k, p, e in zip(facts.competing, facts.keys, facts.p95s, facts.error_rates)}


_LATENCY = _LatencyExplained()
