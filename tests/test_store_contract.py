"""The state-store contract: one suite, run unchanged against every store (the way pybreaker runs
one storage suite against each storage): the memory store, the Redis store on a real
redis-server, and the Redis store whose server is killed (SIGKILL) and restarted from its AOF in
the middle of each test.

A harness gives each test what differs between stores and nothing else: ``store`` (started),
``other()`` (a second process's view of the same state: for memory, the same store),
``sync()`` (make what was recorded visible to every view: for Redis, write the queue and read
back) and ``midpoint()`` (for the restarted variant, the server's crash and restart)."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import threading
from dataclasses import replace

import pytest

from aisia_plugin.bandit import ArmStats
from aisia_plugin.breaker import CLOSED, HALF_OPEN, OPEN, BreakerState, FailureKind
from helpers import deployment
from aisia_plugin.engine import Engine
from aisia_plugin.blame import OutlierRule, PeerCalls
from aisia_plugin.interfaces import StateStore
from aisia_plugin.learning import OutcomeRecord
from aisia_plugin.outcome import Outcome
from aisia_plugin.pacing import MAX_STEP, PaceRule, PaceState, pace, pace_key
from aisia_plugin.policy import load_policy
from aisia_plugin.quality import QualityRecord
from aisia_plugin.state import open_store
from aisia_plugin.state.memory import MemoryState
from aisia_plugin.state.redis import _apply as apply_op
from redis_server import redis_module  # noqa: F401  (a fixture)

BASE = load_policy()
_prefixes = itertools.count()


def policy_for(backend: str, prefix: str, **state):
    # A generous wait for Redis: the suite checks what the stores agree on, not how fast (a
    # decision that gives up waiting is the outage tests' subject).
    state = {"timeout_ms": 5000, **state}
    return BASE.model_copy(update={"state": BASE.state.model_copy(update={"backend": backend, "key_prefix": prefix,
                                                                           **state})})


class Harness:
    def __init__(self, kind: str, policy, server=None):
        self.kind, self.policy, self.server = kind, policy, server
        self.stores: list = []
        self.store = None

    async def open(self):
        st = open_store(self.policy)
        await st.start()
        self.stores.append(st)
        return st

    async def other(self):
        """Another process's view of the same state."""
        return self.store if self.kind == "memory" else await self.open()

    async def sync(self):
        """Every outcome recorded so far visible to every view (bounded: an outage or a
        restart in progress is waited out, not timed)."""
        if self.kind == "memory":
            return
        for _ in range(400):
            ok = all([await st.flush() for st in self.stores])
            ok = all([await st.refresh() for st in self.stores]) and ok
            if ok and all(st.queue_depth() == 0 for st in self.stores):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the stores did not synchronise: {[st.counters for st in self.stores]}")

    async def midpoint(self):
        if self.kind == "redis-restarted":
            await self.sync()
            self.server.restart()  # SIGKILL, then the same port and directory: the AOF is replayed

    async def close(self):
        for st in self.stores:
            await st.aclose()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.proxy),  # redis-server: not in the fast suite
                        pytest.param("redis-restarted", marks=pytest.mark.proxy)])
async def h(request, monkeypatch):
    kind = request.param
    prefix = f"c{next(_prefixes)}:"
    if kind == "memory":
        harness = Harness(kind, policy_for("memory", prefix))
    else:
        server = request.getfixturevalue("redis_module")
        monkeypatch.setenv("AISIA_REDIS_URL", server.url)
        harness = Harness(kind, policy_for("redis", prefix), server)
    harness.store = await harness.open()
    yield harness
    await harness.close()


def rules_of(policy):
    return Engine(policy, clock=lambda: 0.0).rules


def outcomes(seed: int, n: int, deps=("a", "b", "c"), t0: float = 1000.0):
    rng = random.Random(seed)
    kinds = [None, None, None, FailureKind.PROVIDER, FailureKind.CLIENT, FailureKind.RATE_LIMIT]
    for i in range(n):
        kind = rng.choice(kinds)
        yield OutcomeRecord(rng.choice(deps), t0 + i * rng.choice((0.5, 7.0, 61.0)), kind, rng.random(),
                            rng.choice((None, rng.uniform(0.05, 9.0))), rng.choice(("auto", "auto/coding", None)),
                            rng.choice((None, "coding", "math")), rng.choice((None, 2.0)))


