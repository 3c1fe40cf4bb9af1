"""State store benchmark: what a decision costs with the memory store and with the Redis store, and
how many outcomes per second one process records through Redis (figures only, nothing asserted).

    .venv/bin/python benchmarks/state_store.py [--calls 3000] [--outcomes 50000]

It starts its own redis-server on a free loopback port (tests/redis_server.py) and times, the cells
taking turns in one run, after an untimed warm-up, gc disabled during each loop (16 deployments, a
2 KB prompt, alias ``auto``, state warmed by 300 outcomes):

* ``memory``: ``Engine.decide`` on a MemoryState; ``redis cached``: ``await store.prepare(ids)``
  then ``Engine.decide`` on a RedisStore whose local copy is fresh (no I/O);
* ``redis cold, unchanged``: the same with ``state.cache_ttl_ms: 0``, so every decision refreshes:
  one EVALSHA round trip, answered by the version check alone (nothing written meanwhile);
  ``redis cold, changed``: another store writes one outcome before each decision (untimed), so
  each refresh reads every record back (the worst case of the one round trip);
* ``loopback round trip``: ``await client.ping()`` on the same client, the yardstick for "cold =
  memory + one round trip"; ``refresh script round trip``: the refresh's EVALSHA alone;
* recording: ``store.record_outcome`` for N outcomes (the background task writes them in batches),
  timed from the first record until Redis has applied the last (``aclose``), with one process and
  with two at once; then the records in Redis are counted (zero lost: count == N per process).

Targets (issue 9): cached within 2x of memory; cold = memory + one loopback round trip; at least
10,000 outcomes/s per process; zero lost."""

from __future__ import annotations

import asyncio
import multiprocessing
import subprocess
import sys
import tempfile
import time

import bench

sys.path.insert(0, str(bench.TESTS))  # the redis-server fixture module
from redis_server import RedisServer  # noqa: E402

from aisia_plugin.decision import Deployment  # noqa: E402
from aisia_plugin.engine import Engine  # noqa: E402
from aisia_plugin.learning import OutcomeRecord  # noqa: E402
from aisia_plugin.outcome import Outcome  # noqa: E402
from aisia_plugin.policy import load_policy  # noqa: E402
from aisia_plugin.state.memory import MemoryState  # noqa: E402
from aisia_plugin.state import scripts  # noqa: E402
from aisia_plugin.state.records import read_arm  # noqa: E402
from aisia_plugin.state.redis import RedisStore, key_tag  # noqa: E402

PROMPT = ("Write a Python function that merges two sorted lists and explain its complexity. " * 26)[:2048]
MESSAGES = [{"role": "user", "content": PROMPT}]
DEPLOYMENTS = [Deployment(id=f"dep-{k:02d}", model_name="g", model=f"p{k}/m", provider=f"p{k}",
                          input_cost_per_1m=0.2 + k * 0.3, output_cost_per_1m=0.4 + k * 0.5) for k in range(16)]
IDS = [d.id for d in DEPLOYMENTS]


def warm(engine: Engine, n: int = 300) -> None:
    for i in range(n):
        d = engine.decide("auto", MESSAGES, DEPLOYMENTS, reserve=False)
        engine.record(d, Outcome(d.deployment_id, success=(i % 17) != 0, latency_s=0.2 + (i % 7) * 0.1,
                                 status_code=None if (i % 17) else 503))


async def redis_engine(url: str, prefix: str, warm_outcomes: int = 0, **state):
    """A RedisStore under ``prefix`` (the shipped policy, ``state`` settings changed) and its Engine."""
    base = load_policy()
    pol = base.model_copy(update={"state": base.state.model_copy(update={"backend": "redis", "key_prefix": prefix,
                                                                          **state})})
    store = RedisStore(pol, url)
    await store.start()
    engine = Engine(pol, clock=store.clock, store=store)
    if warm_outcomes:
        warm(engine, warm_outcomes)
        await store.flush()
        await store.refresh()
    return store, engine


