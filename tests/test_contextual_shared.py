"""The contextual models shared through the Redis store (lua/contextual.lua, RedisStore.fold):
replicas whose folds complete between outcomes learn exactly what one process learning the
interleaved sequence learns (forgetting included); two OS processes learning at once both end
with the combined model; a fold re-sent after a lost reply is counted once; an outage keeps what
was learned and folds it later, once; a column Redis lost is re-created with nothing lost or
counted twice. Every test talks to a real redis-server (tests/redis_server.py)."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import random
import textwrap
import time

import numpy as np
import pytest

from aisia_plugin.contextual import ContextualModels, LearnContext, request_vector
from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.features import RequestFeatures
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy
from aisia_plugin.state import scripts
from aisia_plugin.state.redis import RedisStore, _weights, key_tag
from redis_server import RedisServer, redis_module  # noqa: F401  (a fixture)

BASE = load_policy()
_prefixes = itertools.count()
WORDS = ("sort", "list", "python", "tax", "law", "court", "poem", "rhyme", "prove", "lemma", "fast", "explain",
         "contract", "integral", "story")
PV, NV = 0.05, 0.1  # prior and noise variance


def policy(prefix=None, **state):
    prefix = prefix or f"x{next(_prefixes)}:"
    state = {"timeout_ms": 5000, **state}
    return BASE.model_copy(update={"state": BASE.state.model_copy(update={"backend": "redis", "key_prefix": prefix,
                                                                           **state})})


async def started(pol, url, process_id=None):
    st = RedisStore(pol, url, process_id=process_id)
    await st.start()
    return st


def outcome(rng):
    """(vector, base, reward) of a random prompt."""
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
    x = request_vector(RequestFeatures(text=text, has_code=rng.random() < 0.3), rng.choice((None, "coding", "legal")))
    return x, rng.uniform(0.3, 0.7), rng.random()


def true_values(m: ContextualModels, dep: str) -> np.ndarray:
    k = m.ids[dep]
    return m.hd[:, :, k].astype(np.float64) * float(m.scale[k])


def redis_values(client, tag: str, dep: str) -> tuple[np.ndarray, float]:
    meta = {k.decode(): float(v) for k, v in client.hgetall(f"{tag}ctx:{dep}").items() if k != b"created"}
    return _weights(client.get(f"{tag}ctxw:{dep}") or b"") * meta["scale"], meta["count"]


def assert_same_column(got: ContextualModels, want: ContextualModels, dep: str):
    kg, kw = got.ids[dep], want.ids[dep]
    assert np.allclose(true_values(got, dep), true_values(want, dep), rtol=1e-9, atol=1e-9), dep
    assert got.count[kg] == want.count[kw] and got.tick[kg] == want.tick[kw]
    assert np.allclose(got.mv[:, :, kg], want.mv[:, :, kw], rtol=1e-6, atol=0), dep  # what a decision reads


# -- two replicas == one process -------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [1.0, 0.97])
def test_replicas_whose_folds_complete_learn_what_one_process_learns(redis_module, gamma):
    """Replicas A and B take turns at random; each folds before and after it learns (the folds
    complete between outcomes). The result equals one process learning the interleaved sequence,
    within 1e-9, forgetting (gamma < 1, ticks that jump) included; Redis holds the same."""
    pol = policy(contextual_fold_ms=600000)  # no background fold: the test orders them
    rng = random.Random(11)
    ref = ContextualModels()

    async def main():
        a, b = await started(pol, redis_module.url), await started(pol, redis_module.url)
        tick = 0.0
        for _ in range(120):
            r = rng.choice((a, b))
            dep = rng.choice("pqr")
            x, base, y = outcome(rng)
            tick += rng.choice((1.0, 1.0, 3.0, 40.0))
            assert await r.fold()
            r.contextual.learn(dep, LearnContext(x, base, PV, NV), y, tick, gamma)
            ref.learn(dep, LearnContext(x, base, PV, NV), y, tick, gamma)
            assert await r.fold()
        assert await a.fold() and await b.fold()
        await a.aclose()
        await b.aclose()
        return a, b

    a, b = asyncio.run(main())
    assert a.counters["folds"] + b.counters["folds"] == 120 and a.counters["folds"] > 20 and b.counters["folds"] > 20
    c, tag = redis_module.client(), key_tag(pol.state.key_prefix)
    for dep in "pqr":
        assert_same_column(a.contextual, ref, dep)
        assert_same_column(b.contextual, ref, dep)
        values, count = redis_values(c, tag, dep)
        assert np.allclose(values, true_values(ref, dep), rtol=1e-9, atol=1e-9) and count == ref.count[ref.ids[dep]]
    assert a.counters["outages"] == b.counters["outages"] == 0


def test_large_folds_split_over_calls_equal_small_ones(redis_module, monkeypatch):
    """Folds of thousands of slots (a column past 256 records is unpacked and written whole, and
    a fold past _FOLD_RECORDS records is split over several calls) give what one process learns,
    as the small folds above do."""
    pol = policy(contextual_fold_ms=600000)
    rng = random.Random(21)
    vocabulary = [f"w{i}" for i in range(4000)]
    ref = ContextualModels()
    calls = []

    async def main():
        a, b = await started(pol, redis_module.url), await started(pol, redis_module.url)
        for st in (a, b):
            real = st._eval

            async def counted(name, keys, args, real=real):
                calls.append(len(args))
                return await real(name, keys, args)
            st._eval = counted
        tick = 0.0
        for r in (a, b, a, b):
            assert await r.fold()
            calls.clear()
            for _ in range(60):
                x = request_vector(RequestFeatures(text=" ".join(rng.choice(vocabulary) for _ in range(60))))
                dep, base, y = rng.choice("pqrs"), rng.uniform(0.3, 0.7), rng.random()
                tick += 1.0
                r.contextual.learn(dep, LearnContext(x, base, PV, NV), y, tick, 0.98)
                ref.learn(dep, LearnContext(x, base, PV, NV), y, tick, 0.98)
            assert await r.fold()
            assert len(calls) >= 2  # split
        assert await a.fold() and await b.fold()
        await a.aclose()
        await b.aclose()
        return a, b

    a, b = asyncio.run(main())
    c, tag = redis_module.client(), key_tag(pol.state.key_prefix)
    for dep in "pqrs":
        assert np.count_nonzero(ref.dp[:, ref.ids[dep]]) > 1000
        assert_same_column(a.contextual, ref, dep)
        assert_same_column(b.contextual, ref, dep)
        values, count = redis_values(c, tag, dep)
        assert np.allclose(values, true_values(ref, dep), rtol=1e-9, atol=1e-9) and count == ref.count[ref.ids[dep]]


def test_a_long_run_of_forgetting_rescales_alike_here_and_in_redis(redis_module):
    """Half-life 1000 ticks, 200 outcomes 800 ticks apart: each column's scale passes 1e-20 (it is
    rescaled to 1, here at a learn and in Redis at a fold) twice or more; the replicas still hold
    what one process holds, within 1e-9, and nothing overflows."""
    pol = policy(contextual_fold_ms=600000)
    rng = random.Random(31)
    gamma = 0.5 ** (1 / 1000)
    ref = ContextualModels()

    async def main():
        a, b = await started(pol, redis_module.url), await started(pol, redis_module.url)
        tick = 0.0
        for _ in range(200):
            r = rng.choice((a, b))
            x, base, y = outcome(rng)
            dep = rng.choice("pq")
            tick += 800.0
            assert await r.fold()
            r.contextual.learn(dep, LearnContext(x, base, PV, NV), y, tick, gamma)
            ref.learn(dep, LearnContext(x, base, PV, NV), y, tick, gamma)
            assert await r.fold()
            values, _ = redis_values(c, tag, dep)  # after every fold, a rescale's included
            assert np.allclose(values, true_values(ref, dep), rtol=1e-9, atol=1e-9)
        assert await a.fold() and await b.fold()
        await a.aclose()
        await b.aclose()
        return a, b

    c, tag = redis_module.client(), key_tag(pol.state.key_prefix)
    a, b = asyncio.run(main())
    for dep in "pq":
        assert 0.5 ** (800 * 100 / 1000) * 1e-20 < ref.scale[ref.ids[dep]] <= 1.0  # rescaled along the way
        assert np.isfinite(ref.hd).all() and np.abs(true_values(ref, dep)).max() > 1.0
        assert_same_column(a.contextual, ref, dep)
        assert_same_column(b.contextual, ref, dep)
        values, count = redis_values(c, tag, dep)
        assert np.allclose(values, true_values(ref, dep), rtol=1e-9, atol=1e-9) and count == ref.count[ref.ids[dep]]


# -- two OS processes at once ------------------------------------------------------------------------
def _learner(url, prefix, k, n, start_at):
    """One OS process: n outcomes on its own deployment ('own0' / 'own1') and n on the shared
    'both', folding in the background every 20 ms; then it waits for the other, reads the
    shared models once more and returns them (and the model its own deployment would have in a
    process alone)."""
    async def main():
        pol = policy(prefix, contextual_fold_ms=20, flush_ms=5)
        store = await started(pol, url)
        alone = ContextualModels()
        rng = random.Random(100 + k)
        while time.time() < start_at:
            await asyncio.sleep(0.001)
        for i in range(n):
            for dep in (f"own{k}", "both"):
                x, base, y = outcome(rng)
                store.contextual.learn(dep, LearnContext(x, base, PV, NV), y, 0.0, 1.0)
                if dep != "both":
                    alone.learn(dep, LearnContext(x, base, PV, NV), y, 0.0, 1.0)
            if i % 10 == 0:
                await asyncio.sleep(0.005)  # the background folds run mid-learning
        assert await store.fold()
        client = store._client
        await client.incr(f"{store.tag}test:done")
        for _ in range(6000):  # the other process's last fold (bounded waiting, nothing timed)
            if int(await client.get(f"{store.tag}test:done") or 0) == 2:
                break
            await asyncio.sleep(0.01)
        assert await store.fold()
        await store.aclose()
        return store.contextual.dump(), alone.dump(), store.counters
    return asyncio.run(main())


@pytest.fixture(scope="module")
def pool():
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as p:
        p.map(time.sleep, [0] * 2)
        yield p


def test_two_processes_learning_at_once_both_end_with_the_combined_model(redis_module, pool):
    prefix = f"pp{next(_prefixes)}:"
    n = 150
    start_at = time.time() + 0.5
    (d0, alone0, c0), (d1, alone1, c1) = pool.starmap(_learner, [(redis_module.url, prefix, k, n, start_at)
                                                                  for k in range(2)])
    m0, m1 = ContextualModels.load(d0), ContextualModels.load(d1)
    assert c0["folds"] > 2 and c1["folds"] > 2 and c0["outages"] == c1["outages"] == 0
    # both processes hold the same three columns, Redis's: the local copies are float32 (what a
    # decision reads), and a copy whose fold was the last keeps its own float32 sums rather than
    # reading Redis's float64 back, hence 1e-6 of the column's largest value (an h that crossed 0)
    c, tag = redis_module.client(), key_tag(prefix)
    for dep in ("own0", "own1", "both"):
        values, count = redis_values(c, tag, dep)
        for m in (m0, m1):
            got = true_values(m, dep)
            assert (np.abs(got - values).max(axis=0) <= 1e-6 * np.abs(values).max(axis=0) + 1e-12).all(), dep
            assert m.count[m.ids[dep]] == count, dep
    assert count == 2 * n  # 'both': every outcome of both processes, once
    # a deployment one process learned alone is what that process alone would have learned
    for dep, alone in (("own0", alone0), ("own1", alone1)):
        single = ContextualModels.load(alone)
        assert np.allclose(true_values(m0, dep), true_values(single, dep), rtol=1e-9, atol=1e-12), dep
        assert np.allclose(true_values(m1, dep), true_values(single, dep), rtol=1e-9, atol=1e-12), dep
    # the shared column holds both processes' words: what process 0 learned is in process 1's copy
    words0 = set(request_vector(RequestFeatures(text=" ".join(WORDS))).idx.tolist())
    k1 = m1.ids["both"]
    assert np.count_nonzero(m1.dp[sorted(words0), k1]) > len(WORDS)


# -- lost replies, outages, lost columns -------------------------------------------------------------
def learn_some(models, rng, n, tick0=0.0, gamma=0.99, deps="pq", *more):
    for i in range(n):
        x, base, y = outcome(rng)
        dep = deps[i % len(deps)]
        for m in (models, *more):
            m.learn(dep, LearnContext(x, base, PV, NV), y, tick0 + i, gamma)


def test_a_fold_whose_rows_are_out_of_contract_is_an_outage_not_an_exception(redis_module):
    """A column of the fold's answer with a name FoldRow does not read: fold() returns False (an
    outage, logged) instead of raising, and keeps its fold for the next call, which applies it."""
    pol = policy(contextual_fold_ms=600000)
    rng = random.Random(7)
    ref = ContextualModels()

    async def main():
        store = await started(pol, redis_module.url)
        learn_some(store.contextual, rng, 6, 1.0, 0.99, "pq", ref)
        real = store._eval

        async def bad_rows(name, keys, args):
            reply = await real(name, keys, args)
            if name != "contextual":
                return reply
            named = scripts.read_reply(scripts.FoldReply, reply, "contextual")
            return [b"status", named.status, b"rows", [[b"bogus", b"1"]]] if named.rows else reply

        store._eval = bad_rows
        failed = await store.fold()
        pending = store._ctx_unacked is not None
        store._eval = real
        store._retry_at = 0.0  # the backoff's wait, skipped
        applied = await store.fold()
        left = store._ctx_unacked
        await store.aclose()
        return failed, pending, applied, left

    failed, pending, applied, left = asyncio.run(main())
    assert (failed, pending, applied, left) == (False, True, True, None)


def test_a_fold_resent_after_a_lost_reply_is_counted_once(redis_module):
    pol = policy(contextual_fold_ms=600000)
    rng = random.Random(5)
    ref = ContextualModels()

    async def main():
        store = await started(pol, redis_module.url)
        learn_some(store.contextual, rng, 6, 1.0, 0.99, "pq", ref)
        real = store._eval
        lost = []

        async def reply_lost(name, keys, args):  # Redis runs the script; its reply never arrives
            reply = await real(name, keys, args)
            if name == "contextual" and not lost:
                lost.append(reply)
                raise ConnectionError("connection reset by peer (after the script ran)")
            return reply

        store._eval = reply_lost
        assert not await store.fold()  # an outage, as far as this process can tell
        assert lost and scripts.read_reply(scripts.FoldReply, lost[0], "contextual").status == b"ok"
        assert store._ctx_unacked is not None
        store._retry_at = 0.0  # the backoff's wait, skipped
        assert await store.fold()  # the same fold again: already applied, so skipped
        assert store._ctx_unacked is None
        other = await started(pol, redis_module.url)
        assert await other.fold()
        await store.aclose()
        await other.aclose()
        return store, other

    store, other = asyncio.run(main())
    c, tag = redis_module.client(), key_tag(pol.state.key_prefix)
    for dep in "pq":
        values, count = redis_values(c, tag, dep)
        assert count == 3 and np.allclose(values, true_values(ref, dep), rtol=1e-9, atol=1e-9)  # not twice
        assert_same_column(store.contextual, ref, dep)
        assert_same_column(other.contextual, ref, dep)
    assert c.hget(f"{tag}ctxa:p", store.process) == b"1"


@pytest.mark.proxy  # starts redis-server
def test_redis_down_keeps_what_was_learned_and_folds_it_once_when_back(tmp_path):
    srv = RedisServer(tmp_path / "r", aof=True).start()
    pol = policy(contextual_fold_ms=20, flush_ms=5)
    rng = random.Random(8)
    ref = ContextualModels()

    async def main():
        store = await started(pol, srv.url)
        learn_some(store.contextual, rng, 10, 1.0, 0.99, "pq", ref)
        assert await store.fold()
        srv.kill()
        learn_some(store.contextual, rng, 10, 11.0, 0.99, "pq", ref)
        assert not await store.fold()  # down: the fold is kept, to be sent again
        learn_some(store.contextual, rng, 10, 21.0, 0.99, "pq", ref)  # more, while it waits
        assert_same_column(store.contextual, ref, "p")  # decisions meanwhile: everything learned
        srv.start()
        for _ in range(400):  # reconnection (bounded waiting)
            store._retry_at = 0.0
            if await store.fold() and await store.fold():
                break
            await asyncio.sleep(0.05)
        other = await started(pol, srv.url)
        assert await other.fold()
        await store.aclose()
        await other.aclose()
        return store, other

    store, other = asyncio.run(main())
    c, tag = srv.client(), key_tag(pol.state.key_prefix)
    for dep in "pq":
        values, count = redis_values(c, tag, dep)
        assert count == 15 and np.allclose(values, true_values(ref, dep), rtol=1e-9, atol=1e-9)
        assert_same_column(store.contextual, ref, dep)
        assert_same_column(other.contextual, ref, dep)
    assert store.counters["outages"] == 1
    srv.stop()


@pytest.mark.proxy  # starts redis-server
def test_a_column_redis_lost_is_recreated_with_nothing_lost_or_counted_twice(tmp_path):
    """Redis restarted empty. Replica A, whose view lacks B's last fold, re-creates the column
    first; B sees its fold missing from it and sends it again; both end with every outcome once."""
    srv = RedisServer(tmp_path / "r").start()
    pol = policy(contextual_fold_ms=600000)  # A, not a background fold of B's, re-creates it
    rng = random.Random(9)
    ref = ContextualModels()

    async def main():
        a, b = await started(pol, srv.url), await started(pol, srv.url)
        learn_some(a.contextual, rng, 5, 1.0, 0.99, "p", ref)
        assert await a.fold() and await b.fold()
        learn_some(b.contextual, rng, 5, 6.0, 0.99, "p", ref)
        assert await b.fold()  # A has not read this one
        srv.kill()
        srv.wipe()
        srv.start()
        for st in (a, b):
            await st.refresh(force=False)  # the bandit state's re-seed (another subject)
        for _ in range(400):
            for st in (a, b):
                st._retry_at = 0.0
            if await a.fold():
                break
            await asyncio.sleep(0.05)
        assert a.contextual.count[a.contextual.ids["p"]] == 5  # A's view: its own five
        assert await b.fold()  # B reads the re-created column: its fold is missing, it is queued again
        assert await b.fold()  # ... and sent
        assert await a.fold()
        await a.aclose()
        await b.aclose()
        return a, b

    a, b = asyncio.run(main())
    c, tag = srv.client(), key_tag(pol.state.key_prefix)
    values, count = redis_values(c, tag, "p")
    assert count == 10 and np.allclose(values, true_values(ref, "p"), rtol=1e-9, atol=1e-9)
    assert_same_column(a.contextual, ref, "p")
    assert_same_column(b.contextual, ref, "p")
    srv.stop()


# -- through the engine ------------------------------------------------------------------------------
def test_an_engine_decides_with_the_shared_models_and_dumps_them(redis_module, tmp_path):
    """The engine over a Redis store decides with the store's models (no Redis call of its own)
    and teaches them; another replica reads them; the store's dump carries them (aisia explain)."""
    f = tmp_path / "p.yaml"
    f.write_text(textwrap.dedent("""
        version: 1
        defaults: false
        aliases:
          auto: {strategy: contextual, cost_weight: 0, latency_weight: 0}
    """))
    pol = load_policy([f])
    pol = pol.model_copy(update={"state": pol.state.model_copy(update={"backend": "redis",
                                                                        "key_prefix": f"e{next(_prefixes)}:"})})
    deps = [Deployment("a", "a", "openai/a", "openai"), Deployment("b", "b", "openai/b", "openai")]
    msgs = [{"role": "user", "content": "write a poem that rhymes"}]

    async def main():
        s1, s2 = await started(pol, redis_module.url), await started(pol, redis_module.url)
        engine = Engine(pol, clock=s1.clock, rng=random.Random(2), store=s1)
        assert engine.contextual is s1.contextual
        for _ in range(20):  # graded answers: a plain success teaches the per-prompt model nothing (docs/quality.md)
            d = engine.decide("auto", msgs, deps, reserve=False)
            engine.record(d, Outcome(d.deployment_id, success=True, latency_s=0.2, quality=0.9))
        await s1.flush()
        await s2.refresh()
        e2 = Engine(pol, clock=s2.clock, rng=random.Random(2), store=s2)
        p1 = {r.id: r.terms["predicted"] for r in engine.decide("auto", msgs, deps, reserve=False).scores}
        p2 = {r.id: r.terms["predicted"] for r in e2.decide("auto", msgs, deps, reserve=False).scores}
        dump = s2.dump()
        await s1.aclose()
        await s2.aclose()
        return p1, p2, dump, s1

    p1, p2, dump, s1 = asyncio.run(main())
    assert p1 == pytest.approx(p2, abs=1e-6)
    assert sum(ContextualModels.load(dump["contextual"]).count) == 20


