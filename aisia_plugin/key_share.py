"""How much one API key's quality evidence may weigh: no single key moves a deployment's quality
for everyone beyond a bound (docs/security.md#tenants).

The rule, per deployment, over its recent pieces of evidence that named a key and counted
(feedback, conversation signals; in this process): those of the last ``ShareRule.horizon_s`` (a
day), at most the last ``ShareRule.window`` of them. Likewise per (deployment, domain) for a piece
recorded in a domain's record too (the least of the two weights counts: the domain's record
decides that domain's prompts for every tenant). A piece refused (of weight 0) is not noted: a
key past its bound that kept sending would push the other keys' pieces out and find itself alone
(found by a review); the others' pieces leave with time instead.

Let ``mine`` be the weight this key's pieces carried in that window, ``others`` the weight every
other key's carried, and ``strength`` the prior's pseudo-observations (``quality.prior.strength``).
Once others > 0 (another key has spoken about the deployment), the key's next piece counts with

    w = min(base, max(0, s / (1 - s) x (strength + others) - mine))

where ``base`` is the source's weight and ``s = ShareRule.max_share`` (0.10): the key's weight in
the window never exceeds s / (1 - s) of everyone else's plus the prior's, so its share of the
weight the estimate is made of stays <= s, and the estimate (a weighted mean of values in [0, 1],
quality.py) lies within s = 0.10 of what the prior and the other keys' evidence alone give.
The weight shrinks as the key's share grows, to 0 at the bound; other keys' evidence makes room
again. A key alone with a deployment (no other key's evidence in the window) is its only user:
its evidence counts fully, as a single tenant's must for quality to be learned at all, and leaves
the window as other keys' evidence arrives. A key the other keys left is bounded until their
pieces are a day old, then alone; a hostile key cannot hasten that by sending more. The same
principle as the breaker's per-key outlier rule (blame.OutlierRule): a key's word is weighed
against its peers'.

Each deployment's window (``_Window``) holds its pieces, (key, weight counted, when) oldest first,
with each key's running sum of weight, each key's count of pieces and the running total, all
updated as a piece enters and as the oldest leaves: admitting a piece is O(1), amortised, for the
sums are taken afresh from the pieces once every ``window`` pieces dropped (adding and subtracting
leaves rounding that would otherwise build up). Whether others > 0 is read from the counts
(another key has a piece in the window), never from a float difference, so a key alone counts
fully whatever the sums' rounding; a key whose count falls to 0 leaves both maps (its weight is
exactly 0). Measured with callgrind (a window of 1,000 pieces from 7 keys, then 100 calls, less
the same run with none), ``admit`` took about 413k instructions a call when it scanned the window
(about 1 % of an alias request through the proxy, 40 M) and takes about 16k now.

Pure: plain data; the caller says which key and what time it is."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

# Windows kept: one per deployment and one per (deployment, domain) its evidence named. Deployments
# come from the config and domains from the policy: a bound, never reached.
MAX_WINDOWS = 65536


@dataclass(frozen=True, slots=True)
class ShareRule:
    """The largest share of a deployment's recent evidence weight one key may hold, and how many
    pieces of evidence per deployment make "recent"."""

    max_share: float = 0.10
    window: int = 1000
    # Seconds a piece stays recent. A refused piece is not noted, so a key's own pieces never push
    # the other keys' out; they leave with time instead: a key that other keys have left alone with
    # the deployment counts fully again a day after they last spoke (its evidence was bounded
    # meanwhile), and a hostile key must wait out a day of the others' silence, however much it sends.
    horizon_s: float = 86400.0


class _Window:
    """One deployment's recent keyed evidence and its running sums. ``pieces``: (key, weight
    counted, when noted), oldest first, at most ``rule.window``, each weighing > 0 (a refused piece
    is not noted); ``sums``: each key's weight in the window; ``counts``: each key's number of
    pieces, which decides others > 0 exactly (a count, never a float difference); ``total``: every
    key's weight. A key with no piece in the window has no entry in either map: its weight is
    exactly 0."""

    __slots__ = ("size", "pieces", "sums", "counts", "total", "evicted")

    def __init__(self, size: int):
        self.size = size  # the most pieces held: ShareRule.window
        self.pieces: deque[tuple[str, float, float]] = deque()
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.total = 0.0
        self.evicted = 0  # pieces dropped since the sums were last computed afresh

    def weights(self, key: str) -> tuple[float, float]:
        """(this key's weight, every other key's weight): others is 0.0 exactly when no other key
        has a piece here, else the total less mine, within the total's rounding (at 0 or above: a
        2e-16 piece beside a sum of 50 may read 0.0, so the counts decide)."""
        mine = self.sums.get(key, 0.0)
        others_spoke = len(self.counts) > (key in self.counts)
        return mine, (max(0.0, self.total - mine) if others_spoke else 0.0)

    def standing(self, key: str) -> tuple[float, float, bool]:
        """(this key's weight, every other key's weight, whether another key has a piece) as the
        window will be when the key's next piece enters: without its oldest piece once it is full."""
        mine, total = self.sums.get(key, 0.0), self.total
        speakers, me_speaking = len(self.counts), key in self.counts
        if len(self.pieces) >= self.size:
            oldest, weight, _ = self.pieces[0]  # leaves as the piece enters
            total -= weight
            if oldest == key:
                mine -= weight
            if self.counts[oldest] == 1:  # its key's last piece: that key falls silent
                speakers -= 1
                me_speaking = me_speaking and oldest != key
        return mine, max(0.0, total - mine), speakers > me_speaking

    def age(self, before: float) -> None:
        """Drop the pieces noted before `before` (they are no longer recent)."""
        while self.pieces and self.pieces[0][2] < before:
            self._drop_oldest()

    def append(self, key: str, weight: float, now: float) -> None:
        """Note a piece that counts (weight > 0), dropping the oldest once the window is full."""
        if len(self.pieces) >= self.size:
            self._drop_oldest()
        self.pieces.append((key, weight, now))
        self.sums[key] = self.sums.get(key, 0.0) + weight
        self.counts[key] = self.counts.get(key, 0) + 1
        self.total += weight

    def _drop_oldest(self) -> None:
        key, weight, _ = self.pieces.popleft()
        left = self.counts[key] - 1
        if left:
            self.counts[key] = left
            self.sums[key] -= weight
        else:  # the key's last piece: its weight is exactly 0, not a rounding residue
            del self.counts[key], self.sums[key]
        self.total -= weight
        self.evicted += 1
        if self.evicted >= self.size:
            self._sum_afresh()

    def _sum_afresh(self) -> None:
        """Each sum kept by adding and subtracting drifts from a fresh sum of the same pieces by
        rounding (an ulp or so per step, without end over a long-lived deployment); summed afresh
        once every `size` dropped pieces, the drift stays within a window's steps, for O(1)
        amortised per piece."""
        sums: dict[str, float] = {}
        for k, w, _ in self.pieces:
            sums[k] = sums.get(k, 0.0) + w
        self.sums = sums
        self.total = sum(w for _, w, _ in self.pieces)
        self.evicted = 0


