"""The Redis store beyond the shared contract: the Lua scripts equal the Python update, several OS
processes share one state exactly, outages lose and double nothing, the keys and TTLs are the
documented ones, the URL rules, Cluster. Every test talks to a real redis-server (tests/redis_server.py)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import random
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aisia_plugin.breaker import CLOSED, HALF_OPEN, BreakerState, CircuitBreaker, FailureKind
from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.learning import LearningRules, OutcomeRecord
from aisia_plugin.bandit import ArmStats
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy
from aisia_plugin.state import open_store, scripts
from aisia_plugin.state.memory import MemoryState
from aisia_plugin.state.records import ARM_FIELDS, BREAKER_FIELDS, read_arm, read_breaker, read_quality
from aisia_plugin.state.redis import RedisStore, StoreConfigError, key_tag, redact
from redis_server import RedisCluster, RedisServer, redis_module  # noqa: F401  (a fixture)

BASE = load_policy()
_prefixes = itertools.count()
DEPS = [Deployment(id=i, model_name="g", model=f"p/{i}", provider=i, input_cost_per_1m=1.0, output_cost_per_1m=1.0)
        for i in ("a", "b", "c")]
MSGS = [{"role": "user", "content": "write a python function that sorts a list"}]


def policy(prefix=None, *, forgetting=True, **state):
    p = BASE
    if not forgetting:
        bandit = p.bandit.model_copy(update={"forgetting": p.bandit.forgetting.model_copy(update={"enabled": False})})
        p = p.model_copy(update={"bandit": bandit})
    prefix = prefix or f"r{next(_prefixes)}:"
    state = {"timeout_ms": 5000, **state}  # these tests check what is shared, not how fast
    return p.model_copy(update={"state": p.state.model_copy(update={"backend": "redis", "key_prefix": prefix, **state})})


def rules_of(pol):
    return Engine(pol, clock=lambda: 0.0).rules


async def started(pol, url):
    st_ = RedisStore(pol, url)
    await st_.start()
    return st_


async def settle(*stores):
    """Write every queue and read back (bounded waiting through an outage)."""
    for _ in range(400):
        ok = all([await s.flush() for s in stores])
        ok = all([await s.refresh() for s in stores]) and ok
        if ok and all(s.queue_depth() == 0 for s in stores):
            return
        await asyncio.sleep(0.05)
    raise AssertionError([s.counters for s in stores])


# -- Lua equals Python ---------------------------------------------------------------------------------
_kinds = st.sampled_from([None, None, FailureKind.PROVIDER, FailureKind.PROVIDER, FailureKind.CLIENT,
                          FailureKind.RATE_LIMIT])
_outcome = st.tuples(st.sampled_from(["a", "b"]), st.floats(0, 200), _kinds, st.floats(0, 1),
                     st.one_of(st.none(), st.floats(0, 30)), st.sampled_from([None, "auto", "auto/x"]),
                     st.sampled_from([None, "coding", "math"]), st.one_of(st.none(), st.floats(-5, 600)),
                     st.sampled_from([False, False, False, False, True, "reset"]))  # a probe reservation, a reset


class _Cfg:
    def __init__(self, threshold, timeout, max_calls):
        self.failure_threshold, self.timeout_s, self.half_open_max_calls = threshold, timeout, max_calls
        self.rate_limit_cooldown_s, self.max_retry_after_s = 5.0, 300.0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_outcome, min_size=1, max_size=60), threshold=st.integers(1, 4), timeout=st.floats(1, 50),
       max_calls=st.integers(1, 3), gamma=st.sampled_from([1.0, 0.999, 0.9]), ema=st.floats(0.05, 0.9),
       success=st.floats(0.1, 0.9))
@example(ops=[("a", 1.0, FailureKind.PROVIDER, 0.0, None, None, None, None, False),
              ("a", 9.0, None, 0.0, None, None, None, None, True),  # half-open: a probe
              ("a", 1.0, FailureKind.CLIENT, 0.0, None, None, None, None, False),  # releases it
              ("a", 1.0, None, 0.0, None, None, None, None, True),
              ("a", 1.0, None, 0.0, None, None, None, None, True),
              ("a", 61.0, None, 0.0, None, None, None, None, True),  # past the lease: slots free again
              ("a", 0.5, FailureKind.RATE_LIMIT, 0.0, None, None, None, 7.0, False),
              ("a", 0.5, None, 0.9, 2.0, "auto", "coding", None, False)],
         threshold=1, timeout=5.0, max_calls=2, gamma=0.9, ema=0.3, success=0.5)
def test_lua_records_equal_the_python_update(redis_module, ops, threshold, timeout, max_calls, gamma, ema, success):
    """Random outcome sequences (with probe reservations and resets) through lua/record.lua and lua/reserve.lua
    give the records learning.apply_outcome and CircuitBreaker.reserve give, within 1e-9."""
    cb = CircuitBreaker(_Cfg(threshold, timeout, max_calls))
    rules = LearningRules(cb, gamma, ema, success, ArmStats(avg_latency=3.0))
    pol = policy()

    async def run():
        store = await started(pol, redis_module.url)
        ref = MemoryState()
        t = 0.0
        for dep, dt, kind, reward, latency, alias, domain, retry_after, probe in ops:
            t += dt
            if probe == "reset":  # an operator's reset, queued in order with the outcomes
                store.reset(dep)
                ref.reset(dep)
                continue
            if probe:  # a reservation, shared: the queue is written first so that the order holds
                await store.flush()
                assert await store.reserve_probe_shared(dep, t, cb) == ref.reserve_probe(dep, t, cb)
                continue
            rec = OutcomeRecord(dep, t, kind, reward, latency, alias, domain, retry_after)
            store.record_outcome(rec, rules)
            ref.record_outcome(rec, rules)
        await store.aclose()
        assert store.counters["outages"] == 0 and store.queue_depth() == 0  # every script ran
        return ref, pol

    ref, pol = asyncio.run(run())
    c = redis_module.client()
    tag = key_tag(pol.state.key_prefix)
    want = ref.dump()
    assert float(c.get(tag + "tick") or 0) == pytest.approx(want["ticks"], abs=1e-9)
    for key, rec in want["bandit"].items():
        dep, _, dom = key.partition(":")
        got = read_arm(c.hgetall(f"{tag}bandit:{dep}" + (f":{dom}" if dom else "")))
        for f in ARM_FIELDS:
            assert getattr(got, f) == pytest.approx(rec[f], rel=1e-9, abs=1e-9), (key, f)
    for dep, rec in want["breakers"].items():
        got = read_breaker(c.hgetall(f"{tag}cb:{dep}"))
        for f in BREAKER_FIELDS:
            v = rec[f]
            assert getattr(got, f) == (pytest.approx(v, abs=1e-9) if isinstance(v, float) else v), (dep, f)
    assert {k.decode(): v.decode() for k, v in c.hgetall(tag + "lkgp").items()} == want["lkgp"]
    # nothing more in Redis than in the reference (a reset removed the same records)
    arm_keys = {k.decode()[len(tag) + len("bandit:"):] for k in c.keys(tag + "bandit:*")}
    assert arm_keys == set(want["bandit"])
    cb_keys = {k.decode()[len(tag) + len("cb:"):] for k in c.keys(tag + "cb:*")}
    assert cb_keys <= set(want["breakers"])  # a CLOSED reservation writes nothing in Redis
    assert all(ref.breaker(dep) == BreakerState() for dep in set(want["breakers"]) - cb_keys)


# -- several OS processes ----------------------------------------------------------------------------
def _record_worker(url, prefix, n, start_at, k):
    """One OS process: its own store, n outcomes on deployment 'a' (rewards that sum exactly)."""
    async def main():
        pol = policy(prefix, forgetting=False)
        store = await started(pol, url)
        rules = rules_of(pol)
        while time.time() < start_at:  # start together
            await asyncio.sleep(0.001)
        for i in range(n):
            if i % 100 == 0:
                await store.prepare(["a"])
                await asyncio.sleep(0)
            store.record_outcome(OutcomeRecord("a", store.clock(), None, (0.25, 0.5, 1.0, 0.75)[(i + k) % 4], 0.1), rules)
            if i % 500 == 0:
                await asyncio.sleep(0)  # let the flusher run mid-traffic
        await store.aclose()
        return store.counters
    return asyncio.run(main())


def _reserve_worker(url, prefix, start_at, tries):
    async def main():
        pol = policy(prefix)
        store = await started(pol, url)
        cb = rules_of(pol).breaker
        while time.time() < start_at:
            await asyncio.sleep(0.0005)
        granted = 0
        for _ in range(tries):
            granted += await store.reserve_probe_shared("a", store.clock(), cb)
        await store.aclose()
        return granted
    return asyncio.run(main())


@pytest.fixture(scope="module")
def pool():
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as p:
        p.map(time.sleep, [0] * 4)  # processes up before any test counts on them
        yield p


def test_four_processes_recording_at_once_lose_nothing(redis_module, pool):
    prefix = f"p{next(_prefixes)}:"
    start_at = time.time() + 0.5
    counters = pool.starmap(_record_worker, [(redis_module.url, prefix, 2500, start_at, k) for k in range(4)])
    assert sum(c["outcomes_written"] for c in counters) == 10_000
    c = redis_module.client()
    arm = read_arm(c.hgetall(key_tag(prefix) + "bandit:a"))
    assert arm.count == 10_000 and arm.pulls == 10_000.0
    assert arm.total_reward == 2500 * (0.25 + 0.5 + 1.0 + 0.75) / 4 * 4  # dyadic rewards: exact in any order
    assert arm.alpha + arm.beta - 2 == 10_000
    assert float(c.get(key_tag(prefix) + "tick")) == 10_000.0


def test_at_most_half_open_max_calls_probes_across_four_processes(redis_module, pool):
    prefix = f"p{next(_prefixes)}:"
    pol = policy(prefix)
    cb = rules_of(pol).breaker

    async def open_it():
        store = await started(pol, redis_module.url)
        past = store.clock() - cb.timeout_s - 5.0  # opened long enough ago to be half-open now
        for _ in range(cb.failure_threshold):
            store.record_outcome(OutcomeRecord("a", past, FailureKind.PROVIDER, 0.0, None), rules_of(pol))
        await store.aclose()

    asyncio.run(open_it())
    start_at = time.time() + 0.5
    granted = pool.starmap(_reserve_worker, [(redis_module.url, prefix, start_at, 5) for _ in range(4)])
    assert sum(granted) == cb.half_open_max_calls
    state = read_breaker(redis_module.client().hgetall(key_tag(prefix) + "cb:a"))
    assert state.state == HALF_OPEN and state.probes_in_flight == cb.half_open_max_calls


def _open_breaker_worker(url, prefix):
    async def main():
        pol = policy(prefix)
        store = await started(pol, url)
        for _ in range(pol.circuit_breaker.failure_threshold):
            store.record_outcome(OutcomeRecord("b", store.clock(), FailureKind.PROVIDER, 0.0, 1.0), rules_of(pol))
        await store.aclose()
    asyncio.run(main())


def test_a_breaker_opened_by_one_process_is_open_for_another_after_the_cache_bound(redis_module, pool):
    prefix = f"p{next(_prefixes)}:"
    pol = policy(prefix, cache_ttl_ms=200)

    async def main():
        store = await started(pol, redis_module.url)
        engine = Engine(pol, clock=store.clock, rng=random.Random(1), store=store)
        await store.prepare(["a", "b", "c"])
        assert store.breaker("b").state == CLOSED
        await asyncio.get_running_loop().run_in_executor(None, pool.apply, _open_breaker_worker,
                                                         (redis_module.url, prefix))
        await asyncio.sleep(pol.state.cache_ttl_ms / 1000.0)  # the staleness bound passes
        await store.prepare(["a", "b", "c"])
        d = engine.decide("auto", MSGS, DEPS, reserve=False)
        await store.aclose()
        return d

    d = asyncio.run(main())
    assert d.deployment_id != "b"
    assert any(s.id == "b" and s.excluded == "circuit OPEN" for s in d.scores)


# -- outages -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("persistence", ["aof", "none"])
@pytest.mark.proxy  # starts redis-server
def test_redis_killed_mid_traffic_loses_nothing_and_counts_nothing_twice(tmp_path, caplog, persistence):
    srv = RedisServer(tmp_path / "r", aof=persistence == "aof").start()
    pol = policy(cache_ttl_ms=50, flush_ms=10)
    n = 900

    async def main():
        writers = [await started(pol, srv.url), await started(pol, srv.url)]
        engines = [Engine(pol, clock=s.clock, rng=random.Random(k), store=s) for k, s in enumerate(writers)]
        decisions = 0
        for i in range(n):
            if i == 300:
                srv.kill()
            if i == 600:
                if persistence == "none":
                    srv.wipe()
                srv.start()
            k = i % 2
            await writers[k].prepare([d.id for d in DEPS], "auto")
            d = engines[k].decide("auto", MSGS, DEPS, reserve=False)
            assert d.deployment_id in ("a", "b", "c")
            decisions += 1
            engines[k].record(d, Outcome(d.deployment_id, success=True, latency_s=0.2))
            if i % 10 == 0:  # quality evidence rides the same batches: lost by none, counted once
                engines[k].record_quality(d.deployment_id, "auto", None, 0.5, "feedback")
            await asyncio.sleep(0.001)
        await settle(*writers)
        counts = [sum((w.arm(x).count if w.arm(x) else 0) for x in "abc") for w in writers]
        for w in writers:
            await w.aclose()
        return decisions, counts, [w.counters for w in writers]

    with caplog.at_level(logging.WARNING, logger="aisia.state"):
        decisions, counts, counters = asyncio.run(main())
    assert decisions == n
    c = srv.client()
    tag = key_tag(pol.state.key_prefix)
    stored = sum(read_arm(c.hgetall(f"{tag}bandit:{x}")).count for x in "abc")
    assert stored == n and counts == [n, n]
    feedback = [read_quality({(k.decode() if isinstance(k, bytes) else k): v
                              for k, v in c.hgetall(f"{tag}bandit:{x}").items()}) for x in "abc"]
    assert sum(q.feedback for q in feedback if q is not None) == n // 10
    assert float(c.get(tag + "tick")) == n
    down = [r for r in caplog.records if "unreachable" in r.getMessage()]
    back = [r for r in caplog.records if "reachable again" in r.getMessage()]
    assert len(down) == 2 and len(back) == 2  # one warning per outage per process, not one per request
    assert all("unreachable" not in r.getMessage() or r.levelno == logging.WARNING for r in caplog.records)
    if persistence == "none":
        assert sum(x["reseeded"] for x in counters) == 1  # one replica re-seeded, the other adopted it
    srv.stop()


@pytest.mark.proxy  # starts redis-server
def test_unreachable_at_start_routes_on_local_state_then_merges(tmp_path, caplog):
    srv = RedisServer(tmp_path / "r", aof=True)  # not started yet
    pol = policy(flush_ms=10)

    async def main():
        store = await started(pol, srv.url)
        engine = Engine(pol, clock=store.clock, store=store)
        for _ in range(20):
            await store.prepare(["a", "b", "c"])
            d = engine.decide("auto", MSGS, DEPS, reserve=False)
            engine.record(d, Outcome(d.deployment_id, success=True, latency_s=0.3))
        assert not store.connected and store.queue_depth() == 20
        srv.start()
        await settle(store)
        await store.aclose()

    with caplog.at_level(logging.WARNING, logger="aisia.state"):
        asyncio.run(main())
    tag = key_tag(pol.state.key_prefix)
    assert sum(read_arm(srv.client().hgetall(f"{tag}bandit:{x}")).count for x in "abc") == 20
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
    srv.stop()


@pytest.mark.proxy  # starts redis-server
def test_a_hung_redis_delays_no_decision_beyond_the_timeout(tmp_path):
    """SIGSTOP: connections stay open and nothing answers. Decisions wait at most timeout_ms for
    a refresh, then go on with the local copy; the store counts an outage after io_timeout_ms;
    once the server resumes, everything recorded meanwhile is written exactly once."""
    srv = RedisServer(tmp_path / "r", aof=True).start()
    pol = policy(cache_ttl_ms=0, timeout_ms=20, io_timeout_ms=300, flush_ms=10)

    async def main():
        store = await started(pol, srv.url)
        engine = Engine(pol, clock=store.clock, store=store)
        srv.pause()
        try:
            for _ in range(30):
                await store.prepare(["a", "b", "c"])
                d = engine.decide("auto", MSGS, DEPS, reserve=False)
                engine.record(d, Outcome(d.deployment_id, success=True, latency_s=0.1))
                await asyncio.sleep(0.02)
            hung = store.counters["outages"]
        finally:
            srv.resume()
        await settle(store)
        await store.aclose()
        return hung

    assert asyncio.run(main()) == 1
    tag = key_tag(pol.state.key_prefix)
    assert sum(read_arm(srv.client().hgetall(f"{tag}bandit:{x}")).count for x in "abc") == 30
    srv.stop()


@pytest.mark.proxy  # starts redis-server
def test_a_large_backlog_is_written_in_batches_and_the_local_copy_catches_up(tmp_path):
    srv = RedisServer(tmp_path / "r")
    pol = policy(batch_max=500, flush_ms=10)

    async def main():
        store = await started(pol, srv.url)  # unreachable: everything queues
        for i in range(3000):
            store.record_outcome(OutcomeRecord("abc"[i % 3], 1.0, None, 0.5, 0.1), rules_of(pol))
        srv.start()
        await settle(store)
        local = [store.arm(x).count for x in "abc"]
        await store.aclose()
        return local, store.counters

    local, counters = asyncio.run(main())
    tag = key_tag(pol.state.key_prefix)
    assert local == [1000, 1000, 1000] and counters["batches"] >= 6
    assert [read_arm(srv.client().hgetall(f"{tag}bandit:{x}")).count for x in "abc"] == [1000, 1000, 1000]
    srv.stop()


def test_a_batch_replayed_after_a_lost_reply_is_applied_once(redis_module):
    pol = policy()

    async def main():
        store = await started(pol, redis_module.url)
        store.record_outcome(OutcomeRecord("a", 1.0, None, 1.0, 0.1), rules_of(pol))
        batch = store._next_batch()
        assert await store._send(batch) == "ok"
        # as if the reply had been lost: the batch is still this process's to send
        store._confirmed.pop()
        store._batches.appendleft(batch)
        store._retained += len(batch.ops)
        assert await store._send(batch) == "dup"
        await settle(store)
        await store.aclose()
        return store

    store = asyncio.run(main())
    assert store.counters["duplicates_skipped"] == 1
    assert read_arm(redis_module.client().hgetall(key_tag(pol.state.key_prefix) + "bandit:a")).count == 1


def test_the_replies_the_store_rarely_sees_read_by_name(redis_module):
    """Each script answers name/value pairs (scripts.read_reply): the answers the other tests
    seldom reach, run on the server and read as the store reads them."""
    r, tag = redis_module.client(), "replies:"

    def answer(record, name, key, doc):
        return scripts.read_reply(record, r.eval(scripts.source(name), 1, tag + key, doc), name)

    def seed(epoch):
        return scripts.seed_doc(tag=tag, epoch=epoch, bandit_ttl=60, breaker_ttl=60, tick="0.0", applied=[],
                                lkgp={}, arms=[], breakers=[], paces=[], quality=[])

    first, again = (answer(scripts.SeedReply, "seed", "epoch", seed(e)) for e in ("e1", "e2"))
    assert (first.status, first.epoch, again.status, again.epoch) == (b"seeded", b"e1", b"exists", b"e1")
    stale = answer(scripts.RecordReply, "record", "tick", scripts.record_doc(
        tag=tag, epoch="e0", process="p", seq=1, bandit_ttl=60, breaker_ttl=60, rules=scripts.record_rules(None), ops=[]))
    assert (stale.status, stale.epoch, stale.version) == (b"epoch", b"e1", None)
    gone = answer(scripts.FoldReply, "contextual", "ctxdeps", scripts.contextual_doc(
        tag=tag, process="p", gamma=1.0, ttl=60, others=None,
        columns=[scripts.context_column(deployment="a", known="1:1", base=None, folds=[])]))
    assert (gone.status, gone.absent, gone.rows) == (b"absent", [b"a"], None)
    nothing = answer(scripts.FoldReply, "contextual", "ctxdeps", scripts.contextual_doc(
        tag=tag, process="p", gamma=1.0, ttl=60, others=None,
        columns=[scripts.context_column(deployment="b", known="", base=None, folds=[])]))
    row = scripts.read_reply(scripts.FoldRow, nothing.rows[0], "contextual")
    assert nothing.status == b"ok" and (row.deployment, row.version, row.full, row.weights) == (b"b", b"", 0, None)


def test_a_peers_reply_out_of_contract_keeps_the_calls_for_the_next_exchange(redis_module):
    from aisia_plugin.blame import OutlierRule

    pol, rule = policy(), OutlierRule(True, 10.0, 5, 0.8, 512)

    async def main():
        store = await started(pol, redis_module.url)
        real = store._eval

        async def out_of_contract(name, keys, args):
            reply = await real(name, keys, args)
            return [[[b"who", b"k"]] for _ in reply] if name == "peers" else reply

        store._eval = out_of_contract
        store.note_peer_call("a", "key-b", True, store.clock(), rule)
        failed = await store.exchange_peers()
        kept = len(store._peers_out)
        store._eval = real
        store._retry_at = 0.0  # the backoff's wait, skipped: the next read reconnects
        assert await store.refresh()
        again = await store.exchange_peers()
        seen = store.peer_calls("a", "key-a", store.clock(), rule)
        await store.aclose()
        return failed, kept, again, seen

    failed, kept, again, seen = asyncio.run(main())
    assert (failed, kept, again) == (False, 1, True)
    assert seen.calls == 1 and seen.successes == 1, seen


def test_scripts_are_reloaded_after_script_flush(redis_module):
    pol = policy()

    async def main():
        store = await started(pol, redis_module.url)
        redis_module.client().script_flush()
        store.record_outcome(OutcomeRecord("a", 1.0, None, 1.0, 0.1), rules_of(pol))
        await settle(store)
        await store.aclose()
        return store

    store = asyncio.run(main())
    assert store.counters["outages"] == 0 and store.arm("a").count == 1


def test_a_full_queue_is_counted_and_logged_and_stays_local(tmp_path, caplog):
    srv = RedisServer(tmp_path / "r")
    pol = policy(queue_max=5)
    events = []

    async def main():
        store = RedisStore(pol, srv.url)
        store.on_event = lambda name, n: events.append(name)
        await store.start()  # unreachable
        for i in range(8):
            store.record_outcome(OutcomeRecord("a", 1.0, None, 1.0, 0.1), rules_of(pol))
        await store.aclose()
        return store

    with caplog.at_level(logging.WARNING, logger="aisia.state"):
        store = asyncio.run(main())
    assert store.counters["queue_full"] == 3 and events.count("queue_full") == 3 and "fallback" in events
    assert store.arm("a").count == 8  # all in local state
    assert len([r for r in caplog.records if "queue full" in r.getMessage()]) == 1


# -- keys and TTLs ----------------------------------------------------------------------------------------
def test_keys_are_exactly_the_documented_ones_with_their_ttls(redis_module):
    pol = policy("docs:", bandit_ttl_s=500, breaker_ttl_s=200)

    async def main():
        store = await started(pol, redis_module.url)
        store.record_outcome(OutcomeRecord("gpt-4o", 1.0, None, 0.9, 1.2, "auto", "coding"), rules_of(pol))
        await settle(store)
        c = redis_module.client()
        c.expire("{docs}:bandit:gpt-4o", 10)
        c.expire("{docs}:cb:gpt-4o", 10)
        store.record_outcome(OutcomeRecord("gpt-4o", 2.0, None, 0.9, 1.2, "auto", "coding"), rules_of(pol))
        await settle(store)
        await store.aclose()

    asyncio.run(main())
    c = redis_module.client()
    keys = sorted(k.decode() for k in c.keys("{docs}:*"))
    assert keys == ["{docs}:applied", "{docs}:applied_seen", "{docs}:bandit:gpt-4o", "{docs}:bandit:gpt-4o:coding", "{docs}:cb:gpt-4o",
                    "{docs}:deployments", "{docs}:domains", "{docs}:epoch", "{docs}:lkgp", "{docs}:tick",
                    "{docs}:version"]
    bandit = {k.decode() for k in c.hkeys("{docs}:bandit:gpt-4o")}
    assert {"pulls", "total_reward", "alpha", "beta", "avg_latency"} <= bandit and bandit == set(ARM_FIELDS)
    cb = {k.decode() for k in c.hkeys("{docs}:cb:gpt-4o")}
    assert {"state", "failures", "last_failure_time", "success_count"} <= cb and cb == set(BREAKER_FIELDS)
    assert c.hget("{docs}:cb:gpt-4o", "state") == b"CLOSED"
    # refreshed by the second write (set to 10 s in between), in the same script
    assert 400 < c.ttl("{docs}:bandit:gpt-4o") <= 500 and 400 < c.ttl("{docs}:bandit:gpt-4o:coding") <= 500
    assert 100 < c.ttl("{docs}:cb:gpt-4o") <= 200
    for k in ("tick", "lkgp", "deployments", "domains", "applied", "applied_seen"):
        assert 400 < c.ttl("{docs}:" + k) <= 500, k
    assert c.ttl("{docs}:epoch") == -1 and c.ttl("{docs}:version") == -1
    assert c.hget("{docs}:lkgp", "auto") == b"gpt-4o"
    assert {m.decode() for m in c.smembers("{docs}:deployments")} == {"gpt-4o"}


def test_the_clock_is_the_servers_not_this_machines(redis_module, monkeypatch):
    """Breaker timing uses Redis's TIME: with this machine's clock 1000 s behind, the store's
    clock still reads the server's time (measured on each refresh)."""
    import aisia_plugin.state.redis as module

    real = time

    class Behind:
        monotonic = staticmethod(real.monotonic)

        @staticmethod
        def time():
            return real.time() - 1000.0

    monkeypatch.setattr(module, "time", Behind)

    async def main():
        store = await started(policy(), redis_module.url)
        server = redis_module.client().time()
        clock = store.clock()
        await store.aclose()
        return clock, server[0] + server[1] / 1e6

    clock, server = asyncio.run(main())
    assert abs(clock - server) < 5.0 and abs(Behind.time() - server) > 900.0