def test_keys_are_the_documented_ones_with_their_ttls(redis_module):
    pol = policy("ctxdocs:", bandit_ttl_s=500, contextual_fold_ms=600000)
    rng = random.Random(3)

    async def main():
        store = await started(pol, redis_module.url)
        learn_some(store.contextual, rng, 4, 1.0, 0.99, "p")
        assert await store.fold()
        await store.aclose()
        return store

    store = asyncio.run(main())
    c = redis_module.client()
    keys = sorted(k.decode() for k in c.keys("{ctxdocs}:ctx*"))
    assert keys == ["{ctxdocs}:ctx:p", "{ctxdocs}:ctxa:p", "{ctxdocs}:ctxdeps", "{ctxdocs}:ctxw:p"]
    assert {k.decode() for k in c.hkeys("{ctxdocs}:ctx:p")} == {"scale", "tick", "count", "p0", "prior_mean",
                                                                "prior_count", "version", "created"}
    assert {k.decode(): v for k, v in c.hgetall("{ctxdocs}:ctxa:p").items()} == {store.process: b"1"}
    assert c.strlen("{ctxdocs}:ctxw:p") % 16 == 0 and c.strlen("{ctxdocs}:ctxw:p") <= 16 * 2 ** 14
    assert {m.decode() for m in c.smembers("{ctxdocs}:ctxdeps")} == {"p"}
    assert all(400 < c.ttl(k) <= 500 for k in keys)