def assert_same_records(got: dict, want: dict):
    assert got["ticks"] == pytest.approx(want["ticks"], abs=1e-9)
    assert got["lkgp"] == want["lkgp"]
    assert set(got["bandit"]) == set(want["bandit"]) and set(got["breakers"]) == set(want["breakers"])
    for key, rec in want["bandit"].items():
        for field, v in rec.items():
            assert got["bandit"][key][field] == pytest.approx(v, rel=1e-9, abs=1e-9), (key, field)
    for key, rec in want["breakers"].items():
        for field, v in rec.items():
            assert got["breakers"][key][field] == (pytest.approx(v, abs=1e-9) if isinstance(v, float) else v), (key, field)


async def test_it_is_a_state_store(h):
    assert isinstance(h.store, StateStore)
    await h.store.prepare()  # the shared-store side: every argument optional
    await h.store.prepare(["x"], "auto")
    tick, breakers, g, d, lkgp = h.store.read_pool(["x", "y"], "coding", "auto")
    assert (tick, breakers, g, d, lkgp) == (0.0, [None, None], [None, None], [None, None], None)


async def record_with_reference(h, recs, rules) -> MemoryState:
    """Record `recs` in the store (the midpoint half way) and in a reference memory store."""
    ref = MemoryState()
    for k, rec in enumerate(recs):
        if k == len(recs) // 2:
            await h.midpoint()
        h.store.record_outcome(rec, rules)
        ref.record_outcome(rec, rules)
    await h.sync()
    return ref


async def test_recorded_records_equal_the_pure_update_applied_in_order(h):
    ref = await record_with_reference(h, list(outcomes(1, 120)), rules_of(h.policy))
    assert_same_records(h.store.dump(), ref.dump())
    assert_same_records((await h.other()).dump(), ref.dump())


async def test_a_breaker_opened_by_one_view_is_open_for_another(h):
    rules = rules_of(h.policy)
    threshold = rules.breaker.failure_threshold
    for i in range(threshold):
        h.store.record_outcome(OutcomeRecord("a", 100.0 + i, FailureKind.PROVIDER, 0.0, 1.0), rules)
    assert h.store.breaker("a").state == OPEN
    await h.midpoint()
    await h.sync()
    other = await h.other()
    assert other.breaker("a").state == OPEN and other.breaker("a").failures == threshold
    assert other.read_pool(["a"])[1][0].state == OPEN
    # a success resolves nothing while OPEN; past the timeout it is a probe's success
    other.record_outcome(OutcomeRecord("a", 100.0 + threshold, None, 1.0, 1.0), rules)
    await h.sync()
    assert h.store.breaker("a").state == OPEN


async def test_half_open_probes_are_granted_at_most_max_calls_across_views(h):
    rules = rules_of(h.policy)
    cb = rules.breaker
    for i in range(cb.failure_threshold):
        h.store.record_outcome(OutcomeRecord("a", 10.0, FailureKind.PROVIDER, 0.0, None), rules)
    await h.sync()
    views = [h.store, await h.other(), await h.other()]
    now = 10.0 + cb.timeout_s + 1.0
    await h.midpoint()
    grants = await asyncio.gather(*(v.reserve_probe_shared("a", now, cb) for v in views for _ in range(4)))
    assert sum(grants) == cb.half_open_max_calls
    await h.sync()
    assert h.store.breaker("a").state == HALF_OPEN
    assert h.store.breaker("a").probes_in_flight == cb.half_open_max_calls
    # the probes succeed: CLOSED again, everywhere
    for _ in range(cb.half_open_max_calls):
        h.store.record_outcome(OutcomeRecord("a", now + 1.0, None, 1.0, 0.5), rules)
    await h.sync()
    assert all(v.breaker("a").state == CLOSED for v in views)


async def test_rate_limits_and_client_errors_move_no_arm_and_no_tick(h):
    rules = rules_of(h.policy)
    h.store.record_outcome(OutcomeRecord("a", 50.0, FailureKind.RATE_LIMIT, 0.0, None, "auto", None, 30.0), rules)
    h.store.record_outcome(OutcomeRecord("a", 51.0, FailureKind.CLIENT, 0.0, 0.2, "auto"), rules)
    await h.midpoint()
    await h.sync()
    other = await h.other()
    tick, (bs,), (g,), _, lkgp = other.read_pool(["a"], None, "auto")
    assert tick == 0.0 and g is None and lkgp is None
    assert bs.rate_limited_until == 80.0 and bs.rate_limits == 1 and bs.state == CLOSED


