"""How much one API key's quality evidence may weigh: no single key moves a deployment's quality
for everyone beyond a bound (docs/security.md#tenants).

The rule, per deployment, over its last ``ShareRule.window`` pieces of evidence that named a key
(feedback, conversation signals; in this process): let ``mine`` be the weight this key's pieces
carried in that window, ``others`` the weight every other key's carried, and ``strength`` the
prior's pseudo-observations (``quality.prior.strength``). Once others > 0 (another key has spoken
about the deployment), the key's next piece counts with

    w = min(base, max(0, s / (1 - s) x (strength + others) - mine))

where ``base`` is the source's weight and ``s = ShareRule.max_share`` (0.10): the key's weight in
the window never exceeds s / (1 - s) of everyone else's plus the prior's, so its share of the
weight the estimate is made of stays <= s, and the estimate (a weighted mean of values in [0, 1],
quality.py) lies within s = 0.10 of what the prior and the other keys' evidence alone give.
The weight shrinks as the key's share grows, to 0 at the bound; other keys' evidence makes room
again. A key alone with a deployment (no other key's evidence in the window) is its only user:
its evidence counts fully, as a single tenant's must for quality to be learned at all, and leaves
the window as other keys' evidence arrives. The same principle as the breaker's per-key outlier
rule (blame.OutlierRule): a key's word is weighed against its peers'.

Pure: plain data, no clock; the caller says which key."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

MAX_DEPLOYMENTS = 4096  # deployments come from the config: a bound, never reached


@dataclass(frozen=True, slots=True)
class ShareRule:
    """The largest share of a deployment's recent evidence weight one key may hold, and how many
    pieces of evidence per deployment make "recent"."""

    max_share: float = 0.10
    window: int = 1000


class EvidenceShares:
    """Each deployment's recent keyed evidence: (key, weight counted), the last ``rule.window``."""

    __slots__ = ("rule", "_recent")

    def __init__(self, rule: ShareRule = ShareRule()):
        self.rule = rule
        self._recent: dict[str, deque] = {}

    def weights(self, deployment_id: str, key: str) -> tuple[float, float]:
        """(this key's weight, every other key's weight) in the deployment's window."""
        mine = others = 0.0
        for k, w in self._recent.get(deployment_id, ()):
            if k == key:
                mine += w
            else:
                others += w
        return mine, others

    def admit(self, deployment_id: str, key: Optional[str], base: float, strength: float) -> float:
        """The weight `key`'s next piece of evidence about the deployment counts with (`base`, the
        source's weight, at most), noted in the window. No key (an in-process caller): `base`."""
        if key is None:
            return base
        mine, others = self.weights(deployment_id, key)
        w = base
        if others > 0.0:
            s = self.rule.max_share
            w = min(base, max(0.0, s / (1.0 - s) * (strength + others) - mine))
        recent = self._recent.get(deployment_id)
        if recent is None:
            if len(self._recent) >= MAX_DEPLOYMENTS:
                self._recent.clear()
            recent = self._recent[deployment_id] = deque(maxlen=max(1, self.rule.window))
        recent.append((key, w))
        return w

    def forget(self, deployment_id: str) -> None:
        """An operator reset the deployment: its recent evidence is gone with its record."""
        self._recent.pop(deployment_id, None)
