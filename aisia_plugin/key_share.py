"""How much one API key's quality evidence may weigh: no single key moves a deployment's quality
for everyone beyond a bound (docs/security.md#tenants).

The rule, per deployment, over its recent pieces of evidence that named a key and counted
(feedback, conversation signals; in this process): those of the last ``PullRule.horizon_s`` (a
day), at most the last ``PullRule.window`` of them. Likewise per (deployment, domain) for a piece
recorded in a domain's record too (the least of the two weights counts: the domain's record
decides that domain's prompts for every tenant). A piece refused (of weight 0) is not noted: a
key past its bound that kept sending would push the other keys' pieces out and find itself alone
(found by a review); the others' pieces leave with time instead.

The estimate is a weighted mean (quality.py): the prior's ``strength`` pseudo-observations at the
prior ``p`` and each piece's value at its weight, forgotten by ``gamma`` per tick of the store.
The window forgets its pieces the same way (each is read at its weight times ``gamma`` to the
ticks since it was noted), so it reads them as the estimate does. Let ``O`` be the prior's
strength plus the weight of every other key's pieces in the window and ``mu`` the mean they and
the prior give (the estimate without this key), ``M`` this key's weight and ``V`` its pieces'
weighted values. The key's *pull*, how far its evidence moves the estimate from ``mu``, is
``D / (O + M)`` with ``D = V - M x mu``. Once another key has spoken about the deployment, the
key's next piece (value ``v``, the source's weight ``base``) counts with the largest weight
``w <= base`` for which

    |D + w x (v - mu)| <= s x (O + M + w)        (s = PullRule.max_pull, 0.10)

so the estimate lies within s = 0.10 of what the prior and the other keys' evidence alone give.
Where the key's pull is already past the bound (the other keys' evidence changed under it), a
piece counts only as far as the pull does not grow. A piece within s of ``mu`` always counts
fully, so keys that agree (tenants served alike by the same deployment) learn together however
few they are, and a key that says the opposite of the others is held to a pull of s however
much it sends. (The rule before bounded each key's *share of the weight* at s: that bounds the
pull too, but two to nine keys bounded one another to a few pieces of evidence a day between
them, so quality was hardly learned where a few teams shared a deployment; docs/security.md.)

The contextual model's prompt weights (contextual.py: per deployment, a mean per hashed slot of
the prompt's words and features, added to the estimate for a prompt that has them) are bounded
the same way, per deployment, for the keys in its window. The model keeps each slot's
precision-weighted mean h and precision P as sums over the pieces it learned (forgotten alike);
the key's pieces added H and Q of them (``PromptPull``), so without the key the slot's mean
would be ``(h - H) / (P - Q)``, as ``mu`` is the estimate without the key. The key's pull on the
slots, each slot's mean less that one, makes a vector ``D``; a prompt ``y`` (norm 1: each of its
three groups of features has a squared norm of 1/3) moves by the key's evidence ``y . D``, at
most ``|D|`` (Cauchy-Schwarz). Once another key has spoken about the deployment, a piece teaches
the model with the largest weight that keeps ``|D|`` within s (or, past it, from growing:
``ContextualModels._within_pull``), so a key moves the prompt part of any prediction by at most
s from what the other keys' evidence gives, a word repeated in the prompt counting as often as it
appears (its norm then above 1). A piece that agrees with what the others' evidence predicts for
its prompt hardly moves the means: keys that agree learn together. Alone with the deployment, a
key's part is kept but not bounded; it leaves with the key's last piece in the window.

The rule reads the window, not the store's record: with N workers or replicas, each process
bounds the pieces it admits against the other keys' evidence it saw, and the pulls add up to
about s over the shared record (each process's prior counts once more: ``s x (N - 1) x strength
/ (strength + the other keys' weight)`` beyond it). A key alone with a deployment (no other key's
evidence in the window) is its only user: its evidence counts fully, as a single tenant's must
for quality to be learned at all, and leaves the window as other keys' evidence arrives. A key
the other keys left is bounded until their pieces are a day old, then alone; a hostile key
cannot hasten that by sending more. The same principle as the breaker's per-key outlier rule
(blame.OutlierRule): a key's word is weighed against its peers'.

Each deployment's window (``_Window``) holds its pieces, (key, weight, value, when) oldest first,
with each key's running sums of weight and of weighted value, each key's count of pieces and the
running totals, all updated as a piece enters and as the oldest leaves: admitting a piece is
O(1), amortised, for the sums are taken afresh from the pieces once every ``window`` pieces
dropped (adding and subtracting leaves rounding that would otherwise build up). The weights are
kept in the units of a reference tick (a piece's weight divided by ``gamma`` to the ticks since
that tick), so that forgetting costs one factor when the sums are read. Whether another key has
spoken is read from the counts, never from a float difference, so a key alone counts fully
whatever the sums' rounding; a key whose count falls to 0 leaves the maps (its weight is exactly
0). Measured with callgrind (a window of 1,000 pieces from 7 keys, then 100 calls, less the same
run with none), ``admit`` took about 413k instructions a call when it scanned the window (about
1 % of an alias request through the proxy, 40 M) and about 16k with the running sums.

Pure: plain data; the caller says which key, what the prior is, which tick and what time it is."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

# Windows kept: one per deployment and one per (deployment, domain) its evidence named. Deployments
# come from the config and domains from the policy: a bound, never reached.
MAX_WINDOWS = 65536
# A window's weights are kept in the units of its reference tick; once reading them takes a
# factor below this (about 330 half-lives of forgetting since that tick), they are brought to the
# current tick (far inside float64's range, whose smallest normal is 2e-308).
_REBASE_BELOW = 1e-100


@dataclass(frozen=True, slots=True)
class PullRule:
    """The largest pull one key's recent evidence may have on a deployment's quality estimate,
    and how many pieces of evidence per deployment make "recent"."""

    max_pull: float = 0.10
    window: int = 1000
    # Seconds a piece stays recent. A refused piece is not noted, so a key's own pieces never push
    # the other keys' out; they leave with time instead: a key that other keys have left alone with
    # the deployment counts fully again a day after they last spoke (its evidence was bounded
    # meanwhile), and a hostile key must wait out a day of the others' silence, however much it sends.
    horizon_s: float = 86400.0


class Standing(NamedTuple):
    """A key's place in a window as its next piece will find it, weights as of the tick it is read
    at: its own weight and weighted values, the other keys' weight and weighted values, and
    whether another key has a piece."""

    mine: float
    mine_values: float
    others: float
    others_values: float
    others_spoke: bool


class PromptPull:
    """One key's part of a deployment's prompt weights: per slot of the contextual model, the
    precision-weighted mean (h) and the precision its pieces added, as true values at ``tick``,
    forgotten as the model forgets its own (both decay by gamma per tick of the store). Numpy
    arrays over the slots it touched, ascending: a key's part may hold thousands of them, and a
    piece reads them all and merges its own in."""

    __slots__ = ("slots", "hq", "tick")

    def __init__(self):
        self.slots = np.zeros(0, dtype=np.int64)
        self.hq = np.zeros((0, 2))  # per slot: (h, precision) added
        self.tick = 0.0

    def at(self, tick: float, gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slots, h, precision) brought to `tick` (views: read them before the next ``add``)."""
        if tick > self.tick:
            if gamma < 1.0 and len(self.slots):
                self.hq *= gamma ** (tick - self.tick)
            self.tick = tick
        return self.slots, self.hq[:, 0], self.hq[:, 1]

    def add(self, slots: np.ndarray, h: np.ndarray, precision: np.ndarray) -> None:
        """A piece added `h` and `precision` (true values at ``tick``) at `slots` (ascending, each
        once)."""
        added = np.column_stack((h, precision))
        pos = np.searchsorted(self.slots, slots)
        held = pos < len(self.slots)
        held[held] = self.slots[pos[held]] == slots[held]
        self.hq[pos[held]] += added[held]
        new = ~held
        if new.any():  # inserted where they sort (np.insert keeps the given order at one place)
            self.slots = np.insert(self.slots, pos[new], slots[new])
            self.hq = np.insert(self.hq, pos[new], added[new], axis=0)