async def decision_costs(url: str, calls: int) -> dict:
    mem = MemoryState()
    mem_engine = Engine(load_policy(), store=mem)
    warm(mem_engine)

    cached, cached_engine = await redis_engine(url, "bench-cached:", 300, cache_ttl_ms=3_600_000)
    # the same records, read on every decision
    cold, cold_engine = await redis_engine(url, "bench-cached:", cache_ttl_ms=0)
    writer, writer_engine = await redis_engine(url, "bench-cached:", cache_ttl_ms=3_600_000)

    async def memory_step():
        mem_engine.decide("auto", MESSAGES, DEPLOYMENTS, reserve=False)

    async def cached_step():
        await cached.prepare(IDS, "auto")
        cached_engine.decide("auto", MESSAGES, DEPLOYMENTS, reserve=False)

    prepare_ns = []  # the cold decisions' prepare() alone (the rest is the decision)

    async def cold_step():
        t0 = time.perf_counter_ns()
        await cold.prepare(IDS, "auto")
        prepare_ns.append(time.perf_counter_ns() - t0)
        cold_engine.decide("auto", MESSAGES, DEPLOYMENTS, reserve=False)

    async def someone_writes():
        writer.record_outcome(OutcomeRecord("dep-03", writer.clock(), None, 0.8, 0.3, "auto", "coding"),
                              writer_engine.rules)
        await writer.flush()

    refreshes_before = cold.counters["refreshes"]
    cells = {"memory": memory_step, "redis cached": cached_step, "redis cold, unchanged": cold_step,
             "loopback round trip": cold._client.ping,  # and the refresh's EVALSHA alone:
             "refresh script round trip": lambda: cold._eval(
                 "refresh", [cold.key("tick")], [scripts.refresh_doc(tag=cold.tag, known_version=cold._version)])}
    results = {name: [] for name in [*cells, "redis cold, changed"]}
    for step in cells.values():  # warm-up, untimed
        for _ in range(200):
            await step()
    del prepare_ns[:]
    turns = 5  # round robin, so that a slow spell of the machine falls on every cell alike
    for _ in range(turns):
        for name, step in cells.items():
            results[name] += await bench.atime_calls(step, calls // turns)
        mark = len(prepare_ns)
        results["redis cold, changed"] += await bench.atime_calls(cold_step, calls // turns, between=someone_writes)
        del prepare_ns[mark:]  # keep the unchanged cell's
    cold_refreshes = cold.counters["refreshes"] - refreshes_before
    for st in (cached, cold, writer):
        await st.aclose()
    out = {name: bench.summarize(ns) for name, ns in results.items()}
    out["redis cold, unchanged: prepare() alone"] = bench.summarize(prepare_ns)
    out["_checks"] = {"cold refreshes per cold decision": round(cold_refreshes / (2 * (calls // turns) * turns + 200), 3),
                      "cached refreshes during timing": cached.counters["refreshes"]}
    return out


def record_worker(url: str, prefix: str, n: int, start_at: float) -> dict:
    async def main():
        store, engine = await redis_engine(url, prefix)
        rules = engine.rules
        deps = IDS[:4]
        while time.time() < start_at:
            await asyncio.sleep(0.001)
        t0, cpu0 = time.perf_counter(), time.process_time()
        for i in range(n):
            store.record_outcome(OutcomeRecord(deps[i % 4], store.clock(), None, 0.75, 0.3, "auto", "coding"), rules)
            if i % 256 == 0:
                await asyncio.sleep(0)  # a serving loop yields between requests: the flusher runs
        recorded = time.perf_counter() - t0
        await store.aclose()  # every outcome written
        total, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        return {"outcomes": n, "record_s": recorded, "until_written_s": total, "cpu_s": cpu,
                "batches": store.counters["batches"], "written": store.counters["outcomes_written"],
                "queue_full": store.counters["queue_full"]}
    return asyncio.run(main())


def _server_cpu(client) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def recording(url: str, n: int, client) -> dict:
    out = {}
    ctx = multiprocessing.get_context("spawn")
    for procs in (1, 2):
        prefix = f"bench-rec{procs}:"
        server_cpu0 = _server_cpu(client)
        with ctx.Pool(procs) as pool:
            start_at = time.time() + 1.0
            rows = pool.starmap(record_worker, [(url, prefix, n, start_at)] * procs)
        server_cpu = _server_cpu(client) - server_cpu0
        tag = key_tag(prefix)
        stored = sum(read_arm(client.hgetall(f"{tag}bandit:{d}")).count for d in IDS[:4])
        out[f"{procs} process{'es' if procs > 1 else ''}"] = {
            "per_process_outcomes_per_s": [round(r["outcomes"] / r["until_written_s"]) for r in rows],
            # CPU seconds, which other jobs on a shared machine do not inflate: the recording
            # process's own (local update, queue, batch building), and redis-server's (the script)
            "per_process_outcomes_per_cpu_s": [round(r["outcomes"] / r["cpu_s"]) for r in rows],
            "redis_server_cpu_us_per_outcome": round(server_cpu / (procs * n) * 1e6, 2),
            "record_call_us": [round(r["record_s"] / r["outcomes"] * 1e6, 2) for r in rows],
            "batches": [r["batches"] for r in rows],
            "recorded": procs * n, "stored_count": stored, "lost": procs * n - stored,
            "queue_full": sum(r["queue_full"] for r in rows)}
    return out


def render(res: dict) -> str:
    d, c = res["decision"], res["conditions"]
    lines = ["# State store benchmark", "",
             f"Generated by `benchmarks/state_store.py` on {c['cpu_count']} cores, Python {c['python']}, redis-server "
             f"{c['redis']}, loopback; 16 deployments, a 2 KB prompt, alias `auto` (ucb1); load average "
             f"{c['load_average_1_5_15']} before the run, {c['load_average_after']} after.", "",
             "## Decision cost (microseconds)", "",
             *bench.md_table(["path", "p50", "p90", "p99", "mean"], [
                 [name, d[name]["p50_us"], d[name]["p90_us"], d[name]["p99_us"], d[name]["mean_us"]]
                 for name in ("memory", "redis cached", "redis cold, unchanged", "redis cold, unchanged: prepare() alone",
                              "redis cold, changed", "loopback round trip", "refresh script round trip")])]
    t = res["targets"]
    lines += ["", f"- cached / memory (p50): **{t['cached_over_memory_p50']}x** (target: within 2x)",
              f"- cold unchanged - memory (p50): **{t['cold_minus_memory_p50_us']} us** against one loopback round trip "
              f"of {d['loopback round trip']['p50_us']} us (PING) or {d['refresh script round trip']['p50_us']} us "
              "(the refresh's EVALSHA alone) (target: memory + one round trip)",
              f"- cold changed - memory (p50): {t['cold_changed_minus_memory_p50_us']} us (the refresh reads every "
              "record back)", "", "## Outcome recording through Redis (batched)", "",
              *bench.md_table(["run", "outcomes/s per process (wall clock)", "per CPU second of the process",
                               "redis-server CPU per outcome (us)", "record_outcome call (us)", "batches", "recorded",
                               "in Redis", "lost"], [
                  [name, *(", ".join(map(str, r[k])) for k in ("per_process_outcomes_per_s",
                                                               "per_process_outcomes_per_cpu_s")),
                   r["redis_server_cpu_us_per_outcome"], ", ".join(map(str, r["record_call_us"])),
                   ", ".join(map(str, r["batches"])), r["recorded"], r["stored_count"], r["lost"]]
                  for name, r in res["recording"].items()])]
    lines += ["", f"Target: at least 10,000 outcomes/s per process, zero lost: "
              f"**{'met' if t['recording_target_met'] else 'missed'}** on the wall clock; "
              f"{'met' if t['recording_cpu_capacity_met'] else 'missed'} per CPU second of the recording process.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, calls=3000, outcomes=50000)
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    conditions = bench.conditions(redis=version, calls=args.calls, outcomes_per_process=args.outcomes)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(tmp) as srv:
        decision = asyncio.run(decision_costs(srv.url, args.calls))
        rec = recording(srv.url, args.outcomes, srv.client())
    mem, cached = decision["memory"]["p50_us"], decision["redis cached"]["p50_us"]
    met = lambda key: all(min(r[key]) >= 10_000 and r["lost"] == 0 for r in rec.values())  # noqa: E731
    targets = {
        "cached_over_memory_p50": round(cached / mem, 2),
        "cold_minus_memory_p50_us": round(decision["redis cold, unchanged"]["p50_us"] - mem, 2),
        "cold_changed_minus_memory_p50_us": round(decision["redis cold, changed"]["p50_us"] - mem, 2),
        "recording_target_met": met("per_process_outcomes_per_s"),
        "recording_cpu_capacity_met": met("per_process_outcomes_per_cpu_s"),
    }
    res = {"conditions": {**conditions, "load_average_after": bench.load_average()}, "decision": decision,
           "recording": rec, "targets": targets}
    md = render(res)
    bench.write_results("state_store", res, md, indent=1)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
