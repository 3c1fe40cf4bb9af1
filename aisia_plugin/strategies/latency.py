"""OmniRoute's "latency" strategy (alias fast): lowest p95 latency + error rate x 1000 ms.

The error-rate penalty ranks an unreliable candidate lower even when its nominal latency is low
(the seed's formula; see seed-errata.md). OPEN breakers are dropped (all OPEN: the whole pool
competes); ties in pool order. Score = best effective latency / the candidate's (1 for the
winner, higher is better); the parts are in the terms."""

from __future__ import annotations

from ..decision import Candidate, Decision, RoutingContext, not_open
from .rules import finish, finite, relative_score, sort_key

ERROR_PENALTY_MS = 1000.0


def effective_latency_ms(c: Candidate) -> float:
    return sort_key(c.p95_latency_ms) + finite(c.error_rate) * ERROR_PENALTY_MS


class LatencyStrategy:
    name = "latency"
    description = "Lowest p95 latency + error rate x 1000 ms; OPEN breakers dropped"

    def select(self, pool: list[Candidate], context: RoutingContext) -> Decision:
        eligible = not_open(pool)
        keys = [effective_latency_ms(c) for c in eligible]
        i = min(range(len(keys)), key=keys.__getitem__)  # first of equals: pool order
        best, low = eligible[i], keys[i]
        nxt = min(keys[:i] + keys[i + 1:], default=None)
        vs = f" (next {nxt:.0f} ms)" if nxt is not None else ""
        all_open = "; every candidate is OPEN" if best.breaker == "OPEN" else ""
        reason = (f"latency picked {best.id}: p95 {sort_key(best.p95_latency_ms):.0f} ms + error rate "
                  f"{finite(best.error_rate):.3f} x 1000 = {low:.0f} ms, the lowest{vs}{all_open}")

        def terms():
            return {c.id: {"p95_latency_ms": round(sort_key(c.p95_latency_ms), 3), "error_rate": round(finite(c.error_rate), 6),
                           "effective_ms": round(k, 3)} for c, k in zip(eligible, keys)}

        return finish(self.name, pool, eligible, lambda: {c.id: relative_score(low, k) for c, k in zip(eligible, keys)},
                      best, reason, context, terms=terms,
                      score_of=lambda c: relative_score(low, effective_latency_ms(c)))