class PromptBound(NamedTuple):
    """What a keyed piece teaching the prompt weights is held to: the key's part so far and the
    largest norm it may reach (None: the key is alone with the deployment and counts fully)."""

    pull: PromptPull
    limit: Optional[float]


class _Window:
    """One deployment's recent keyed evidence and its running sums. ``pieces``: (key, weight
    counted in the units of ``ref``, value, when noted), oldest first, at most ``rule.window``,
    each weighing > 0 (a refused piece is not noted); ``sums`` / ``values``: each key's weight and
    weighted values; ``counts``: each key's number of pieces, which decides whether another key
    spoke exactly (a count, never a float difference); ``total`` / ``value_total``: every key's.
    A key with no piece in the window has no entry in the maps: its weight is exactly 0. ``ref``
    and ``gamma``: a weight ``w`` held here weighs ``w x gamma ** (tick - ref)`` at ``tick``."""

    __slots__ = ("size", "pieces", "sums", "values", "counts", "total", "value_total", "evicted", "ref", "gamma",
                 "prompt")

    def __init__(self, size: int):
        self.size = size  # the most pieces held: PullRule.window
        self.pieces: deque[tuple[str, float, float, float]] = deque()
        self.sums: dict[str, float] = {}
        self.values: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.total = 0.0
        self.value_total = 0.0
        self.evicted = 0  # pieces dropped since the sums were last computed afresh
        self.ref = 0.0
        self.gamma = 1.0
        # Each key's part of the deployment's prompt weights (a deployment's window only), kept
        # while the key has a piece here.
        self.prompt: dict[str, PromptPull] = {}

    def factor(self, tick: float, gamma: float) -> float:
        """What a weight held here is multiplied by to read it at `tick` (forgotten by `gamma`),
        the window first brought to `tick` when its units drift far or `gamma` changed."""
        if gamma != self.gamma:
            self._rebase(tick)
            self.gamma = gamma
        f = self._forgotten(tick)
        if f < _REBASE_BELOW:
            self._rebase(tick)
            f = 1.0
        return f

    def _forgotten(self, tick: float) -> float:
        """What is left at `tick` of a weight of 1 at the reference tick, by the window's gamma."""
        return self.gamma ** (tick - self.ref) if self.gamma < 1.0 else 1.0

    def _rebase(self, tick: float) -> None:
        """The weights brought to `tick`, the new reference (by the window's gamma so far)."""
        f = self._forgotten(tick)
        self.pieces = deque((k, w * f, v, when) for k, w, v, when in self.pieces)
        self.ref = tick
        self._sum_afresh()

    def weights(self, key: str) -> tuple[float, float]:
        """(this key's weight, every other key's weight), in the units of the window's reference
        tick: others is 0.0 exactly when no other key has a piece here, else the total less mine,
        within the total's rounding (at 0 or above: a 2e-16 piece beside a sum of 50 may read
        0.0, so the counts decide)."""
        mine = self.sums.get(key, 0.0)
        return mine, (max(0.0, self.total - mine) if self.others_spoke(key) else 0.0)

    def others_spoke(self, key: str) -> bool:
        """Whether a key other than `key` has a piece here (read from the counts: exact)."""
        return len(self.counts) > (key in self.counts)

    def standing(self, key: str, f: float) -> Standing:
        """The key's standing as the window will be when its next piece enters (without its
        oldest piece once it is full), its weights multiplied by `f` (``factor``)."""
        mine, total = self.sums.get(key, 0.0), self.total
        mine_v, total_v = self.values.get(key, 0.0), self.value_total
        speakers, me_speaking = len(self.counts), key in self.counts
        if len(self.pieces) >= self.size:
            oldest, weight, value, _ = self.pieces[0]  # leaves as the piece enters
            total -= weight
            total_v -= weight * value
            if oldest == key:
                mine -= weight
                mine_v -= weight * value
            if self.counts[oldest] == 1:  # its key's last piece: that key falls silent
                speakers -= 1
                me_speaking = me_speaking and oldest != key
        return Standing(mine * f, mine_v * f, max(0.0, total - mine) * f, max(0.0, total_v - mine_v) * f,
                        speakers > me_speaking)

    def age(self, before: float) -> None:
        """Drop the pieces noted before `before` (they are no longer recent)."""
        while self.pieces and self.pieces[0][3] < before:
            self._drop_oldest()

    def append(self, key: str, weight: float, value: float, now: float, f: float) -> None:
        """Note a piece that counts (weight > 0; `f`: ``factor`` at its tick), dropping the
        oldest once the window is full."""
        if len(self.pieces) >= self.size:
            self._drop_oldest()
        held = weight / f
        self.pieces.append((key, held, value, now))
        self.sums[key] = self.sums.get(key, 0.0) + held
        self.values[key] = self.values.get(key, 0.0) + held * value
        self.counts[key] = self.counts.get(key, 0) + 1
        self.total += held
        self.value_total += held * value

    def _drop_oldest(self) -> None:
        key, weight, value, _ = self.pieces.popleft()
        left = self.counts[key] - 1
        if left:
            self.counts[key] = left
            self.sums[key] -= weight
            self.values[key] -= weight * value
        else:  # the key's last piece: its weight is exactly 0, not a rounding residue
            del self.counts[key], self.sums[key], self.values[key]
            self.prompt.pop(key, None)
        self.total -= weight
        self.value_total -= weight * value
        self.evicted += 1
        if self.evicted >= self.size:
            self._sum_afresh()

    def _sum_afresh(self) -> None:
        """Each sum kept by adding and subtracting drifts from a fresh sum of the same pieces by
        rounding (an ulp or so per step, without end over a long-lived deployment); summed afresh
        once every `size` dropped pieces, the drift stays within a window's steps, for O(1)
        amortised per piece."""
        sums: dict[str, float] = {}
        values: dict[str, float] = {}
        for k, w, v, _ in self.pieces:
            sums[k] = sums.get(k, 0.0) + w
            values[k] = values.get(k, 0.0) + w * v
        self.sums, self.values = sums, values
        self.total = sum(w for _, w, _, _ in self.pieces)
        self.value_total = sum(w * v for _, w, v, _ in self.pieces)
        self.evicted = 0