def test_aisia_stats_shows_the_contextual_models(redis_module, tmp_path, monkeypatch, capsys):
    """From Redis (the store reads the shared models at start) and from a memory snapshot."""
    from aisia_plugin.cli import main
    from aisia_plugin.state.memory import MemoryState

    pol_file = tmp_path / "p.yaml"
    pol_file.write_text('state:\n  backend: redis\n  key_prefix: "ctxstats:"\n')
    monkeypatch.setenv("AISIA_POLICY", str(pol_file))
    monkeypatch.setenv("AISIA_REDIS_URL", redis_module.url)
    rng = random.Random(4)

    async def learn():
        store = RedisStore(load_policy())
        await store.start()
        learn_some(store.contextual, rng, 7, 1.0, 0.99, "pq")
        await store.aclose()  # folds

    asyncio.run(learn())
    assert main(["stats"]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("contextual model"):].splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows["p"][0] == "4" and rows["q"][0] == "3" and int(rows["p"][1]) > 0
    st = MemoryState()
    learn_some(st.contextual, rng, 2, 1.0, 0.99, "r")
    st.save_file(tmp_path / "s.json")
    monkeypatch.delenv("AISIA_POLICY")  # the memory store
    assert main(["stats", "--state", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing learned yet") and "contextual model" in out
    assert out.splitlines()[-1].split()[:2] == ["r", "2"]
