"""The Redis state store: state shared by every worker and replica (Redis 7+, Valkey, Cluster).

How it keeps the request path free of I/O:

* A local copy (a ``MemoryState``, "the mirror") answers every synchronous call of
  ``interfaces.StateStore``; the engine never waits on Redis.
* ``prepare`` (awaited by the proxy before a decision) refreshes the mirror in one EVALSHA when it
  is older than ``state.cache_ttl_ms`` -- the staleness bound of what other replicas learned --
  waiting at most ``state.timeout_ms`` (then the decision goes on with the local copy). The
  background task below refreshes it too, every ``cache_ttl_ms``, so a busy process rarely waits.
* ``record_outcome`` applies the outcome to the mirror at once and queues it; a background task
  writes the queue in batches (``state.batch_max``, at least every ``state.flush_ms``, and on
  ``aclose``) through ``lua/record.lua``, which runs ``learning.apply_outcome`` step by step
  server-side against the shared tick.

Exactly once: each batch carries (process id, sequence number) and Redis keeps the last sequence
applied per process (``applied``), so a batch re-sent after a lost reply is skipped. The mirror is
rebuilt on each refresh as the server's records plus every outcome of this process whose batch the
server has not applied yet (sequence above its ``applied`` entry) -- none vanishes, none counts
twice. Written batches are kept a few refresh periods more, and the same rule re-sends those that
a Redis restarted from an older disk image, or re-seeded by another replica, lacks.

Outages: any connection error or timeout switches to local state (one warning per outage), and
reconnection is attempted with a doubling backoff up to ``state.reconnect_max_ms``; queued outcomes
are written when Redis returns. A store without its ``epoch`` key (a new Redis, or one restarted
without persistence) is re-seeded from the last server view (the first replica to notice wins;
a record already there is kept), then every replica re-sends what that view lacks.

Breaker timing uses the server's clock: ``clock()`` is the local clock plus the offset to Redis's
TIME measured on each refresh, and the engine decides and records with it. Decay uses the shared
tick. Keys: see ``keys`` below and docs/state.md#keys.

The contextual strategy's models (``store.contextual``, what the engine decides with) are shared
the same way, with their own period: every ``state.contextual_fold_ms`` (and on ``flush``,
``refresh`` and ``aclose``) the background task folds what this process learned since its last
fold into the shared models and reads back what the others folded, in one EVALSHA of
``lua/contextual.lua`` (never on the request path). A fold carries (process id, sequence number)
and is re-sent unchanged until acknowledged (a lost reply, an outage): each column applies it
once. A column Redis lost is re-created from a replica's last view of it (the first to notice),
and every replica re-sends the acknowledged folds that view lacks (kept three fold periods)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import threading
import time
import uuid
from collections import deque
from dataclasses import replace
from typing import Callable, Optional
from urllib.parse import unquote, urlsplit

import numpy as np

from ..bandit import ArmStats
from ..blame import OutlierRule, PeerCalls
from ..breaker import BreakerState, CircuitBreaker, FailureKind
from ..contextual import DIM, ColumnDelta, ContextualModels, SharedColumn
from ..learning import LearningRules, OutcomeRecord
from ..numbers import clamp01
from ..pacing import PACE_FIELDS, PaceState
from ..quality import QUALITY_FIELDS, QualityRecord, QualityStats
from . import scripts
from .memory import MemoryState, ServedRequests
from .records import ARM_FIELDS, BREAKER_FIELDS, number, pairs, read_arm, read_breaker, read_pace, read_quality

log = logging.getLogger("aisia.state")
_timeout = getattr(asyncio, "timeout", None)  # Python 3.11+

# A slot's record in a contextual fold: slot, h, dp (lua/contextual.lua unpacks '<i4dd').
_SLOT_RECORD = np.dtype([("i", "<i4"), ("h", "<f8"), ("d", "<f8")])
_FOLD_RECORDS = 4096  # most slot records one contextual script call applies (Redis runs it for ~2 ms)
_RESET = "reset"


class StoreConfigError(ValueError):
    """The Redis store cannot start: the URL is missing or malformed (the message never holds
    the password)."""


# -- URL ---------------------------------------------------------------------------------------
def redact(url: str) -> str:
    """The URL with its password replaced by ***."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        return parts._replace(netloc=f"{user}:***@{host}").geturl()
    except ValueError:
        return "<unparsable URL>"


def redact_text(text: str, url: str) -> str:
    """Any text (an exception's message) with the URL's password taken out."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        text = text.replace(password, "***").replace(unquote(password), "***")
    return text


def check_url(url: str, source: str) -> str:
    """``url`` if it is a usable redis:// or rediss:// URL, else a StoreConfigError saying why
    (``source`` names where it came from)."""
    shown = redact(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise StoreConfigError(f"{source}: malformed Redis URL {shown!r}: {exc}") from None
    if parts.scheme not in ("redis", "rediss"):
        raise StoreConfigError(f"{source}: Redis URL {shown!r} must start with redis:// or rediss://")
    if not parts.hostname:
        raise StoreConfigError(f"{source}: Redis URL {shown!r} names no host")
    if port is not None and not 0 < port < 65536:
        raise StoreConfigError(f"{source}: Redis URL {shown!r}: port {port} out of range")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise StoreConfigError(f"{source}: Redis URL {shown!r}: the path must be a database number, not {db!r}")
    return url


def key_tag(prefix: str) -> str:
    """What every key starts with: the prefix made a Cluster hash tag (``aisia:`` -> ``{aisia}:``)
    so that every key of the store shares one slot and one script may touch any of them. A
    prefix that already holds a ``{...}`` tag is used as it is."""
    if "{" in prefix and "}" in prefix.split("{", 1)[1]:
        return prefix
    core = prefix[:-1] if prefix.endswith(":") else prefix
    return "{%s}:" % (core or "aisia")


def _holds_arm(fields: dict) -> bool:
    """Whether a stored bandit hash holds an arm (it may hold quality evidence alone)."""
    return any(f in fields for f in ARM_FIELDS)


def _install_quality(base: MemoryState, dep: str, domain: Optional[str], fields: dict) -> None:
    q = read_quality(fields)
    if q is not None:
        base.quality.setdefault(domain, {})[dep] = q


class _Batch:
    __slots__ = ("seq", "ops", "rules")
    # seq: this process's batch number (1, 2, ...), which Redis's ``applied`` hash is compared with

    def __init__(self, seq: int, ops: list, rules: Optional[LearningRules]):
        self.seq, self.ops, self.rules = seq, ops, rules


def _apply(st: MemoryState, op, rules) -> None:
    if isinstance(op, OutcomeRecord):
        st.record_outcome(op, rules)
    elif isinstance(op, QualityRecord):
        st.record_quality(op, rules)
    else:
        st.reset(op[1])


def _f(v) -> str:
    return repr(float(v))


def _records(slots: np.ndarray, values: np.ndarray) -> bytes:
    rec = np.empty(len(slots), dtype=_SLOT_RECORD)
    rec["i"], rec["h"], rec["d"] = slots, values[:, 0], values[:, 1]
    return rec.tobytes()


def _peer_entries(entries) -> dict:
    """peers.lua's calls of one deployment, by caller: (calls, successes)."""
    out = {}
    for raw in entries or ():
        e = scripts.read_reply(scripts.PeerEntry, raw, "peers")
        out[e.caller.decode()] = (int(e.calls), int(e.successes))
    return out