async def test_global_and_per_domain_arms_tick_and_last_known_good(h):
    rules = rules_of(h.policy)
    h.store.record_outcome(OutcomeRecord("a", 1.0, None, 0.9, 1.5, "auto/coding", "coding"), rules)
    h.store.record_outcome(OutcomeRecord("b", 2.0, FailureKind.PROVIDER, 0.0, 3.0, "auto/coding", "coding"), rules)
    await h.midpoint()
    h.store.record_outcome(OutcomeRecord("b", 3.0, None, 0.6, 2.0, "auto", None), rules)
    await h.sync()
    other = await h.other()
    tick, _, g, d, lkgp = other.read_pool(["a", "b", "c"], "coding", "auto/coding")
    assert tick == 3.0
    assert [x.count if x else None for x in g] == [1, 2, None]
    assert [x.count if x else None for x in d] == [1, 1, None]
    assert g[0].avg_latency == 1.5 and d[1].failures == 1.0
    assert lkgp == "a" and other.last_known_good("auto") == "b"
    assert other.arm("b", "math") is None and other.arm("a", "coding").tick == 1.0


async def test_reset_forgets_a_deployment_everywhere(h):
    rules = rules_of(h.policy)
    for i in range(6):
        h.store.record_outcome(OutcomeRecord("a", float(i), FailureKind.PROVIDER, 0.0, 1.0, None, "coding"), rules)
        h.store.record_outcome(OutcomeRecord("b", float(i), None, 1.0, 1.0, None, "coding"), rules)
    await h.sync()
    other = await h.other()
    assert other.breaker("a").state == OPEN
    other.reset("a")
    await h.midpoint()
    await h.sync()
    for view in (h.store, other):
        assert view.arm("a") is None and view.arm("a", "coding") is None and view.breaker("a") == BreakerState()
        assert view.arm("b").count == 6 and view.arm("b", "coding").count == 6
        assert "a" not in view.stats()


async def test_the_peers_calls_noted_by_one_view_are_weighed_by_another(h):
    """The peers' check (blame.outlier_verdict) reads the other keys' recent calls to a
    deployment as every view noted them: a replica weighs the calls the others served too."""
    rule = OutlierRule(True, 10.0, 5, 0.8, 512)
    other = await h.other()
    now = h.store.clock()
    h.store.note_peer_call("a", "key-b", True, now - 30.0, rule)  # out of the window
    for i in range(6):
        h.store.note_peer_call("a", "key-b", i != 0, now - 1.0, rule)  # tenant B's, one failed
    other.note_peer_call("a", "key-a", False, now - 0.5, rule)  # tenant A's own failure
    other.note_peer_call("b", "key-b", True, now - 0.5, rule)
    await h.sync()
    await h.sync()  # (each view has read what the other wrote)
    for view in (h.store, other):
        assert view.peer_calls("a", "key-a", now, rule) == PeerCalls(6, 5)  # B's, not A's own
        assert view.peer_calls("a", "key-b", now, rule) == PeerCalls(1, 0)
        assert view.peer_calls("a", None, now, rule) == PeerCalls(7, 5)
        assert view.peer_calls("b", "key-a", now, rule) == PeerCalls(1, 1)
        assert view.peer_calls("c", "key-a", now, rule) == PeerCalls()
    h.store.forget_peer_calls("a")  # an operator's reset
    await h.sync()
    await h.sync()
    for view in (h.store, other):
        assert view.peer_calls("a", "key-a", now, rule) == PeerCalls()
        assert view.peer_calls("b", "key-a", now, rule) == PeerCalls(1, 1)