def test_processes_silent_for_a_bandit_ttl_leave_the_applied_hash(redis_module):
    pol = policy(bandit_ttl_s=1000)
    tag = key_tag(pol.state.key_prefix)
    c = redis_module.client()
    now = c.time()[0]
    c.hset(tag + "applied", mapping={"old-process": 7, "recent-process": 3})
    c.zadd(tag + "applied_seen", {"old-process": now - 5000, "recent-process": now - 10})

    async def main():
        store = await started(pol, redis_module.url)
        store.record_outcome(OutcomeRecord("a", 1.0, None, 1.0, 0.1), rules_of(pol))
        await settle(store)
        await store.aclose()
        return store.process

    me = asyncio.run(main())
    assert {k.decode() for k in c.hkeys(tag + "applied")} == {"recent-process", me}
    assert {k.decode() for k in c.zrange(tag + "applied_seen", 0, -1)} == {"recent-process", me}


def test_key_tag():
    assert key_tag("aisia:") == "{aisia}:" and key_tag("team-a") == "{team-a}:"
    assert key_tag("x:{shared}:") == "x:{shared}:" and key_tag("") == "{aisia}:"


# -- URLs --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url, why", [
    ("http://127.0.0.1:6379", "must start with redis:// or rediss://"),
    ("redis://:s3cret@127.0.0.1:99999/0", "out of range"),
    ("redis://u:s3cret@127.0.0.1:port/0", "malformed"),
    ("redis://u:s3cret@/0", "names no host"),
    ("redis://u:s3cret@127.0.0.1:6379/zero", "database number"),
])
def test_a_malformed_url_is_a_clear_start_up_error_without_the_password(monkeypatch, url, why):
    monkeypatch.setenv("AISIA_REDIS_URL", url)
    with pytest.raises(StoreConfigError) as err:
        open_store(policy())
    assert why in str(err.value) and "AISIA_REDIS_URL" in str(err.value) and "s3cret" not in str(err.value)