def _weights(blob: bytes) -> np.ndarray:
    """A stored weights string as (DIM, 2) float64 (the slots past its end are 0)."""
    v = np.zeros((DIM, 2))
    got = np.frombuffer(blob, dtype="<f8")
    n = min(len(got) // 2, DIM)
    v[:n] = got[:2 * n].reshape(n, 2)
    return v


class _Fold:
    __slots__ = ("seq", "deltas", "acked_at")

    def __init__(self, seq: int, deltas: list[ColumnDelta]):
        self.seq, self.deltas, self.acked_at = seq, deltas, 0.0


def _opt(v) -> Optional[float]:
    """An optional number for the script (None for none; a value that is no finite number is
    none, as the Python update and breaker treat it)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class RedisStore:
    """``interfaces.StateStore`` over Redis, shared by every process of a deployment (see the
    module docstring). ``on_event(name, n)``, when set, is told of store events (the names of
    ``metrics.STORE_EVENTS``)."""

    def __init__(self, policy, url: Optional[str] = None, *, process_id: Optional[str] = None,
                 url_later: bool = False):
        """`url` None reads it from ``state.redis_url_env``; unset there, the store raises
        StoreConfigError, unless `url_later`: then whoever starts it gives one with
        :meth:`use_url` first (the proxy: the Redis LiteLLM is configured with)."""
        cfg = policy.state
        self.cfg = cfg
        self.cluster = cfg.cluster  # or the Redis LiteLLM is configured with is a cluster (use_url)
        self.url: Optional[str] = None
        self.shown_url = "<no URL yet>"
        self.url_source = f"${cfg.redis_url_env}"
        if url is None:
            url = os.environ.get(cfg.redis_url_env)
        if url:
            self.use_url(url, f"${cfg.redis_url_env}")
        elif not url_later:
            raise self.missing_url()
        self.tag = key_tag(cfg.key_prefix)
        self.process = process_id or uuid.uuid4().hex
        self.on_event: Optional[Callable[[str, int], None]] = None
        self._lock = threading.Lock()
        self._mirror = MemoryState()
        # The engine's quality.QualityPriors, for stats() (set by the engine that uses this store).
        self.quality_prior = None
        # Served requests awaiting feedback: this process's own at once, every process's in Redis
        # (a key per request id with its TTL, written by the background task).
        self._served = ServedRequests()
        self._served_out: dict[str, tuple[bytes, int]] = {}  # not yet written
        self._base = MemoryState()  # the server's records as of the last full refresh
        self._base_applied: dict[str, int] = {}
        self._queue: list = []  # (op, rules) not yet in a batch
        self._batches: deque[_Batch] = deque()  # batched, not known applied
        # Applied batches, kept a while (see _install) in case Redis comes back without them.
        self._confirmed: deque[tuple[_Batch, float]] = deque()
        self._retained = 0  # ops in the queue and in the unapplied batches: the queue depth
        self._seq = 0
        self._epoch: Optional[str] = None
        self._version = ""
        self._offset = 0.0
        self._fresh_until = 0.0
        self._client = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._io: Optional[asyncio.Lock] = None
        self._wake: Optional[asyncio.Event] = None
        self._flusher: Optional[asyncio.Task] = None
        self._refreshing: Optional[asyncio.Future] = None  # the refresh decisions are waiting for
        self._closing = False
        self._down = False
        self._down_since = 0.0
        self._retry_at = 0.0
        self._backoff = 0.1
        self._overflowing = False
        self._rules_docs: dict[int, tuple[Optional[LearningRules], dict]] = {}
        self.counters = {"batches": 0, "outcomes_written": 0, "duplicates_skipped": 0, "queue_full": 0,
                         "outages": 0, "reseeded": 0, "refreshes": 0, "folds": 0, "columns_read": 0}
        # The contextual models the engine decides with (contextual_io reads ``store.contextual``):
        # this process's copy of the shared ones, with what it learned since its last fold apart.
        self.contextual = ContextualModels()
        self.contextual.track()
        self._ctx_seq = 0
        self._ctx_unacked: Optional[_Fold] = None  # sent (or to send), not acknowledged
        self._ctx_acked: deque[_Fold] = deque()  # acknowledged, kept a while (a lost column)
        self._ctx_known: dict[str, str] = {}  # deployment -> version of the shared column this copy holds
        self._ctx_view: dict[str, dict[str, int]] = {}  # deployment -> the folds (process -> seq) that copy holds
        self._ctx_resend: dict[str, list[tuple[int, ColumnDelta]]] = {}  # acknowledged folds a column lost
        self._ctx_next_at = 0.0
        self._ctx_io: Optional[asyncio.Lock] = None
        # The deployments' recent calls by key (the peers' check), shared: this process's calls not
        # yet in Redis, those being written, and every process's as of the last exchange.
        self._peers_out: list = []  # (deployment, key, success, time, member)
        self._peers_sending: list = []
        self._peers_view: dict[str, dict[str, tuple[int, int]]] = {}  # deployment -> key -> (calls, successes)
        self._peers_forget: set[str] = set()
        self._peers_rule: Optional[OutlierRule] = None
        self._peers_seq = 0
        self._sources = {name: scripts.source(name) for name in scripts.NAMES}
        self._shas = {name: hashlib.sha1(src.encode()).hexdigest() for name, src in self._sources.items()}

    def use_url(self, url: str, source: str, cluster: bool = False) -> None:
        """Connect to `url` (``source`` says where it came from, in errors) when started; with
        `cluster`, `url` names a node of a Redis Cluster (LiteLLM's ``startup_nodes``)."""
        self.cluster = self.cluster or cluster
        self.url = check_url(url, source)
        self.shown_url = redact(url)
        self.url_source = source

    def missing_url(self, also: str = "") -> StoreConfigError:
        return StoreConfigError(f"state.backend is redis but the environment variable {self.cfg.redis_url_env} "
                                f"(state.redis_url_env) is not set{also}")

    # -- keys ----------------------------------------------------------------------------------
    def keys(self, deployment_id: str, domain: Optional[str] = None) -> dict[str, str]:
        """The keys of one deployment's records (docs/state.md#keys)."""
        t = self.tag
        arm = f"{t}bandit:{deployment_id}" + (f":{domain}" if domain else "")
        return {"bandit": arm, "cb": f"{t}cb:{deployment_id}"}

    def key(self, name: str) -> str:
        """A store-wide key: tick, lkgp, deployments, domains, applied, version, epoch."""
        return f"{self.tag}{name}"

    def served_key(self, request_id: str) -> str:
        return f"{self.tag}served:{request_id}"

    # -- the synchronous contract: answered by the mirror --------------------------------------
    def read_pool(self, deployment_ids, domain: Optional[str] = None, alias: Optional[str] = None):
        return self._mirror.read_pool(deployment_ids, domain, alias)

    def breaker(self, deployment_id: str) -> BreakerState:
        return self._mirror.breaker(deployment_id)

    def arm(self, deployment_id: str, domain: Optional[str] = None) -> Optional[ArmStats]:
        return self._mirror.arm(deployment_id, domain)

    def last_known_good(self, alias: str) -> Optional[str]:
        return self._mirror.last_known_good(alias)

    def pace(self, alias: str) -> Optional[PaceState]:
        return self._mirror.pace(alias)

    def pacing(self) -> dict:
        return self._mirror.pacing()

    def tick(self) -> float:
        return self._mirror.ticks

    def dump(self) -> dict:
        out = self._mirror.dump()
        if len(self.contextual):
            out["contextual"] = self.contextual.dump()
        return out

    def quality_of(self, deployment_id: str, domain: Optional[str] = None) -> Optional[QualityStats]:
        return self._mirror.quality_of(deployment_id, domain)

    def stats(self, gamma: Optional[float] = None) -> dict:
        mirror = self._mirror
        mirror.quality_prior = self.quality_prior
        return mirror.stats(gamma)

    def record_quality(self, rec: QualityRecord, rules: LearningRules) -> None:
        """Apply quality evidence to the mirror at once and queue it for Redis (ordered with the
        outcomes recorded before it)."""
        if rec.domain == "":
            rec = replace(rec, domain=None)
        with self._lock:
            self._mirror.record_quality(rec, rules)
            self._enqueue(rec, rules)

    def record_outcome(self, rec: OutcomeRecord, rules: LearningRules) -> float:
        if rec.domain == "":  # the script reads '' as "no domain"
            rec = replace(rec, domain=None)
        with self._lock:
            tick = self._mirror.record_outcome(rec, rules)
            self._enqueue(rec, rules)
        return tick

    def reserve_probe(self, deployment_id: str, now: float, breaker: CircuitBreaker) -> bool:
        """This process's reservation only (the engine's ``reserve=True``); the proxy reserves
        across processes with :meth:`reserve_probe_shared`."""
        with self._lock:
            return self._mirror.reserve_probe(deployment_id, now, breaker)

    def reset(self, deployment_id: str) -> None:
        """Forget a deployment here at once and in Redis with the next batch (ordered with the
        outcomes recorded before it)."""
        with self._lock:
            self._mirror.reset(deployment_id)
            self._enqueue((_RESET, deployment_id), None, always=True)  # an operator's: never dropped

    def _enqueue(self, op, rules, always: bool = False) -> None:
        """Queue an op for Redis (the caller holds the lock and has applied it to the mirror)."""
        if self._retained >= self.cfg.queue_max and not always:
            self.counters["queue_full"] += 1
            self._event("queue_full")
            if not self._overflowing:
                self._overflowing = True
                log.warning("state store queue full (%d outcomes waiting for Redis at %s): further outcomes stay in "
                            "this process's local state only until the queue drains", self._retained, self.shown_url)
            return
        self._queue.append((op, rules))
        self._retained += 1
        if len(self._queue) >= self.cfg.batch_max and self._wake is not None and not self._wake.is_set():
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop is closed (shutdown)
                pass

    # -- served requests awaiting feedback --------------------------------------------------------
    def note_served(self, request_id: str, record: dict, ttl_s: float) -> None:
        """Keep the record here at once and write it to Redis off the request path (woken now,
        so that feedback sent to another process right after the answer finds it)."""
        ttl = max(1, int(ttl_s))
        self._served.put(request_id, record, ttl)
        with self._lock:
            self._served_out[request_id] = (json.dumps(record).encode(), ttl)
            while len(self._served_out) > self._served.limit:  # an outage: the oldest go
                del self._served_out[next(iter(self._served_out))]
        if self._wake is not None and not self._wake.is_set():
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop is closed (shutdown)
                pass

    async def _write_served(self) -> None:
        if not self._served_out or self._client is None or self._down:
            return
        with self._lock:
            out, self._served_out = self._served_out, {}
        try:
            pipe = self._client.pipeline(transaction=False)
            for rid, (value, ttl) in out.items():
                pipe.set(self.served_key(rid), value, ex=ttl)
            await pipe.execute()
        except Exception as exc:
            with self._lock:
                self._served_out = {**out, **self._served_out}
            self._outage(exc)

    async def take_served(self, request_id: str, key: Optional[str] = None) -> Optional[dict]:
        """The served request's record, taken once across every process (the DEL that removes
        the key decides); None when unknown, expired, already taken, or made with another key
        than `key` (None: any). A miss is asked again for up to two flush periods: another
        process may have answered the request a moment ago and not written it yet."""
        if request_id in self._served_out:  # ours, not yet in Redis: nobody else can take it
            record = self._served.take(request_id, key)
            if record is not None:
                self._served_out.pop(request_id, None)
            return record
        if self._client is None or self._down:
            return self._served.take(request_id, key)
        k = self.served_key(request_id)
        try:
            for attempt in range(3):
                raw = await self._client.get(k)
                if raw is not None:
                    break
                if attempt < 2:
                    await asyncio.sleep(self.cfg.flush_ms / 1000.0)
            else:
                self._served.drop(request_id)  # (taken by another process meanwhile)
                return None
            try:
                record = json.loads(raw)
            except ValueError:
                return None
            if not isinstance(record, dict) or (key is not None and record.get("key") != key):
                return None
            if await self._client.delete(k) != 1:
                return None  # another process took it first
        except Exception as exc:
            self._outage(exc)
            return self._served.take(request_id, key)
        self._served.drop(request_id)
        return record

    # -- shared counters (revoked sessions, refused requests per key) ---------------------------
    def count_key(self, name: str) -> str:
        return f"{self.tag}count:{name}"

    async def count_up(self, name: str, ttl_s: float) -> Optional[int]:
        """One more of the counter `name` for every process (its key lives `ttl_s` from its first
        count: ``lua/count.lua``); the count now, or None while Redis cannot be reached (nothing
        is kept to write later: the caller says so)."""
        if self._client is None or (self._down and time.monotonic() < self._retry_at):
            return None
        try:
            count = await self._eval("count", [self.count_key(name)], [scripts.count_doc(ttl=max(1, math.ceil(ttl_s)))])
        except Exception as exc:
            self._outage(exc)
            return None
        self._recovered()
        return int(count)

    async def counted(self, name: str) -> Optional[int]:
        """The counter `name` as every process counted it (0: never, or expired); None while
        Redis cannot be reached."""
        if self._client is None or (self._down and time.monotonic() < self._retry_at):
            return None
        try:
            raw = await self._client.get(self.count_key(name))
        except Exception as exc:
            self._outage(exc)
            return None
        self._recovered()
        try:
            return int(raw) if raw is not None else 0
        except ValueError:  # not a counter of ours: counted, so a revocation is never lost to it
            return 1

    # -- shared lists (a conversation's answered turns) --------------------------------------------
    def list_key(self, name: str) -> str:
        return f"{self.tag}list:{name}"

    async def add_to_list(self, name: str, item: dict, ttl_s: float, keep: int, owner: str = "") -> Optional[bool]:
        """Append `item` for every process: RPUSH, LTRIM to the `keep` newest and EXPIRE, in one
        MULTI (the list never lives without its TTL); None while Redis cannot be reached
        (nothing is kept to write later: a turn not stored is a turn not judged). `owner` is
        not needed: Redis holds every list until it expires (its memory is the operator's
        maxmemory)."""
        if self._client is None or (self._down and time.monotonic() < self._retry_at):
            return None
        k = self.list_key(name)
        try:
            pipe = self._client.pipeline(transaction=True)
            pipe.rpush(k, json.dumps(item, separators=(",", ":")))
            pipe.ltrim(k, -max(1, int(keep)), -1)
            pipe.expire(k, max(1, math.ceil(ttl_s)))
            await pipe.execute()
        except Exception as exc:
            self._outage(exc)
            return None
        self._recovered()
        return True

    async def list_of(self, name: str) -> Optional[list]:
        """The list `name` as every process wrote it, oldest first (an item that is not JSON is
        skipped); None while Redis cannot be reached."""
        if self._client is None or (self._down and time.monotonic() < self._retry_at):
            return None
        try:
            raw = await self._client.lrange(self.list_key(name), 0, -1)
        except Exception as exc:
            self._outage(exc)
            return None
        self._recovered()
        out = []
        for value in raw or ():
            try:
                out.append(json.loads(value))
            except (ValueError, TypeError):
                continue
        return out

    # -- the deployments' recent calls by key (the peers' check: blame.outlier_verdict) ------------
    def peers_key(self, deployment_id: str) -> str:
        return f"{self.tag}peers:{deployment_id}"

    def note_peer_call(self, deployment_id: str, key: Optional[str], success: bool, now: float,
                       rule: OutlierRule) -> None:
        """One call of `key` to the deployment at `now` (the store's clock): counted here at once,
        written to Redis with the next exchange (``lua/peers.lua``), where every process reads it.
        While Redis cannot be reached, this process's own calls are what it weighs (bounded)."""
        with self._lock:
            self._peers_rule = rule
            self._peers_seq += 1
            caller = key or ""
            self._peers_out.append((deployment_id, caller, bool(success), now,
                                    f"{self.process}:{self._peers_seq}|{caller}|{int(bool(success))}"))
            if len(self._peers_out) > 4 * max(1, rule.max_calls) * max(1, len(self._peers_view) or 1):
                del self._peers_out[: len(self._peers_out) // 2]  # an outage: the oldest go

    def peer_calls(self, deployment_id: str, key: Optional[str], now: float, rule: OutlierRule) -> PeerCalls:
        """The other keys' calls to the deployment in the window before `now`: every process's as
        of the last exchange, and this process's since."""
        mine = key or ""
        calls = successes = 0
        with self._lock:
            for caller, (n, ok) in self._peers_view.get(deployment_id, {}).items():
                if caller != mine:
                    calls, successes = calls + n, successes + ok
            since = now - rule.window_s
            for dep, caller, ok, t, _ in (*self._peers_sending, *self._peers_out):
                if dep == deployment_id and caller != mine and t >= since:
                    calls, successes = calls + 1, successes + ok
        return PeerCalls(calls, successes)

    def forget_peer_calls(self, deployment_id: str) -> None:
        """An operator reset the deployment: its recent calls go, here and (next exchange) in Redis."""
        with self._lock:
            self._peers_out = [e for e in self._peers_out if e[0] != deployment_id]
            self._peers_view.pop(deployment_id, None)
            self._peers_forget.add(deployment_id)

    async def exchange_peers(self) -> bool:
        """Write this process's recent calls and read every process's, for each deployment either
        knows, in one script (``lua/peers.lua``); False while Redis cannot be reached (the calls
        are kept to write later)."""
        rule = self._peers_rule
        if rule is None or self._client is None or self._down:
            return False
        with self._lock:
            out, self._peers_out = self._peers_out, []
            self._peers_sending = out
            forget, self._peers_forget = self._peers_forget, set()
            deps = sorted({*self._peers_view, *(e[0] for e in out)} - forget)
        rows: list = []
        index_key, named = self.peers_key("").rstrip(":"), len(self.peers_key(""))
        try:
            if forget:
                await self._client.delete(*[self.peers_key(d) for d in forget])
                await self._client.srem(index_key, *[self.peers_key(d) for d in forget])
            listed = await self._client.smembers(index_key)  # the deployments other processes noted
            deps = sorted({*deps, *((k.decode() if isinstance(k, bytes) else k)[named:] for k in listed)} - forget)
            if deps:
                index = {d: i + 2 for i, d in enumerate(deps)}
                calls = [scripts.peer_call(key_index=index[dep], member=member, score=t)
                         for dep, _, _, t, member in out if dep in index]
                doc = scripts.peers_doc(now=self.clock(), window=float(rule.window_s), max_calls=max(1, rule.max_calls),
                                        ttl=max(1, math.ceil(rule.window_s)) + 1, calls=calls)
                rows = await self._eval("peers", [index_key, *(self.peers_key(d) for d in deps)], [doc])
            view = {dep: _peer_entries(entries) for dep, entries in zip(deps, rows or ())}
        except Exception as exc:  # (a ReplyError too: the calls are kept for the next exchange)
            with self._lock:
                self._peers_out = out + self._peers_out
                self._peers_sending = []
            self._outage(exc)
            return False
        with self._lock:
            self._peers_view = view
            self._peers_sending = []
        return True

    def clock(self) -> float:
        """The server's time, as this process best knows it (local clock + measured offset)."""
        return time.time() + self._offset

    def queue_depth(self) -> int:
        """Outcomes recorded here and not yet known to be applied in Redis."""
        return self._retained

    @property
    def connected(self) -> bool:
        return self._client is not None and not self._down

    def _event(self, name: str, n: int = 1) -> None:
        if self.on_event is not None:
            try:
                self.on_event(name, n)
            except Exception:  # a metrics sink must never break the store
                pass

    # -- lifecycle -----------------------------------------------------------------------------
    def _make_client(self):
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        io = self.cfg.io_timeout_ms / 1000.0
        # One immediate retry: a pooled connection that died with a restarted server fails once
        # even though the server is back. Re-sending is safe: record is idempotent, refresh and seed
        # change nothing twice; a reservation whose reply was lost holds its slot until its lease ends.
        kwargs = dict(socket_timeout=io, socket_connect_timeout=io, retry=Retry(NoBackoff(), 1),
                      health_check_interval=0, decode_responses=False)
        if self.cluster:
            from redis.asyncio.cluster import RedisCluster

            return RedisCluster.from_url(self.url, cluster_error_retry_attempts=1, **kwargs)
        from redis.asyncio import Redis

        return Redis.from_url(self.url, **kwargs)

    async def start(self) -> None:
        """Connect and read the shared state (at most ``state.io_timeout_ms``). Never raises for
        an unreachable Redis: that is an outage, routing starts on local state."""
        if self.url is None:
            raise self.missing_url()
        self._loop = asyncio.get_running_loop()
        self._io = asyncio.Lock()
        self._ctx_io = asyncio.Lock()
        self._wake = asyncio.Event()
        self._closing = False
        try:
            self._client = self._make_client()
        except Exception as exc:  # redis-py refused the URL after our check: still a start-up error
            raise StoreConfigError(f"{self.url_source}: {redact_text(str(exc), self.url)}") from None
        try:
            await asyncio.wait_for(self._refresh(force=True), self.cfg.io_timeout_ms / 1000.0)
        except Exception as exc:
            self._outage(exc)
        if not self._down:  # the shared contextual models, before the first decision
            await self.fold()
        self._flusher = asyncio.create_task(self._flush_loop(), name="aisia-state-flush")

    async def aclose(self) -> None:
        """Write every queued outcome (while Redis answers), then disconnect."""
        self._closing = True
        if self._flusher is not None:
            self._wake.set()
            try:
                await self._flusher
            except asyncio.CancelledError:
                pass
            self._flusher = None
        if self._client is not None:
            if self._down and time.monotonic() < self._retry_at:
                self._retry_at = 0.0  # one last attempt, now
            await self.flush()
            if self._retained:
                log.warning("state store closing with %d outcomes not written to Redis at %s (unreachable)",
                            self._retained, self.shown_url)
            try:
                await self._client.aclose()
            except Exception:
                pass
            self._client = None

    # -- request path ---------------------------------------------------------------------------
    async def prepare(self, deployment_ids=(), alias: Optional[str] = None) -> None:
        """Refresh the local copy when older than ``state.cache_ttl_ms``, waiting at most
        ``state.timeout_ms``. Never raises. Concurrent decisions share one refresh."""
        now = time.monotonic()
        if now < self._fresh_until or self._client is None or (self._down and now < self._retry_at):
            return
        wait = self.cfg.timeout_ms / 1000.0
        pending = self._refreshing
        if pending is not None and not pending.done():
            try:
                await asyncio.wait_for(asyncio.shield(pending), wait)
            except asyncio.TimeoutError:
                pass
            return
        # The refresh runs in this coroutine (no task to schedule: the cold path is one round
        # trip and little else). Past the wait it is abandoned, which is harmless: it changes
        # nothing before its reply, and the background task refreshes the copy as well.
        done = self._refreshing = self._loop.create_future()
        try:
            if _timeout is not None:
                async with _timeout(wait):
                    await self._refresh()
            else:
                await asyncio.wait_for(self._refresh(), wait)
        except asyncio.TimeoutError:
            pass
        except Exception as exc:
            self._outage(exc)
        finally:
            done.set_result(None)

    async def refresh(self, force: bool = True) -> bool:
        """Read the shared state now (tests, the CLI), and with `force` the contextual models too
        (a fold); False when Redis is unreachable."""
        if not await self._read(force):
            return False
        return await self.fold() if force else True

    async def _read(self, force: bool) -> bool:
        try:
            await self._refresh(force=force)
            return True
        except Exception as exc:
            self._outage(exc)
            return False

    async def reserve_probe_shared(self, deployment_id: str, now: float, breaker: CircuitBreaker) -> bool:
        """Take a half-open probe slot atomically across every process (``lua/reserve.lua``).
        During an outage, this process's own reservation. Past ``state.timeout_ms`` without an
        answer, False: the request goes to another deployment rather than risk a probe more
        than ``half_open_max_calls`` (the reservation may still land; its lease frees it)."""
        if self._client is None or (self._down and time.monotonic() < self._retry_at):
            return self.reserve_probe(deployment_id, now, breaker)
        task = asyncio.ensure_future(self._reserve(deployment_id, now, breaker))
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.cfg.timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            return False
        except Exception as exc:
            self._outage(exc)
            return self.reserve_probe(deployment_id, now, breaker)

    async def _reserve(self, deployment_id, now, breaker) -> bool:
        keys = self.keys(deployment_id)
        raw = await self._eval("reserve", [keys["cb"]], [scripts.reserve_doc(
            tag=self.tag, deployment=deployment_id, now=float(now), timeout=float(breaker.timeout_s),
            max_calls=breaker.half_open_max_calls, lease=float(breaker.probe_lease_s),
            breaker_ttl=self.cfg.breaker_ttl_s)])
        reply = scripts.read_reply(scripts.ReserveReply, raw, "reserve")
        self._recovered()
        state = read_breaker(pairs(reply.breaker))
        with self._lock:
            self._mirror.put_breaker(deployment_id, state)
        return bool(int(reply.granted))

    # -- Redis calls ------------------------------------------------------------------------------
    async def _eval(self, name: str, keys: list, args: list):
        from redis.exceptions import NoScriptError

        client = self._client
        try:
            return await client.evalsha(self._shas[name], len(keys), *keys, *args)
        except NoScriptError:  # a new server, SCRIPT FLUSH, a failover: load it and go on
            await client.script_load(self._sources[name])
            return await client.evalsha(self._shas[name], len(keys), *keys, *args)

    def _outage(self, exc: BaseException) -> None:
        now = time.monotonic()
        if not self._down:
            self._down, self._down_since, self._backoff = True, now, 0.1
            self.counters["outages"] += 1
            self._event("fallback")
            log.warning("Redis state store %s unreachable (%s: %s): routing continues on local state; outcomes are "
                        "kept and merged when it returns", self.shown_url, type(exc).__name__,
                        redact_text(str(exc), self.url))
        else:
            self._backoff = min(self._backoff * 2.0, self.cfg.reconnect_max_ms / 1000.0)
        self._retry_at = now + self._backoff

    def _recovered(self) -> None:
        if self._down:
            self._down = False
            self._event("reconnect")
            log.warning("Redis state store %s reachable again after %.1f s; writing %d queued outcomes",
                        self.shown_url, time.monotonic() - self._down_since, self._retained)
            if self._retained:
                self._event("outcomes_merged", self._retained)

    async def _refresh(self, force: bool = False) -> None:
        async with self._io:
            for _ in range(3):  # a re-seed is followed by a full read
                if not await self._refresh_once(force):
                    return
                force = True

    async def _refresh_once(self, force: bool) -> bool:
        """One read; True when the store had to be re-seeded (read again)."""
        sent_mono, sent = time.monotonic(), time.time()
        raw = await self._eval("refresh", [self.key("tick")],
                               [scripts.refresh_doc(tag=self.tag, known_version="" if force else self._version)])
        reply = scripts.read_reply(scripts.RefreshReply, raw, "refresh")
        received = time.time()
        self._recovered()
        self.counters["refreshes"] += 1
        self._offset = int(reply.seconds) + int(reply.microseconds) / 1e6 - (sent + received) / 2.0
        self._fresh_until = sent_mono + self.cfg.cache_ttl_ms / 1000.0
        version, epoch = reply.version.decode(), reply.epoch.decode()
        if not epoch:
            await self._seed()
            return True
        if not reply.changed:  # nothing written since our version: read again only for another epoch
            return epoch != self._epoch
        self._epoch, self._version = epoch, version
        base = MemoryState()
        tick = number(reply.tick, 0.0, 1e15)
        base.ticks = tick if tick is not None else 0.0
        applied = {k: int(number(v, 0, 1e18) or 0) for k, v in pairs(reply.applied).items()}
        base.lkgp = {str(k): v.decode("utf-8", "replace") for k, v in pairs(reply.lkgp).items()}
        for raw in reply.deployments:
            row = scripts.read_reply(scripts.RefreshRow, raw, "refresh")
            dep = row.deployment.decode("utf-8", "replace")
            if row.arm:
                fields = pairs(row.arm)
                _install_quality(base, dep, None, fields)
                if _holds_arm(fields):
                    base.put_arm(dep, None, read_arm(fields))
            if row.breaker:
                base.breakers[dep] = read_breaker(pairs(row.breaker))
            for dom, h in pairs(row.domains).items():
                fields = pairs(h)
                _install_quality(base, dep, dom, fields)
                if _holds_arm(fields):
                    base.put_arm(dep, dom, read_arm(fields))
        for raw in reply.paces or ():
            paced = scripts.read_reply(scripts.PaceRow, raw, "refresh")
            if paced.pace:
                base.paces[paced.alias.decode("utf-8", "replace")] = read_pace(pairs(paced.pace))
        self._install(base, applied)
        return False

    def _install(self, base: MemoryState, applied: dict[str, int]) -> None:
        """The new server view, plus what of this process the server has not applied."""
        done = applied.get(self.process, 0)
        now = time.monotonic()
        # Written batches stay known for a few refresh periods after the server showed them: if
        # Redis restarts empty, the replica that re-seeds it does so from its last view, which is
        # at most one period old, and every replica then re-sends what that view lacks (the
        # sequence numbers skip the rest). Not pruned during an outage (no refresh happens).
        keep_s = 3.0 * (self.cfg.cache_ttl_ms + self.cfg.flush_ms) / 1000.0 + 1.0
        with self._lock:
            resend = [b for b, _ in self._confirmed if b.seq > done]  # the server lost them
            self._retained += sum(len(b.ops) for b in resend)
            self._retained -= sum(len(b.ops) for b in self._batches if b.seq <= done)  # applied, reply lost
            kept = sorted(resend + [b for b in self._batches if b.seq > done], key=lambda b: b.seq)
            self._confirmed = deque((b, at) for b, at in self._confirmed if b.seq <= done and now - at < keep_s)
            self._batches = deque(kept)
            self._base, self._base_applied = base, applied
            if self._retained > self.cfg.batch_max:
                # A backlog (after an outage): re-applying it would hold the event loop; the local
                # copy already holds it, and is rebuilt by a refresh once the backlog is written.
                return
            mirror = base.copy()
            for b in kept:
                for op in b.ops:
                    _apply(mirror, op, b.rules)
            for op, rules in self._queue:
                _apply(mirror, op, rules)
            self._mirror = mirror

    async def _seed(self) -> None:
        """Write the last shared view into a Redis that has none (another replica may win)."""
        base, rec = self._base, scripts.seeded_record
        arms = [rec(deployment=dep, domain=dom or "",
                    fields={f: repr(float(getattr(s, f))) if f != "count" else str(s.count) for f in ARM_FIELDS})
                for dom, by_dep in base.arms.items() for dep, s in by_dep.items()]
        breakers = [rec(deployment=dep, fields={f: b.state if f == "state" else repr(getattr(b, f))
                                                for f in BREAKER_FIELDS})
                    for dep, b in base.breakers.items()]
        paces = [rec(alias=alias, fields={f: repr(float(getattr(p, f))) for f in PACE_FIELDS})
                 for alias, p in base.paces.items()]
        quality = [rec(deployment=dep, domain=dom or "", fields={f: repr(float(getattr(q, f))) for f in QUALITY_FIELDS})
                   for dom, by_dep in base.quality.items() for dep, q in by_dep.items()]
        doc = scripts.seed_doc(tag=self.tag, epoch=uuid.uuid4().hex, bandit_ttl=self.cfg.bandit_ttl_s,
                               breaker_ttl=self.cfg.breaker_ttl_s, tick=_f(base.ticks),
                               applied=[(proc, str(seq)) for proc, seq in self._base_applied.items()],
                               lkgp=base.lkgp, arms=arms, breakers=breakers, paces=paces, quality=quality)
        reply = scripts.read_reply(scripts.SeedReply, await self._eval("seed", [self.key("epoch")], [doc]), "seed")
        if reply.status == b"seeded" and self._epoch is not None:
            self.counters["reseeded"] += 1
            self._event("reseeded")
            log.warning("Redis state store %s came back empty: re-seeded from this process's state", self.shown_url)

    # -- writing outcomes ------------------------------------------------------------------------
    async def _flush_loop(self) -> None:
        period = self.cfg.flush_ms / 1000.0
        while not self._closing:
            try:
                await asyncio.wait_for(self._wake.wait(), period)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if self._closing:
                break
            try:
                await self._write_served()
                await self.exchange_peers()
                await self._write()
                # Kept warm here too, so that a busy process's decisions rarely wait.
                if not self._down and time.monotonic() >= self._fresh_until:
                    await self._read(False)
                # The contextual models every contextual_fold_ms (a fold an outage held: at once).
                if not self._down and (time.monotonic() >= self._ctx_next_at or self._ctx_unacked is not None):
                    await self.fold()
            except Exception:  # a bug here must not stop the writing for good
                log.exception("state store: writing to Redis failed; retrying")
                await asyncio.sleep(period)

    async def flush(self) -> bool:
        """Write every queued outcome and fold the contextual models now; True when nothing is
        left. Never raises."""
        await self._write_served()
        await self.exchange_peers()
        ok = await self._write()
        return await self.fold() and ok

    async def _write(self) -> bool:
        """Write every queued outcome now; True when nothing is left. Never raises."""
        if self._client is None:
            return not self._retained
        if self._down:
            if time.monotonic() < self._retry_at:
                return False
            if not await self._read(True):  # reconnect (and re-seed) before writing
                return False
        epoch_retries = 0
        while True:
            batch = self._next_batch()
            if batch is None:
                return True
            try:
                async with self._io:
                    if not self._batches or self._batches[0] is not batch:
                        continue  # a refresh re-based the batches meanwhile
                    status = await self._send(batch)
            except Exception as exc:
                self._outage(exc)
                return False
            if status == "epoch":  # Redis lost its state: re-seed (or adopt another's), then re-send
                epoch_retries += 1
                if epoch_retries > 3 or not await self._read(True):
                    return False

    def _next_batch(self) -> Optional[_Batch]:
        with self._lock:
            if self._batches:
                return self._batches[0]
            if not self._queue:
                return None
            rules = self._queue[0][1]
            n, cap = 0, self.cfg.batch_max
            for op, r in self._queue:
                # A batch has one set of rules (a reload starts a new batch); a reset joins any.
                if n >= cap or (r is not None and rules is not None and r is not rules):
                    break
                if rules is None:
                    rules = r
                n += 1
            ops = self._queue[:n]
            del self._queue[:n]
            self._seq += 1
            batch = _Batch(self._seq, [op for op, _ in ops], rules)
            self._batches.append(batch)
            return batch

    def _rules_doc(self, rules: Optional[LearningRules]) -> dict:
        """The batch's rules as record.lua reads them (scripts.record_rules), built once per rules."""
        hit = self._rules_docs.get(id(rules))
        if hit is not None and hit[0] is rules:
            return hit[1]
        doc = scripts.record_rules(rules)
        if len(self._rules_docs) > 64:
            self._rules_docs.clear()
        self._rules_docs[id(rules)] = (rules, doc)
        return doc

    async def _send(self, batch: _Batch) -> str:
        ops = []
        add = ops.append
        for op in batch.ops:
            if isinstance(op, OutcomeRecord):
                kind = op.kind
                add(scripts.outcome_op(
                    deployment=op.deployment_id, now=_opt(op.now) or 0.0,
                    kind="" if kind is None else FailureKind(kind).value, reward=clamp01(op.reward),
                    latency=_opt(op.latency_s), alias=op.alias or None, domain=op.domain,
                    retry_after=_opt(op.retry_after_s), pace_alias=op.pace_alias, cost=_opt(op.cost_usd)))
            elif isinstance(op, QualityRecord):
                add(scripts.quality_op(deployment=op.deployment_id, value=clamp01(op.value),
                                       weight=_opt(op.weight) or 0.0, source=op.source, domain=op.domain))
            else:
                add(scripts.reset_op(deployment=op[1]))
        doc = scripts.record_doc(tag=self.tag, epoch=self._epoch or "", process=self.process, seq=batch.seq,
                                 bandit_ttl=self.cfg.bandit_ttl_s, breaker_ttl=self.cfg.breaker_ttl_s,
                                 rules=self._rules_doc(batch.rules), ops=ops)
        raw = await self._eval("record", [self.key("tick")], [doc])
        reply = scripts.read_reply(scripts.RecordReply, raw, "record")
        self._recovered()
        status = reply.status.decode()
        if status in ("ok", "dup"):
            with self._lock:
                if self._batches and self._batches[0] is batch:
                    self._batches.popleft()
                    self._retained -= len(batch.ops)
                    self._confirmed.append((batch, time.monotonic()))
            self.counters["batches"] += 1
            if status == "ok":
                self.counters["outcomes_written"] += len(batch.ops)
            else:
                self.counters["duplicates_skipped"] += len(batch.ops)
            self._event("batch_flushed")
            self._overflowing = False
        return status

    # -- the contextual models ---------------------------------------------------------------------
    async def fold(self) -> bool:
        """Fold what this process's contextual models learned since the last fold into the shared
        models, and read back what the other processes folded (lua/contextual.lua: one EVALSHA,
        or a few for a large fold, ``_FOLD_RECORDS`` slots each; with no contextual model
        anywhere, an empty answer). Never raises; False when Redis is unreachable: what was
        learned stays here, and the same fold (its sequence number unchanged) is sent by the next
        attempt (a column that applied it already skips it)."""
        if self._client is None or self._ctx_io is None:
            return self._ctx_unacked is None
        if self._down and time.monotonic() < self._retry_at:
            return False
        models = self.contextual
        async with self._ctx_io:
            self._ctx_next_at = time.monotonic() + self.cfg.contextual_fold_ms / 1000.0
            for dep in list(models.reseeded):  # a prior model restarted it: send that as its view
                models.reseeded.discard(dep)
                self._ctx_known[dep] = ""
            if self._ctx_unacked is None:
                deltas = models.take_pending()
                if deltas:
                    self._ctx_seq += 1
                    self._ctx_unacked = _Fold(self._ctx_seq, deltas)
            gamma = models.gamma
            for _ in range(3):  # 'absent': send those columns again with this process's view of them
                again = False
                for args in self._fold_calls(gamma):
                    try:
                        raw = await self._eval("contextual", [self.key("ctxdeps")], args)
                        reply = scripts.read_reply(scripts.FoldReply, raw, "contextual")
                        rows = [scripts.read_reply(scripts.FoldRow, r, "contextual") for r in reply.rows or ()]
                    except Exception as exc:  # (a ReplyError too, its rows' included: logged, never raised)
                        self._outage(exc)
                        return False
                    self._recovered()
                    if reply.status == b"absent":
                        for dep in reply.absent:
                            self._ctx_known[dep.decode("utf-8", "replace")] = ""
                        again = True
                        break
                    self._fold_rows(rows, gamma)
                if not again:
                    self._fold_acked()
                    return True
            return False

    def _fold_calls(self, gamma: float) -> list[list]:
        """The script calls of one fold: the columns with records, in calls of at most
        _FOLD_RECORDS records (a column's in one), then one call with the rest, which also asks
        for every column Redis holds that this process has not."""
        models = self.contextual
        fold = self._ctx_unacked
        mine = {d.dep: d for d in fold.deltas} if fold is not None else {}
        heavy, light = [], []
        for dep in list(models.ids):
            known = self._ctx_known.get(dep, "")
            folds = sorted(self._ctx_resend.get(dep, ()), key=lambda sd: sd[0])
            if dep in mine:
                folds.append((fold.seq, mine[dep]))
            base, blobs = None, []
            if known == "":
                view = models.shared_view(dep, [mine[dep]] if dep in mine else [], gamma)
                slots = np.flatnonzero((view.values[:, 0] != 0.0) | (view.values[:, 1] != 0.0))
                base = scripts.context_base(p0=view.p0, scale=view.scale, tick=view.tick, count=view.count,
                                            prior_mean=view.prior_mean, prior_count=view.prior_count,
                                            applied=self._ctx_view.get(dep, {}))
                blobs.append(_records(slots, view.values[slots]))
            for _, d in folds:
                blobs.append(_records(d.slots, d.values))
            entry = (scripts.context_column(
                deployment=dep, known=known, base=base,
                folds=[scripts.context_fold(seq=seq, tick=d.tick, scale=d.scale, count=d.count) for seq, d in folds]),
                blobs)
            n = sum(len(b) for b in blobs) // _SLOT_RECORD.itemsize
            (heavy if n else light).append((n, entry))
        groups, size = [[]], 0
        for n, entry in heavy:
            if groups[-1] and size + n > _FOLD_RECORDS:
                groups.append([])
                size = 0
            groups[-1].append(entry)
            size += n
        if light or not groups[-1]:
            groups.append([e for _, e in light])
        groups = [g for g in groups[:-1] if g] + groups[-1:]
        others = [e[0]["deployment"] for g in groups[:-1] for e in g]
        calls = []
        for k, g in enumerate(groups):
            last = k == len(groups) - 1
            doc = scripts.contextual_doc(tag=self.tag, process=self.process, gamma=float(gamma),
                                         ttl=self.cfg.bandit_ttl_s, others=others if last else None,
                                         columns=[c for c, _ in g])
            calls.append([doc, *(b for _, blobs in g for b in blobs)])
        return calls

    def _fold_acked(self) -> None:
        """Every call of the fold answered: it is in Redis (kept a while: a column Redis loses)."""
        fold, now = self._ctx_unacked, time.monotonic()
        if fold is not None:
            fold.acked_at = now
            self._ctx_acked.append(fold)
            self._ctx_unacked = None
            self.counters["folds"] += 1
        keep_s = 3.0 * self.cfg.contextual_fold_ms / 1000.0 + 1.0
        while self._ctx_acked and now - self._ctx_acked[0].acked_at > keep_s:
            self._ctx_acked.popleft()

    def _fold_rows(self, rows, gamma: float) -> None:
        """One call of the fold is in Redis: install the columns its reply carries (``scripts.FoldRow``s)."""
        fold = self._ctx_unacked
        folded = {d.dep for d in fold.deltas} if fold is not None else set()
        for row in rows:
            dep, version = row.deployment.decode("utf-8", "replace"), row.version.decode()
            resent = self._ctx_resend.pop(dep, ())
            if not int(row.full):
                self._ctx_known[dep] = version
                if version and (dep in folded or resent):  # this process's folds are in that version
                    view = self._ctx_view.setdefault(dep, {})
                    view[self.process] = max([view.get(self.process, 0)] + [s for s, _ in resent]
                                             + ([fold.seq] if dep in folded else []))
                continue
            scale, tick, count, p0, prior_mean, prior_count = (number(v, 0.0, 1e300) for v in (
                row.scale, row.tick, row.count, row.p0, row.prior_mean, row.prior_count))
            applied = {k: int(number(v, 0, 1e18) or 0) for k, v in pairs(row.applied).items()}
            if not p0 or not scale:  # not a column this package wrote: start it again from a view
                self._ctx_known[dep] = ""
                continue
            col = SharedColumn(p0, scale, tick or 0.0, count or 0.0, prior_mean if prior_mean is not None else 0.5,
                               prior_count or 0.0, _weights(row.weights))
            self.contextual.adopt(dep, col, gamma)
            self.counters["columns_read"] += 1
            self._ctx_view[dep] = applied
            # Acknowledged folds of this process the column lacks (it was re-created from another
            # replica's older view): sent again by the next fold, and the column read back then.
            have = applied.get(self.process, 0)
            missing = [(f.seq, d) for f in self._ctx_acked if f.seq > have for d in f.deltas if d.dep == dep]
            if missing:
                self._ctx_resend[dep] = missing
                self._ctx_known[dep] = "?"
            else:
                self._ctx_known[dep] = version