class EvidenceShares:
    """Each deployment's recent keyed evidence (``_Window``), the last ``rule.window`` pieces."""

    __slots__ = ("rule", "_recent")

    def __init__(self, rule: ShareRule = ShareRule()):
        self.rule = rule
        self._recent: dict = {}  # deployment id, or (deployment id, domain) -> its _Window

    def weights(self, deployment_id: str, key: str) -> tuple[float, float]:
        """(this key's weight, every other key's weight) in the deployment's window."""
        recent = self._recent.get(deployment_id)
        return (0.0, 0.0) if recent is None else recent.weights(key)

    def _window(self, name) -> _Window:
        recent = self._recent.get(name)
        if recent is None:
            if len(self._recent) >= MAX_WINDOWS:
                self._recent.clear()
            recent = self._recent[name] = _Window(max(1, self.rule.window))
        return recent

    def admit(self, deployment_id: str, key: Optional[str], base: float, strength: float,
              domain: Optional[str] = None, now: float = 0.0) -> float:
        """The weight `key`'s next piece of evidence about the deployment counts with (`base`, the
        source's weight, at most), noted in the window. With a `domain` (the piece is recorded in
        the deployment's record of that domain too, which decides that domain's prompts for every
        tenant), the least of what the deployment's window and the domain's allow: one key's
        share is bounded in each record the piece moves. `now`: the caller's clock, in seconds
        (what ``ShareRule.horizon_s`` is counted on). No key (an in-process caller): `base`."""
        if key is None:
            return base
        s = self.rule.max_share
        windows = [self._window(deployment_id)]
        if domain is not None:
            windows.append(self._window((deployment_id, domain)))
        for window in windows:
            window.age(now - self.rule.horizon_s)
        standings = [window.standing(key) for window in windows]
        w = base  # alone with the deployment: its only user, counted fully in every record
        if standings[0][2]:
            # Among other keys: bounded in each record the piece moves, a domain's too, even one
            # no other key has spoken of yet (the first to speak of a domain does not own it).
            for mine, others, _ in standings:
                w = min(w, max(0.0, s / (1.0 - s) * (strength + others) - mine))
        if w > 0.0:  # a refused piece is not noted (see the module's docstring)
            for window in windows:
                window.append(key, w, now)
        return w

    def forget(self, deployment_id: str) -> None:
        """An operator reset the deployment: its recent evidence is gone with its record (its
        domains' windows too)."""
        self._recent.pop(deployment_id, None)
        for name in [n for n in self._recent if isinstance(n, tuple) and n[0] == deployment_id]:
            del self._recent[name]
