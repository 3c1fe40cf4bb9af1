"""The in-memory state store (the default backend, and the Redis store's local fallback).

Keys follow the seed: bandit:{deployment} (and bandit:{deployment}:{domain} per domain),
cb:{deployment}. A JSON dump/load lets `aisia explain --state FILE` show a decision on learned
state; with ``state.snapshot_path`` the store loads that file at start and writes it back on a
clean shutdown, so a single-process user keeps what was learned. Stored values are read by the
one lenient reader of stored records (records.py)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import asdict
from typing import Optional

from ..bandit import ArmStats
from ..blame import OutlierRule, PeerCalls, RecentCalls
from ..breaker import BreakerState, CircuitBreaker
from ..contextual import ContextualModels
from ..interfaces import PoolState
from ..learning import LearningRules, OutcomeRecord, apply_outcome
from ..pacing import PaceState
from ..quality import QualityRecord, QualityStats, apply_evidence, quality_view
from .records import number, read_arm, read_breaker, read_pace, read_quality

log = logging.getLogger("aisia.state")

class ServedRequests:
    """The requests an alias served, awaiting explicit feedback: request id -> record (a JSON-able
    dict: alias, deployment, domain, session, the hash of the key that made it). Bounded in
    number and age (a proxy serves for months); a record is taken once."""

    def __init__(self, limit: int = 50000):
        self.limit = limit
        # The records, oldest first, and beside them their expiry: not a (expiry, record) pair
        # per request, which the cyclic collector would track for the record's 24 hours (a tuple
        # holding a dict stays tracked), each one walked by every full collection; a record of
        # strings is a dict CPython does not track.
        self._table: "OrderedDict[str, dict]" = OrderedDict()
        self._expires: dict[str, float] = {}

    def put(self, request_id: str, record: dict, ttl_s: float) -> None:
        now = time.monotonic()
        table, expires = self._table, self._expires
        table[request_id] = record
        table.move_to_end(request_id)
        expires[request_id] = now + ttl_s
        while table:
            first = next(iter(table))
            if len(table) <= self.limit and expires[first] > now:
                break
            table.popitem(last=False)
            del expires[first]

    def take(self, request_id: str, key: Optional[str] = None, *, peek: bool = False) -> Optional[dict]:
        """The record, removed (left with `peek`); None when unknown, expired, or made with
        another key than `key` (None: any key, the proxy admin's)."""
        hit = self._table.get(request_id)
        if hit is None:
            return None
        if self._expires[request_id] <= time.monotonic():
            self.drop(request_id)
            return None
        if key is not None and hit.get("key") != key:
            return None
        if not peek:
            self.drop(request_id)
        return hit

    def drop(self, request_id: str) -> None:
        if self._table.pop(request_id, None) is not None:
            del self._expires[request_id]

    def __len__(self) -> int:
        return len(self._table)


class ExpiringCounts:
    """Named counters, each living ``ttl_s`` from its first count: a signed-out session's mark
    until its cookie would have expired, a key's refused requests in the current window, a
    conversation answer's claim, a key's signals in the hour. Bounded per kind (a name's part
    before its first ':', which the code chooses: ``judged``, ``signals``, ``session-revoked``...):
    past ``limit`` in a kind, its expired go, then its oldest. So a flood of one kind (a tenant's
    follow-ups claiming answers) never drops another kind's counter (a key's hourly signal bound,
    a revoked session)."""

    def __init__(self, limit: int = 100000):
        self.limit = limit
        self._kinds: dict[str, dict[str, list]] = {}  # kind -> {name -> [count, monotonic expiry]}, oldest first

    def _table(self, name: str) -> dict[str, list]:
        kind = name.split(":", 1)[0]
        table = self._kinds.get(kind)
        if table is None:
            table = self._kinds[kind] = {}
        return table

    def count_up(self, name: str, ttl_s: float) -> int:
        now = time.monotonic()
        counts = self._table(name)
        hit = counts.get(name)
        if hit is None or hit[1] <= now:
            counts.pop(name, None)
            if len(counts) >= self.limit:
                self._trim(counts, now)
            hit = counts[name] = [0, now + ttl_s]
        hit[0] += 1
        return hit[0]

    def counted(self, name: str) -> int:
        hit = self._table(name).get(name)
        return hit[0] if hit is not None and hit[1] > time.monotonic() else 0

    def _trim(self, counts: dict[str, list], now: float) -> None:
        # A kind's counters mostly share one lifetime, so the oldest expire first: dropped from the
        # front while expired (not a scan of the whole table on each new name), then the oldest.
        while counts:
            oldest = next(iter(counts))
            if counts[oldest][1] > now and len(counts) < self.limit:
                break
            del counts[oldest]


# What a dump() writes at its top level; an object with none of them is some other JSON.
STATE_SECTIONS = frozenset({"ticks", "bandit", "breakers", "lkgp", "pacing", "quality", "contextual"})


def _not_a_state(data: dict) -> str:
    """Why a JSON object is no state, saying what it is when it is the stats view (each value a
    deployment's record with pulls, mean reward and breaker: `/admin/bandit/stats`, `aisia stats
    --json`), which a user may well save and give as a snapshot."""
    if all(isinstance(v, dict) and {"pulls", "mean_reward", "breaker"} <= v.keys() for v in data.values()):
        return ("not a state: this is the stats view of /admin/bandit/stats (or `aisia stats --json`), what a "
                "proxy shows of its learning, not the state it decides on; read a running proxy with --url URL, "
                "or give a snapshot (state.snapshot_path)")
    keys = ", ".join(repr(k) for k in list(data)[:5])
    return (f"not a state: none of {', '.join(sorted(STATE_SECTIONS))} at its top level (found {keys}); a state "
            "is what state.snapshot_path holds")


def _record_key(key: str, section: dict, known: set) -> tuple[str, Optional[str]]:
    """(deployment, domain) of a dumped record's key: "dep" its global record, "dep:domain" its
    domain's. Ids hold ':' too ("llama3.2:3b", an Ollama name), so the key is split at its last ':'
    only when it is not itself a known id and what precedes is a deployment: a known id, or one
    whose global record the section holds (a domain's record is written with its deployment's).
    Before, every key was split: "llama3.2:3b" came back as deployment "llama3.2" in a domain "3b"
    (found by a review)."""
    if ":" in key and key not in known:
        dep, dom = key.rsplit(":", 1)
        if dep in known or dep in section:
            return dep, dom
    return key, None


class ExpiringLists:
    """Named lists, each living ``ttl_s`` from its last append and keeping its ``keep`` newest
    items (a conversation's turns). Bounded in number: past ``limit`` the expired go, then the
    least recently written list of the owner holding the most (an owner: who wrote the list, a
    caller's key hash). So one key's flood of new conversations drops its own, never another
    tenant's live conversation while that tenant holds fewer (found by a review: with the least
    recently written of all dropped, one key's 20,000 requests in an hour silenced every other
    tenant's signals)."""

    def __init__(self, limit: int = 20000):
        self.limit = limit
        # owner -> {name -> [items, monotonic expiry]}, least recently written first
        self._owners: dict[str, dict[str, list]] = {}
        self._owner_of: dict[str, str] = {}  # name -> its owner (its size: how many lists are held)

    def add(self, name: str, item, ttl_s: float, keep: int, owner: str = "") -> None:
        now = time.monotonic()
        table = self._owners.get(owner)
        hit = table.pop(name, None) if table is not None else None  # (re-inserted last: most recent)
        if hit is None:  # a new list (or one of that name another owner wrote: it changes hands)
            self._take(name)
            if len(self._owner_of) >= self.limit:
                self._trim(now)
            self._owner_of[name] = owner
            table = self._owners.setdefault(owner, {})
        if hit is None or hit[1] <= now:
            hit = [[], 0.0]
        hit[0].append(item)
        del hit[0][:-max(1, keep)]
        hit[1] = now + ttl_s
        table[name] = hit

    def items(self, name: str) -> list:
        owner = self._owner_of.get(name)
        hit = self._owners[owner].get(name) if owner is not None else None
        return list(hit[0]) if hit is not None and hit[1] > time.monotonic() else []

    def _take(self, name: str):
        """The list `name`, removed (None when there is none)."""
        owner = self._owner_of.pop(name, None)
        if owner is None:
            return None
        table = self._owners[owner]
        hit = table.pop(name)
        if not table:
            del self._owners[owner]
        return hit

    def _trim(self, now: float) -> None:
        # The lists of one owner mostly share one lifetime, so the least recently written expire
        # first: dropped from each owner's front while expired (not a scan of every list).
        for owner in list(self._owners):
            table = self._owners[owner]
            while table and table[next(iter(table))][1] <= now:
                self._take(next(iter(table)))
        while len(self._owner_of) >= self.limit:
            largest = max(self._owners.values(), key=len)
            self._take(next(iter(largest)))


class MemoryState:
    """The in-process store (implements ``interfaces.StateStore``). Writes take one lock, so an
    outcome's records change together under threads; asyncio tasks never interleave inside a
    call, since no call awaits."""

    def __init__(self, snapshot_path=None):
        self._lock = threading.Lock()
        self._peers: Optional[RecentCalls] = None  # the deployments' recent calls by key
        self.snapshot_path = snapshot_path
        # domain (None: the global record) -> deployment -> record: a pool's read is then one
        # dict look-up per deployment, with no key to build.
        self.arms: dict[Optional[str], dict[str, ArmStats]] = {None: {}}
        self.breakers: dict[str, BreakerState] = {}
        self.lkgp: dict[str, str] = {}
        self.ticks = 0.0
        # alias -> its spend target's pacing record (pacing.py)
        self.paces: dict[str, PaceState] = {}
        self.served = ServedRequests()
        self.counts = ExpiringCounts()
        self.lists = ExpiringLists()
        # The contextual strategy's per-deployment models (the engine updates them in place).
        self.contextual = ContextualModels()
        # domain (None: over every domain) -> deployment -> its quality evidence (quality.py)
        self.quality: dict[Optional[str], dict[str, QualityStats]] = {None: {}}
        # The engine's quality.QualityPriors, for stats() to show each record's prior and estimate.
        self.quality_prior = None

    def arm(self, deployment_id: str, domain: Optional[str] = None) -> Optional[ArmStats]:
        by_dep = self.arms.get(domain)
        return by_dep.get(deployment_id) if by_dep is not None else None

    def put_arm(self, deployment_id: str, domain: Optional[str], stats: ArmStats) -> None:
        by_dep = self.arms.get(domain)
        if by_dep is None:
            by_dep = self.arms[domain] = {}
        by_dep[deployment_id] = stats

    def quality_of(self, deployment_id: str, domain: Optional[str] = None) -> Optional[QualityStats]:
        """The deployment's quality evidence (in `domain`; None: over every domain), None when none."""
        by_dep = self.quality.get(domain)
        return by_dep.get(deployment_id) if by_dep is not None else None

    def record_quality(self, rec: QualityRecord, rules: LearningRules) -> None:
        """Apply one piece of quality evidence atomically (``quality.apply_evidence``) at the
        current tick: it moves the quality records only, never an arm, a breaker or the tick."""
        with self._lock:
            dep = rec.deployment_id
            g, d = apply_evidence(rec, self.ticks, rules.quality_gamma, self.quality_of(dep),
                                  self.quality_of(dep, rec.domain) if rec.domain is not None else None)
            self.quality[None][dep] = g
            if d is not None:
                self.quality.setdefault(rec.domain, {})[dep] = d

    def read_pool(self, deployment_ids, domain: Optional[str] = None, alias: Optional[str] = None) -> PoolState:
        """Everything a decision reads, in one call (the Redis store answers it from its mirror):
        a ``PoolState``, the lists in the order of ``deployment_ids`` with None where nothing is
        stored (a default breaker, an unseen arm); ``domain_arms`` is all None when ``domain`` is
        None, ``last_known_good`` is the alias's (None without an alias)."""
        arms, breakers = self.arms, self.breakers.get
        g = list(map(arms[None].get, deployment_ids))
        by_domain = arms.get(domain) if domain is not None else None
        d = list(map(by_domain.get, deployment_ids)) if by_domain is not None else [None] * len(g)
        return PoolState(tick=self.ticks, breakers=list(map(breakers, deployment_ids)), global_arms=g, domain_arms=d,
                         last_known_good=self.lkgp.get(alias) if alias is not None else None)

    def record_outcome(self, rec: OutcomeRecord, rules: LearningRules) -> float:
        with self._lock:
            dep = rec.deployment_id
            by_dep = self.arms[None]
            dom = self.arms.get(rec.domain) if rec.domain is not None else None
            paced = rec.pace_alias
            out = apply_outcome(rec, rules, self.breakers.get(dep), self.ticks, by_dep.get(dep),
                                dom.get(dep) if dom is not None else None,
                                self.paces.get(paced) if paced is not None else None)
            if out.pace is not None:
                self.paces[paced] = out.pace
            self.breakers[dep] = out.breaker
            self.ticks = out.tick
            if out.global_arm is not None:
                by_dep[dep] = out.global_arm
            if out.domain_arm is not None:
                self.put_arm(dep, rec.domain, out.domain_arm)
            if out.last_known_good is not None:
                self.lkgp[out.last_known_good] = dep
            return out.tick

    def reserve_probe(self, deployment_id: str, now: float, breaker: CircuitBreaker) -> bool:
        with self._lock:
            allowed, new = breaker.reserve(self.breaker(deployment_id), now)
            if allowed:
                self.breakers[deployment_id] = new
            return allowed

    def reset(self, deployment_id: str) -> None:
        with self._lock:
            for by_dep in self.arms.values():
                by_dep.pop(deployment_id, None)
            for by_dep in self.quality.values():
                by_dep.pop(deployment_id, None)
            self.breakers.pop(deployment_id, None)

    def breaker(self, deployment_id: str) -> BreakerState:
        return self.breakers.get(deployment_id) or BreakerState()

    def put_breaker(self, deployment_id: str, state: BreakerState) -> None:
        self.breakers[deployment_id] = state

    def tick(self) -> float:
        return self.ticks

    def advance_tick(self) -> float:
        with self._lock:
            self.ticks += 1.0
            return self.ticks

    def last_known_good(self, alias: str) -> Optional[str]:
        return self.lkgp.get(alias)

    def pace(self, alias: str) -> Optional[PaceState]:
        """The alias's spend-pacing record (None before its first paced call)."""
        return self.paces.get(alias)

    def pacing(self) -> dict:
        """Per paced alias, its record as plain data: ``{alias: {multiplier, spend_per_1k, count,
        spend_usd, updated}}`` (``aisia stats``, the metrics)."""
        return {alias: asdict(p) for alias, p in sorted(self.paces.items())}

    def set_last_known_good(self, alias: str, deployment_id: str) -> None:
        self.lkgp[alias] = deployment_id

    # -- the shared-store side of the contract (nothing to share here) --------------------------
    def clock(self) -> float:
        """The time the engine should decide with (a shared store gives its server's)."""
        return time.time()

    # -- the deployments' recent calls by key (the peers' check: blame.outlier_verdict) ---------
    def note_peer_call(self, deployment_id: str, key: Optional[str], success: bool, now: float,
                       rule: OutlierRule) -> None:
        """One call of `key` to the deployment at `now` (the store's clock), kept for the window of
        `rule` (``circuit_breaker.outlier``)."""
        with self._lock:
            self._peers_of(rule).note(deployment_id, key, success, now)

    def peer_calls(self, deployment_id: str, key: Optional[str], now: float, rule: OutlierRule) -> PeerCalls:
        """The other keys' calls to the deployment in the window before `now`."""
        with self._lock:
            return self._peers_of(rule).peers(deployment_id, key, now)

    def forget_peer_calls(self, deployment_id: str) -> None:
        with self._lock:
            if self._peers is not None:
                self._peers.forget(deployment_id)

    def _peers_of(self, rule: OutlierRule) -> RecentCalls:
        if self._peers is None:
            self._peers = RecentCalls(rule)
        self._peers.rule = rule  # (a reloaded policy's numbers)
        return self._peers

    async def start(self) -> None:
        """Open the store (a shared one connects; never raises for an unreachable server). With a
        snapshot path, load what the file holds (a missing file is a first start); a file that is
        no state is a ValueError naming it."""
        path = self.snapshot_path
        if path and os.path.exists(path):
            self.replace_with(MemoryState.load_file(path))
            log.info("state loaded from the snapshot %s", path)

    async def prepare(self, deployment_ids=(), alias: Optional[str] = None) -> None:
        """Make what a decision over these deployments reads current (a shared store refreshes
        its local mirror when older than its cache bound). Nothing to do in memory."""

    async def reserve_probe_shared(self, deployment_id: str, now: float, breaker: CircuitBreaker) -> bool:
        """``reserve_probe`` made atomic across every process sharing the store."""
        return self.reserve_probe(deployment_id, now, breaker)

    def note_served(self, request_id: str, record: dict, ttl_s: float) -> None:
        """Keep what feedback for `request_id` needs (a shared store shares it with every process)."""
        self.served.put(request_id, record, ttl_s)

    async def take_served(self, request_id: str, key: Optional[str] = None) -> Optional[dict]:
        """The served request's record, taken once; None when unknown, expired, already taken,
        or made with another key than `key` (None: any)."""
        return self.served.take(request_id, key)

    async def count_up(self, name: str, ttl_s: float) -> Optional[int]:
        """One more of the counter `name`, which lives `ttl_s` from its first count; the count
        now (a shared store counts for every process; None when it cannot be reached)."""
        with self._lock:
            return self.counts.count_up(name, ttl_s)

    async def counted(self, name: str) -> Optional[int]:
        """The counter `name` now: 0 when never counted or expired (None: a shared store that
        cannot be reached)."""
        return self.counts.counted(name)

    async def add_to_list(self, name: str, item: dict, ttl_s: float, keep: int, owner: str = "") -> Optional[bool]:
        """Append `item` to the list `name`, which lives `ttl_s` from its last append and keeps
        its `keep` newest items (a shared store shares it with every process); `owner`, who
        writes it, is whose lists go first when too many are held (``ExpiringLists``)."""
        with self._lock:
            self.lists.add(name, item, ttl_s, keep, owner)
        return True

    async def list_of(self, name: str) -> Optional[list]:
        """The list `name`, oldest first (empty: never written, or expired)."""
        with self._lock:
            return self.lists.items(name)

    async def aclose(self) -> None:
        """Flush what is pending (a shared store's queued outcomes; here the snapshot, if any)."""
        if self.snapshot_path:
            self.save_file(self.snapshot_path)

    def stats(self, gamma: Optional[float] = None) -> dict:
        """Per deployment, the seed's ``/admin/bandit/stats`` shape plus the exact count, the
        error rate, the average latency, the breaker, its quality beside that health and the
        per-domain records: ``{dep: {pulls, mean_reward, alpha, beta, count, avg_latency,
        error_rate, quality: {estimate, prior, evidence: {prior, feedback, judge, signal},
        evidence_weight}, breaker, domains: {domain: {...}}}}`` (``quality.quality_view``: the
        prior and the estimate from the engine's ``quality_prior`` when one is attached, the
        evidence seen at the store's tick with forgetting `gamma`, the engine's when None)."""
        priors = self.quality_prior
        if gamma is None:
            gamma = getattr(priors, "gamma", 1.0)
        tick = self.ticks

        def row(s: ArmStats, dep: str, dom: Optional[str]) -> dict:
            q = self.quality_of(dep, dom)
            view = (priors.view(q, dep, dom, tick, gamma) if priors is not None
                    else quality_view(q, None, None, tick, gamma))
            return {"pulls": s.pulls, "mean_reward": s.mean_reward, "alpha": s.alpha, "beta": s.beta,
                    "count": s.count, "avg_latency": s.avg_latency, "error_rate": s.error_rate, "quality": view}

        out: dict = {}
        for dep, s in sorted(self.arms[None].items()):
            out[dep] = {**row(s, dep, None), "breaker": self.breaker(dep).state, "domains": {}}
        seen = [(dom, dep) for dom, by_dep in self.arms.items() for dep in by_dep]
        seen += [(dom, dep) for dom, by_dep in self.quality.items() for dep in by_dep]
        for dom, dep in seen:
            entry = out.get(dep)
            if entry is None:
                entry = out[dep] = {**row(ArmStats(), dep, None), "breaker": self.breaker(dep).state, "domains": {}}
            if dom is not None and dom not in entry["domains"]:
                entry["domains"][dom] = row(self.arm(dep, dom) or ArmStats(), dep, dom)
        for dep, bs in self.breakers.items():
            if dep not in out:
                out[dep] = {**row(ArmStats(), dep, None), "breaker": bs.state, "domains": {}}
        return out

    # -- persistence for the CLI ------------------------------------------------------------
    def dump(self) -> dict:
        bandit = {}
        for dom, by_dep in self.arms.items():
            for dep, s in by_dep.items():
                bandit[f"{dep}:{dom}" if dom else dep] = asdict(s)
        out = {
            "ticks": self.ticks,
            "bandit": bandit,
            "breakers": {k: asdict(v) for k, v in self.breakers.items()},
            "lkgp": dict(self.lkgp),
        }
        quality = {}
        for dom, by_dep in self.quality.items():
            for dep, q in by_dep.items():
                quality[f"{dep}:{dom}" if dom else dep] = asdict(q)
        if quality:
            out["quality"] = quality
        if self.paces:
            out["pacing"] = self.pacing()
        if len(self.contextual):
            out["contextual"] = self.contextual.dump()
        return out

    @classmethod
    def load(cls, data: dict, deployment_ids=(), notes: list | None = None) -> "MemoryState":
        """The store a ``dump()`` describes. A wrong shape (not an object, or a section that is not
        one) is a ValueError; a bad value inside a record falls back to its default or is clamped
        (records.py), and with a ``notes`` list each such value is named there with its record
        ("bandit 'a-1': pulls: 1e-300 is not 0 or a count of at least 1: read as 0.0")."""
        if not isinstance(data, dict):
            raise ValueError("not a state: expected a JSON object with 'ticks', 'bandit', 'breakers' and 'lkgp'")
        if data and not STATE_SECTIONS & data.keys():
            raise ValueError(_not_a_state(data))
        for section in ("bandit", "breakers", "lkgp", "pacing", "quality"):
            if not isinstance(data.get(section) or {}, dict):
                raise ValueError(f"not a state: '{section}' must be a JSON object")
        st = cls()
        mine = [] if notes is not None else None

        def named(section, key):
            if mine:
                notes.extend(f"{section} {key!r}: {n}" for n in mine)
                mine.clear()

        raw_ticks = data.get("ticks", 0)
        ticks = number(raw_ticks, 0.0, 1e15)
        st.ticks = ticks if ticks is not None else 0.0
        if ticks is None and notes is not None:
            notes.append(f"ticks: {raw_ticks!r} is not a number in [0, 1e+15]: read as 0.0")
        known = set(deployment_ids)
        for key, raw in (data.get("bandit") or {}).items():
            dep, dom = _record_key(key, data["bandit"], known)
            st.put_arm(dep, dom, read_arm(raw, mine))
            named("bandit", key)
        for key, raw in (data.get("breakers") or {}).items():
            st.breakers[key] = read_breaker(raw, mine)
            named("breakers", key)
        lkgp = data.get("lkgp") or {}
        st.lkgp = {str(k): v for k, v in lkgp.items() if isinstance(v, str)}
        if notes is not None:
            notes.extend(f"lkgp {k!r}: {v!r} is not a deployment id: ignored" for k, v in lkgp.items()
                         if not isinstance(v, str))
        for key, raw in (data.get("quality") or {}).items():
            dep, dom = _record_key(key, data["quality"], known)
            fields = raw if isinstance(raw, dict) else {}
            if not isinstance(raw, dict) and mine is not None:
                mine.append(f"record: {raw!r} is not a mapping of fields: read as no evidence")
            q = read_quality(fields, "", mine) if fields else None
            if q is not None:
                st.quality.setdefault(dom, {})[dep] = q
            named("quality", key)
        for key, raw in (data.get("pacing") or {}).items():
            st.paces[str(key)] = read_pace(raw, mine)
            named("pacing", key)
        if data.get("contextual") is not None:
            try:
                st.contextual = ContextualModels.load(data["contextual"])
            except ValueError as exc:
                raise ValueError(f"not a state: 'contextual': {exc}") from None
        return st

    def save_file(self, path) -> None:
        """Write the dump to ``path`` atomically (a temporary file renamed over it), so that a
        crash while writing can never leave a truncated state behind."""
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.dump(), fh, indent=1)
        os.replace(tmp, path)

    def copy(self) -> "MemoryState":
        """An independent store with the same records (records are never changed in place: a
        copy of the mappings is enough)."""
        st = MemoryState()
        with self._lock:
            st.arms = {dom: dict(by_dep) for dom, by_dep in self.arms.items()}
            st.breakers = dict(self.breakers)
            st.lkgp = dict(self.lkgp)
            st.paces = dict(self.paces)
            st.quality = {dom: dict(by_dep) for dom, by_dep in self.quality.items()}
            st.ticks = self.ticks
            st.contextual = self.contextual.copy()
        return st

    def replace_with(self, other: "MemoryState") -> None:
        """Take every record of ``other`` (the snapshot loaded at start)."""
        with self._lock:
            self.arms, self.breakers, self.lkgp, self.ticks = other.arms, other.breakers, other.lkgp, other.ticks
            self.paces = other.paces
            self.quality = other.quality
            self.contextual.__dict__.update(other.contextual.__dict__)  # engines hold this object: kept, refilled

    @classmethod
    def load_file(cls, path, deployment_ids=(), warn=None) -> "MemoryState":
        """The store a state file holds (see ``load``); each value read otherwise than written is
        passed to ``warn`` as "FILE: RECORD: FIELD: ..." (default: a warning in the log)."""
        notes: list[str] = []
        with open(path, encoding="utf-8") as fh:
            try:
                st = cls.load(json.load(fh), deployment_ids, notes)
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
        for note in notes:
            (warn or log.warning)(f"{path}: {note}")
        return st