async def test_stats_keep_the_exact_count_beside_the_discounted_pulls(h):
    rules = rules_of(h.policy)
    assert rules.gamma < 1.0  # the default policy forgets
    for i in range(300):
        h.store.record_outcome(OutcomeRecord("a", float(i), None if i % 4 else FailureKind.PROVIDER, 0.8, 0.5,
                                             "auto", "coding"), rules)
    await h.midpoint()
    await h.sync()
    row = (await h.other()).stats()["a"]
    assert set(row) >= {"pulls", "mean_reward", "alpha", "beta", "count", "avg_latency", "error_rate", "breaker",
                        "domains"}
    assert row["count"] == 300 and row["pulls"] < 300
    assert row["error_rate"] == pytest.approx(0.25, abs=0.01) and row["breaker"] == CLOSED
    assert row["domains"]["coding"]["count"] == 300


async def test_threads_recording_at_once_lose_nothing(h):
    rules = rules_of(h.policy)

    def worker(k):
        for i in range(250):
            h.store.record_outcome(OutcomeRecord("a", 1.0, None, 1.0, None, None, None), rules)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    await h.midpoint()
    await h.sync()
    arm = (await h.other()).arm("a")
    assert arm.count == 1000 and (await h.other()).read_pool(["a"])[0] == 1000.0
    assert arm.alpha - 1.0 == pytest.approx(arm.pulls, rel=1e-12)  # every one a success


async def test_the_engine_decides_and_learns_through_the_store(h):
    engine = Engine(h.policy, clock=h.store.clock, rng=random.Random(3), store=h.store)
    deps = [deployment(i, provider=i, model=f"p/{i}", model_name="g") for i in ("a", "b", "c")]
    msgs = [{"role": "user", "content": "write a python function that sorts a list"}]
    seen = []
    for k in range(30):
        if k == 15:
            await h.midpoint()
        await h.store.prepare([d.id for d in deps], "auto")
        d = engine.decide("auto", msgs, deps, reserve=False)
        seen.append(d.deployment_id)
        engine.record(d, Outcome(d.deployment_id, success=d.deployment_id != "c", latency_s=0.5,
                                 status_code=None if d.deployment_id != "c" else 503))
    await h.sync()
    other = await h.other()
    assert sum(other.arm(i).count for i in set(seen)) == 30
    assert all(other.arm(i).count == seen.count(i) for i in set(seen))
    if "c" in seen:  # every call to c failed
        assert other.arm("c").failures > 0 and other.arm("c").alpha == 1.0
    assert other.last_known_good("auto") in ("a", "b")


async def test_the_dump_is_a_memory_state(h):
    rules = rules_of(h.policy)
    for rec in outcomes(7, 40):
        h.store.record_outcome(rec, rules)
    await h.sync()
    dump = (await h.other()).dump()
    assert MemoryState.load(dump).dump() == dump
    assert all(math.isfinite(v) for rec in dump["bandit"].values() for v in rec.values())
    assert isinstance(MemoryState.load(dump).arm("a"), ArmStats)


