"""Hostile flood run: issue 35's acceptance 2 held for minutes instead of 1,000 requests. Two
proxies share one redis-server, with two tenant keys (LiteLLM's ``custom_auth``) and three
simulated upstreams behind three providers (tests/hostile_tenant.py), LiteLLM's own cooldown on as
it ships. Tenant A floods both
proxies with client-set timeouts, inputs that crash every upstream (a third of them allowed one
attempt) and failing streams (LiteLLM's repeated-chunk guard, a connection dropped midway), while
tenant B sends plain requests. It stops by itself and checks:

* every breaker CLOSED at every sample (every 5 s, read through each proxy) and at the end;
* tenant B served every request (200, a reply from an upstream);
* nothing learned against a deployment from tenant A: the failures counted in Redis stay 0.

    .venv/bin/python tests/long/hostile_flood.py                  # 5 minutes
    .venv/bin/python tests/long/hostile_flood.py --minutes 1

Results: ``benchmarks/results/hostile_flood.json`` and ``.md``. Loopback only; nothing downloaded."""

from __future__ import annotations

import itertools
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2] / "benchmarks")]
import bench  # noqa: E402
from hostile_tenant import (LITELLM_COOLDOWNS_ON, NAMES, REDIS_STATE, TENANT_A, TenantB, breakers,  # noqa: E402
                            flood_job, policy, post, start_tenant_proxy, upstream_specs, wait_answering)
from redis_server import RedisServer  # noqa: E402

from aisia_plugin.demo.upstream import start_upstreams, stop_upstreams  # noqa: E402

SAMPLE_S = 5.0


def run(minutes: float, workers: int, out_dir) -> dict:
    work = Path(tempfile.mkdtemp(prefix="aisia-hostile-"))
    for d in ("redis", "proxy-0", "proxy-1"):
        (work / d).mkdir()
    upstreams = {u.name: u for u in start_upstreams(upstream_specs())}
    redis = RedisServer(work / "redis").start()
    proxies = []
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            proxies = list(pool.map(lambda i: start_tenant_proxy(
                work / f"proxy-{i}", upstreams, policy(REDIS_STATE), env={"AISIA_REDIS_URL": redis.url},
                router_settings=LITELLM_COOLDOWNS_ON), range(2)))
        for p in proxies:  # each one answers before the flood
            wait_answering(p)
        statuses: Counter = Counter()
        samples, not_closed = [], []
        stop = threading.Event()
        counter = itertools.count()
        lock = threading.Lock()

        def tenant_a() -> None:
            while not stop.is_set():
                k = next(counter)
                body, headers = flood_job(k)
                try:
                    status = post(proxies[k % 2], TENANT_A, body, headers=headers).status_code
                except Exception:  # noqa: BLE001 - a dropped stream may end the response abruptly
                    status = -1
                with lock:
                    statuses[status] += 1

        started = time.monotonic()
        with TenantB(proxies) as b, ThreadPoolExecutor(max_workers=workers) as pool:
            b.served_some()
            flooders = [pool.submit(tenant_a) for _ in range(workers)]
            while time.monotonic() - started < minutes * 60:
                time.sleep(SAMPLE_S)
                for i, p in enumerate(proxies):
                    seen = breakers(p)
                    samples.append({"t_s": round(time.monotonic() - started, 1), "proxy": i,
                                    "breakers": {n: row[0] for n, row in seen.items()}})
                    if any(row[0] != "CLOSED" for row in seen.values()):
                        not_closed.append(samples[-1])
            stop.set()
            for f in flooders:
                f.result(timeout=120)
        took = time.monotonic() - started
        end = {i: breakers(p) for i, p in enumerate(proxies)}
        b_failed = [r for r in b.results if r not in NAMES]
        report = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": bench.conditions(),
            "minutes": minutes, "seconds": round(took, 1), "tenant_a_requests": sum(statuses.values()),
            "tenant_a_statuses": {str(k): v for k, v in sorted(statuses.items())},
            "tenant_b_requests": len(b.results), "tenant_b_failed": len(b_failed), "tenant_b_failures": b_failed[:10],
            "upstream_calls": {n: u.stats()["calls"] for n, u in upstreams.items()},
            "end": {str(i): {n: list(row) for n, row in rows.items()} for i, rows in end.items()},
            "samples": len(samples), "samples_not_closed": not_closed[:10],
        }
        report["checks"] = {
            "every breaker CLOSED at every sample": not not_closed,
            "every breaker CLOSED at the end": all(row[0] == "CLOSED" for rows in end.values() for row in rows.values()),
            "no failure learned": all(row[2] == 0 for rows in end.values() for row in rows.values()),
            "tenant B served every request": not b_failed and len(b.results) > 0,
        }
        bench.write_results("hostile_flood", report, render(report), out=out_dir)
        return report
    finally:
        for p in proxies:
            p.stop()
        redis.stop()
        stop_upstreams(upstreams.values())


def render(r: dict) -> str:
    ok = all(r["checks"].values())
    lines = ["# Hostile flood run", "", f"{r['date']}; {r['machine']}", "",
             f"- {r['seconds']} s, two proxies sharing one Redis, LiteLLM's cooldown on, as it ships (docs/failures.md)",
             f"- tenant A: {r['tenant_a_requests']} requests, statuses " +
             ", ".join(f"{k}: {v}" for k, v in r["tenant_a_statuses"].items()),
             f"- tenant B: {r['tenant_b_requests']} requests, **{r['tenant_b_failed']} failed**",
             "- upstream calls: " + ", ".join(f"{k} {v}" for k, v in r["upstream_calls"].items()),
             "- at the end, per proxy, deployment: (breaker, outcomes learned, failures learned): " +
             "; ".join(f"proxy {i}: {rows}" for i, rows in r["end"].items()),
             f"- breaker samples: {r['samples']}, not all CLOSED: {len(r['samples_not_closed'])}",
             "- checks: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in r["checks"].items()),
             f"- overall: {'PASS' if ok else 'FAIL'}"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, minutes=5.0, workers=(16, "tenant A's concurrent requests (default 16)"),
                           out=bench.RESULTS)
    report = run(args.minutes, int(args.workers), args.out)
    print(render(report))
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