def test_a_missing_url_variable_is_a_clear_start_up_error(monkeypatch):
    monkeypatch.delenv("AISIA_REDIS_URL", raising=False)
    with pytest.raises(StoreConfigError, match="AISIA_REDIS_URL"):
        open_store(policy())


def test_redact():
    assert redact("redis://alice:pw@h:1/0") == "redis://alice:***@h:1/0"
    assert redact("rediss://:pw@h:1") == "rediss://:***@h:1" and redact("redis://h:1") == "redis://h:1"


@pytest.mark.proxy  # starts redis-server
def test_acl_user_and_password(tmp_path, monkeypatch, caplog):
    srv = RedisServer(tmp_path / "acl", user="alice", password="s3cr3t-pw").start()
    monkeypatch.setenv("AISIA_REDIS_URL", srv.url)
    pol = policy()

    async def main():
        store = open_store(pol)
        await store.start()
        store.record_outcome(OutcomeRecord("a", 1.0, None, 1.0, 0.1), rules_of(pol))
        await settle(store)
        ok = store.connected
        await store.aclose()
        # the wrong password: an outage (logged without the password), not a crash
        bad = RedisStore(pol, srv.url.replace("s3cr3t-pw", "wrong-pw"))
        await bad.start()
        await bad.aclose()
        return ok, bad.connected

    with caplog.at_level(logging.WARNING, logger="aisia.state"):
        ok, bad = asyncio.run(main())
    assert ok and not bad
    assert all("wrong-pw" not in r.getMessage() and "s3cr3t" not in r.getMessage() for r in caplog.records)
    # The store writes the user with the password masked; once the plugin's loggers go through
    # LiteLLM's handler (any test that loaded the plugin), LiteLLM's own redaction masks the user too.
    assert any("alice:***@" in r.getMessage() or "REDACTED@" in r.getMessage() for r in caplog.records)
    srv.stop()