async def test_the_contextual_models_reach_every_view_and_the_dump(h):
    """What the contextual strategy's models learn through one view (``store.contextual``, what
    an engine over the store decides with) is in every view after sync, with forgetting, and in
    the store's dump (the memory store's snapshot)."""
    from aisia_plugin.contextual import ContextualModels, LearnContext, request_vector
    from aisia_plugin.features import RequestFeatures

    rng = random.Random(12)
    ref = ContextualModels()
    words = ("sort", "a", "list", "tax", "law", "poem", "prove", "lemma")
    for i in range(40):
        if i == 20:
            await h.midpoint()
        x = request_vector(RequestFeatures(text=" ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))))
        dep, y = rng.choice("ab"), rng.random()
        for m in (h.store.contextual, ref):
            m.learn(dep, LearnContext(x, 0.5, 0.05, 0.1), y, float(i + 1), 0.99)
    await h.sync()
    other = await h.other()
    for dep in "ab":
        k, j = other.contextual.ids[dep], ref.ids[dep]
        got = other.contextual.hd[:, :, k].astype(float) * other.contextual.scale[k]
        want = ref.hd[:, :, j].astype(float) * ref.scale[j]
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert other.contextual.count[k] == ref.count[j] and other.contextual.tick[k] == ref.tick[j]
    back = MemoryState.load(other.dump()).contextual
    assert {dep: back.count[k] for dep, k in back.ids.items()} == {dep: ref.count[k] for dep, k in ref.ids.items()}


def assert_same_paces(view, want: dict) -> dict:
    """The view's pacing records (its dump's), every one equal to `want`'s; returned."""
    got = view.dump()["pacing"]
    assert set(got) == set(want)
    for key, rec in want.items():
        for field, v in rec.items():
            assert got[key][field] == pytest.approx(v, rel=1e-12, abs=1e-12), (key, field)
    return got


async def test_the_spend_pacing_records_are_the_pure_update_and_every_view_shares_them(h):
    """Each paced alias's record (pacing.pace: the multiplier, the realised spend, the count) is
    what the pure update gives over the outcomes in order, also through a restart of Redis, and
    every view reads it and adds to it (the multiplier is shared across replicas)."""
    rules = replace(rules_of(h.policy), pacing={"auto": PaceRule(2.0), "auto/coding": PaceRule(0.5, 0.5, 10.0, -5.0)})
    rng = random.Random(11)
    costs = (None, 0.0, 0.0005, 0.002, 0.004, 1.0)  # 1.0: a price shock ($1,000 per 1k requests)
    recs = [replace(rec, pace_alias=rec.alias, cost_usd=rng.choice(costs)) for rec in outcomes(11, 150)]
    ref = await record_with_reference(h, recs, rules)
    want = ref.dump()["pacing"]
    assert set(want) == {"auto", "auto/coding"}
    other = await h.other()
    for view in (h.store, other):
        got = assert_same_paces(view, want)
        assert view.pace("auto") == PaceState(**got["auto"])
    assert 0.0 <= other.pace("auto").multiplier <= 100.0 and -5.0 <= other.pace("auto/coding").multiplier <= 10.0
    # Another replica's calls move the same multiplier.
    before = other.pace("auto")
    for i in range(5):
        other.record_outcome(OutcomeRecord("a", 5000.0 + i, None, 1.0, alias="auto", pace_alias="auto",
                                           cost_usd=0.004), rules)
    await h.sync()
    after = h.store.pace("auto")
    assert after.count == before.count + 5
    # Each moves it by (4 - 2) / 2 = 1 plus what the price shocks carried (pacing.MAX_CARRY).
    want_after = before
    for i in range(5):
        want_after = pace(want_after, PaceRule(2.0), 0.004, 5000.0 + i)
    assert after.multiplier == pytest.approx(want_after.multiplier, abs=1e-9)
    assert after.carry == pytest.approx(want_after.carry, abs=1e-9)
    assert after.multiplier >= min(100.0, before.multiplier + 5.0) - 1e-9
    # A floor below 0 (budget.min_multiplier): free calls take the multiplier down to it and no
    # further (each moves it by 0.5 x (0 - 0.5) / 0.5 = -0.5), a call at $1 per 1k back up by 0.5;
    # every view reads the negative multiplier as stored.
    for i in range(40):
        other.record_outcome(OutcomeRecord("a", 6000.0 + i, None, 1.0, alias="auto/coding", pace_alias="auto/coding",
                                           cost_usd=0.0), rules)
    await h.sync()
    assert h.store.pace("auto/coding").multiplier == -5.0
    h.store.record_outcome(OutcomeRecord("a", 6100.0, None, 1.0, alias="auto/coding", pace_alias="auto/coding",
                                         cost_usd=0.001), rules)
    await h.sync()
    for view in (h.store, other):
        assert view.pace("auto/coding").multiplier == pytest.approx(-4.5, abs=1e-12)
        assert MemoryState.load(view.dump()).pace("auto/coding").multiplier == pytest.approx(-4.5, abs=1e-12)


async def test_shared_counters_count_for_every_view_and_expire_with_their_ttl(h):
    """The revocation list of the routing page's sessions and the per-key count of refused
    feedback: a count made by one view is the count every view reads, and it ends with its TTL
    (the first count's; later counts do not extend it)."""
    other = await h.other()
    assert await h.store.counted("revoked:s1") == 0
    assert await h.store.count_up("revoked:s1", 1.0) == 1
    await h.midpoint()
    assert await other.counted("revoked:s1") == 1
    assert [await other.count_up("refused:k", 60) for _ in range(3)] == [1, 2, 3]
    assert await h.store.count_up("refused:k", 60) == 4
    assert await h.store.counted("refused:other-key") == 0  # per name: another key's count is its own
    for _ in range(60):  # bounded: the TTL is a second (Redis expires keys within about 0.1 s more)
        if await other.counted("revoked:s1") == 0 and await h.store.counted("revoked:s1") == 0:
            break
        await asyncio.sleep(0.05)
    assert await other.counted("revoked:s1") == 0 and await h.store.counted("revoked:s1") == 0
    assert await h.store.counted("refused:k") == 4
    assert await h.store.count_up("revoked:s1", 1.0) == 1  # counted anew after it expired


async def test_shared_lists_keep_their_newest_items_for_every_view_and_expire_with_their_ttl(h):
    """A conversation's answered turns (litellm/conversations.py): what one view appends every view
    reads, oldest first; only the `keep` newest stay; the list ends `ttl_s` after its last append."""
    other = await h.other()
    assert await h.store.list_of("conv:a") == []
    for i in range(5):
        assert await h.store.add_to_list("conv:a", {"turn": i, "dep": "x"}, 60, 3) is True
    await h.midpoint()
    assert await other.list_of("conv:a") == [{"turn": 2, "dep": "x"}, {"turn": 3, "dep": "x"}, {"turn": 4, "dep": "x"}]
    assert await other.add_to_list("conv:a", {"turn": 5, "dep": "y"}, 60, 3) is True
    assert [t["turn"] for t in await h.store.list_of("conv:a")] == [3, 4, 5]
    assert await h.store.list_of("conv:b") == []  # per name
    assert await h.store.add_to_list("conv:short", {"turn": 0}, 1.0, 3) is True
    for _ in range(60):  # bounded: the TTL is a second
        if await other.list_of("conv:short") == [] and await h.store.list_of("conv:short") == []:
            break
        await asyncio.sleep(0.05)
    assert await other.list_of("conv:short") == [] and await h.store.list_of("conv:short") == []
    assert [t["turn"] for t in await other.list_of("conv:a")] == [3, 4, 5]


async def test_pacing_records_are_kept_per_team_and_a_call_moves_one_by_a_bounded_step(h):
    """A team's calls move its own record of the alias (``alias|team:ID``, paced under the
    alias's rule) and no other; one call's cost, however large, moves it by rate x MAX_STEP at
    most; the records are the pure update's in every view (docs/security.md#tenants)."""
    rules = replace(rules_of(h.policy), pacing={"auto": PaceRule(2.0)})
    rng = random.Random(5)
    teams = (None, "team-a", "team-b")
    recs = [replace(rec, pace_alias=pace_key("auto", rng.choice(teams)), cost_usd=rng.choice((0.001, 0.004, 1.2)))
            for rec in outcomes(12, 90)]
    ref = await record_with_reference(h, recs, rules)
    want = ref.dump()["pacing"]
    assert set(want) == {"auto", "auto|team:team-a", "auto|team:team-b"}
    other = await h.other()
    for view in (h.store, other):
        assert_same_paces(view, want)
    # Three $1.2 calls (600 x the target each) of team-c: its own record moves by 3 x MAX_STEP,
    # the others not at all.
    before = {k: view_pace(other, k) for k in ("auto", "auto|team:team-a", "auto|team:team-b")}
    for i in range(3):
        other.record_outcome(OutcomeRecord("a", 9000.0 + i, None, 1.0, alias="auto",
                                           pace_alias=pace_key("auto", "team-c"), cost_usd=1.2), rules)
    await h.sync()
    for view in (h.store, other):
        assert view.pace("auto|team:team-c").multiplier == pytest.approx(1.0 + 3 * MAX_STEP, abs=1e-12)
        assert {k: view_pace(view, k) for k in before} == before


def view_pace(view, key):
    p = view.pace(key)
    return (p.multiplier, p.count)


# -- quality evidence (aisia_plugin/quality.py): kept apart from the arms, the same in every store --
def evidence(seed: int, n: int, deps=("a", "b", "c")):
    rng = random.Random(seed)
    for _ in range(n):
        yield QualityRecord(rng.choice(deps), rng.random(), rng.choice((0.5, 1.0, 2.0)),
                            rng.choice(("feedback", "judge", "signal")), rng.choice((None, "coding", "math")))


def assert_same_quality(got: dict, want: dict):
    assert set(got.get("quality", {})) == set(want.get("quality", {}))
    for key, rec in want.get("quality", {}).items():
        for field, v in rec.items():
            assert got["quality"][key][field] == pytest.approx(v, rel=1e-9, abs=1e-9), (key, field)


async def test_quality_evidence_interleaved_with_outcomes_equals_the_pure_update(h):
    rules = rules_of(h.policy)
    # The evidence is forgotten at the shared tick, as the arms are, with its own, slower gamma
    # (quality.half_life_requests): record.lua must read that one, not the arms'.
    assert rules.quality_gamma < 1.0 and rules.quality_gamma != rules.gamma
    ref = MemoryState()
    ops = list(outcomes(5, 80)) + list(evidence(6, 60))
    random.Random(7).shuffle(ops)
    ops.insert(70, ("reset", "b"))
    for k, op in enumerate(ops):
        if k == len(ops) // 2:
            await h.midpoint()
        for st in (h.store, ref):
            apply_op(st, op, rules)  # an outcome, evidence or a reset, as a queued batch applies it
    await h.sync()
    want = ref.dump()
    assert want["quality"]  # evidence was recorded, some of it after b's reset
    for view in (h.store, await h.other()):
        got = view.dump()
        assert_same_records(got, want)
        assert_same_quality(got, want)
    # a dump with quality evidence is a memory state
    assert MemoryState.load(want).dump() == want


async def test_evidence_moves_quality_and_never_the_health_and_the_stats_show_it_by_source(h):
    engine = Engine(h.policy, clock=h.store.clock, rng=random.Random(1), store=h.store)
    rules = engine.rules
    for i in range(20):
        h.store.record_outcome(OutcomeRecord("a", float(i), None, 0.7, 0.5, "auto", "coding"), rules)
    before = h.store.arm("a"), h.store.arm("a", "coding"), h.store.tick(), h.store.breaker("a")
    assert engine.record_quality("a", "auto", "coding", 0.0, "feedback").value == 0.0
    await h.midpoint()
    assert engine.record_quality("a", "auto", "coding", 1.0, "judge").value == 1.0
    assert engine.record_quality("a", "auto", None, 0.0, "signal").value == 0.0
    await h.sync()
    other = await h.other()
    assert (other.arm("a"), other.arm("a", "coding"), other.tick(), other.breaker("a")) == before
    assert other.quality_of("a").feedback == 1 and other.quality_of("a").signal == 1
    assert other.quality_of("a", "coding").judge == 1 and other.quality_of("a", "coding").signal == 0
    row = h.store.stats()["a"]  # the engine's store: its priors are attached
    assert set(row) >= {"pulls", "mean_reward", "alpha", "beta", "count", "avg_latency", "error_rate", "breaker",
                        "domains", "quality"}
    prior = engine.quality.prior("a", None)
    q = row["quality"]
    strength = engine.quality.strength
    assert q["prior"] == prior and q["evidence"] == {"prior": strength, "feedback": 1.0, "judge": 1.0, "signal": 1.0}
    # the prior's strength at the prior, feedback 0 (weight 1), judge 1 (weight 1), signal 0 (weight 0.5)
    assert q["estimate"] == pytest.approx((strength * prior + 1.0) / (strength + 2.5), rel=1e-3)
    assert row["domains"]["coding"]["quality"]["evidence"]["judge"] == 1.0
    assert row["count"] == 20  # the health beside it, unchanged


async def test_one_owners_flood_of_lists_never_drops_another_owners_live_list(h):
    """The memory store holds a bounded number of lists: past it, it dropped the least recently
    written of all, so one key's new conversations (20,000 within the hour) silenced every other
    tenant's (found by a review; Redis keeps them all). It now drops the largest owner's first."""
    assert await h.store.add_to_list("conv:victim", {"turn": 0}, 3600, 32, "victim-key") is True
    limit = h.store.lists.limit if isinstance(h.store, MemoryState) else 2000
    for i in range(limit + 10):
        await h.store.add_to_list(f"conv:flood{i}", {"turn": 0}, 3600, 32, "hostile-key")
    assert await h.store.list_of("conv:victim") == [{"turn": 0}]
    assert await h.store.list_of(f"conv:flood{limit + 9}") == [{"turn": 0}]  # the newest kept
    if isinstance(h.store, MemoryState):
        assert await h.store.list_of("conv:flood0") == []  # the flooder's own oldest went
        assert len(h.store.lists._owner_of) <= h.store.lists.limit  # bounded