def bounded_weight(base: float, value: float, standing: Standing, strength: float, prior: float,
                   s: float) -> float:
    """The largest weight in [0, `base`] a piece of `value` may count with so that the key's pull
    on the estimate stays within `s`, or, when it is already past `s`, does not grow (the
    module's docstring). `strength` and `prior`: the estimate's prior (quality.py)."""
    o = strength + standing.others
    if o <= 0.0:
        return base  # nothing else the estimate is made of: no pull to bound
    mu = (strength * prior + standing.others_values) / o  # the estimate without this key
    m = standing.mine
    d = standing.mine_values - m * mu  # the pull is d / (o + m)
    bound = max(s, abs(d) / (o + m))  # past s already (the other keys' evidence changed): no further
    delta = value - mu
    w = base
    # |d + w delta| <= bound x (o + m + w), one side at a time: each bounds w when the piece
    # pulls that way faster than the room grows.
    if delta > bound:
        w = min(w, (bound * (o + m) - d) / (delta - bound))
    if -delta > bound:
        w = min(w, (bound * (o + m) + d) / (-delta - bound))
    return max(0.0, w)


class KeyPulls:
    """Each deployment's recent keyed evidence (``_Window``), the last ``rule.window`` pieces."""

    __slots__ = ("rule", "_recent")

    def __init__(self, rule: PullRule = PullRule()):
        self.rule = rule
        self._recent: dict = {}  # deployment id, or (deployment id, domain) -> its _Window

    def weights(self, deployment_id, key: str) -> tuple[float, float]:
        """(this key's weight, every other key's weight) in the deployment's window (or a
        (deployment, domain) one), unforgotten since the window's reference tick."""
        recent = self._recent.get(deployment_id)
        return (0.0, 0.0) if recent is None else recent.weights(key)

    def _window(self, name) -> _Window:
        recent = self._recent.get(name)
        if recent is None:
            if len(self._recent) >= MAX_WINDOWS:
                self._recent.clear()
            recent = self._recent[name] = _Window(max(1, self.rule.window))
        return recent

    def admit(self, deployment_id: str, key: Optional[str], base: float, value: float, strength: float,
              prior: float, domain: Optional[str] = None, domain_prior: Optional[float] = None,
              now: float = 0.0, tick: float = 0.0, gamma: float = 1.0) -> float:
        """The weight `key`'s next piece of evidence about the deployment (`value`, in [0, 1])
        counts with (`base`, the source's weight, at most), noted in the window. `strength` and
        `prior`: the deployment's estimate's prior (quality.py). With a `domain` (the piece is
        recorded in the deployment's record of that domain too, which decides that domain's
        prompts for every tenant, with the prior `domain_prior`), the least of what the
        deployment's window and the domain's allow: one key's pull is bounded in each record the
        piece moves. `now`: the caller's clock, in seconds (what ``PullRule.horizon_s`` is
        counted on); `tick` and `gamma`: the store's tick and the forgetting the estimate reads
        its evidence with. No key (an in-process caller): `base`."""
        if key is None:
            return base
        s = self.rule.max_pull
        windows = [(self._window(deployment_id), prior)]
        if domain is not None:
            windows.append((self._window((deployment_id, domain)), prior if domain_prior is None else domain_prior))
        factors = []
        for window, _ in windows:
            window.age(now - self.rule.horizon_s)
            factors.append(window.factor(tick, gamma))
        standings = [(window.standing(key, f), p) for (window, p), f in zip(windows, factors)]
        w = base  # alone with the deployment: its only user, counted fully in every record
        if standings[0][0].others_spoke:
            # Among other keys: bounded in each record the piece moves, a domain's too, even one
            # no other key has spoken of yet (the first to speak of a domain does not own it).
            for standing, p in standings:
                w = min(w, bounded_weight(base, value, standing, strength, p, s))
        if w > 0.0:  # a refused piece is not noted (see the module's docstring)
            for (window, _), f in zip(windows, factors):
                window.append(key, w, value, now, f)
        return w

    def prompt_bound(self, deployment_id: str, key: Optional[str]) -> Optional[PromptBound]:
        """What `key`'s piece about the deployment, just admitted (``admit``), is held to when it
        teaches the contextual model's prompt weights (the module's docstring); None without a
        key or when the piece was not admitted (nothing to teach)."""
        window = self._recent.get(deployment_id)
        if key is None or window is None or key not in window.counts:
            return None
        pull = window.prompt.get(key)
        if pull is None:
            pull = window.prompt[key] = PromptPull()
        return PromptBound(pull, self.rule.max_pull if window.others_spoke(key) else None)

    def forget(self, deployment_id: str) -> None:
        """An operator reset the deployment: its recent evidence is gone with its record (its
        domains' windows too)."""
        self._recent.pop(deployment_id, None)
        for name in [n for n in self._recent if isinstance(n, tuple) and n[0] == deployment_id]:
            del self._recent[name]