@pytest.mark.proxy  # starts redis-server
def test_rediss_tls_with_an_acl_user(tmp_path, monkeypatch, caplog):
    srv = RedisServer(tmp_path / "tls", tls=True, user="bob", password="tls-s3cret").start()
    monkeypatch.setenv("AISIA_REDIS_URL", srv.url)
    pol = policy()

    async def main():
        store = open_store(pol)
        await store.start()
        store.record_outcome(OutcomeRecord("a", 1.0, None, 1.0, 0.1, "auto"), rules_of(pol))
        await settle(store)
        other = open_store(pol)
        await other.start()
        seen = other.arm("a").count, other.last_known_good("auto")
        await store.aclose()
        await other.aclose()
        return store.counters["outages"], seen

    with caplog.at_level(logging.WARNING, logger="aisia.state"):
        outages, seen = asyncio.run(main())
    assert outages == 0 and seen == (1, "a")
    assert srv.url.startswith("rediss://bob:")
    srv.stop()


# -- Cluster -------------------------------------------------------------------------------------------------
@pytest.mark.proxy  # starts redis-server
def test_cluster_mode(tmp_path, monkeypatch):
    cluster = RedisCluster(tmp_path / "cluster").start()
    try:
        monkeypatch.setenv("AISIA_REDIS_URL", cluster.url)
        pol = policy(cluster=True)
        cb = rules_of(pol).breaker

        async def main():
            a, b = open_store(pol), open_store(pol)
            await a.start()
            await b.start()
            for i in range(50):
                a.record_outcome(OutcomeRecord("x", 1.0, None if i % 5 else FailureKind.PROVIDER, 0.5, 0.2,
                                               "auto", "coding"), rules_of(pol))
            await settle(a, b)
            granted = await b.reserve_probe_shared("x", b.clock(), cb)
            stats = b.stats()
            await a.aclose()
            await b.aclose()
            return a, b, granted, stats

        a, b, granted, stats = asyncio.run(main())
        assert a.counters["outages"] == 0 and b.counters["outages"] == 0
        assert stats["x"]["count"] == 50 and stats["x"]["domains"]["coding"]["count"] == 50 and granted
    finally:
        cluster.stop()
