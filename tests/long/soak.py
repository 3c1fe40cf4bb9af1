"""Soak run: a LiteLLM proxy with two workers (``--num_workers 2``), the plugin and the Redis
store, under steady load on loopback, through an upstream outage, a Redis restart and a slow
Redis. It stops by itself and checks:

* zero client errors (every request answered 200 with a reply from some upstream);
* exact counts: for every deployment, the outcomes recorded in Redis (``count``) equal the calls
  its upstream received, and the upstreams' successes equal the requests sent (nothing lost,
  nothing counted twice, across both workers, the outage and the restart);
* memory: the resident set size of every process (proxy, its workers, redis-server) at the start
  of the timed run and at its end.

    .venv/bin/python tests/long/soak.py                 # 10 minutes at 10 requests/s
    .venv/bin/python tests/long/soak.py --minutes 2 --rate 5

The timeline (fractions of the run): from 20 % the cheapest upstream answers 500 for
min(60 s, 10 %) of the run; at 45 % redis-server is killed (SIGKILL) and restarted from its AOF
5 s later; from 65 % every Redis reply is delayed by ``--slow-redis-ms`` each way (a loopback TCP
proxy, ``tests/tcp_delay.py``) for min(60 s, 10 %). Client latencies are reported per phase.
Results: ``benchmarks/results/soak.json`` and ``soak.md``. Loopback only; nothing downloaded."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

# The tests' fixtures beside this folder (the plugin's proxy, redis-server, ...) and benchmarks/bench.py
# (LiteLLM kept offline, the machine's conditions, results files), imported first.
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2] / "benchmarks")]
import bench  # noqa: E402
from fault_helpers import start_plugin_proxy  # noqa: E402
from redis_server import RedisServer  # noqa: E402
from tcp_delay import DelayProxy  # noqa: E402

from aisia_plugin.demo.proxy import Proxy  # noqa: E402
from aisia_plugin.demo.upstream import parse_reply, start_upstreams, stop_upstreams  # noqa: E402

ALIAS = "soak/main"
UPSTREAMS = [
    {"name": "soak-a", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.2, "latency_ms": 5},
    {"name": "soak-b", "input_cost_per_1m": 1.0, "output_cost_per_1m": 2.0, "latency_ms": 15},
    {"name": "soak-c", "input_cost_per_1m": 2.0, "output_cost_per_1m": 4.0, "latency_ms": 30},
]
POLICY = f"""\
version: 1
defaults: false
state:
  backend: redis
circuit_breaker:
  failure_threshold: 3
  timeout_s: 5
  half_open_max_calls: 1
aliases:
  {ALIAS}:
    description: soak run
    strategy: ucb1
    candidates: {{models: [soak-a, soak-b, soak-c]}}
    failover: {{attempts: 2}}
"""
PROMPTS = ["Write a Python function that merges two sorted lists", "Traduire en anglais : bonjour tout le monde",
           "What is the integral of x^2 from 0 to 3?", "Hello, how are you today?",
           "Summarise the causes of the first world war in three sentences"]


def rss_mb(pid: int) -> float | None:
    """A process's resident set size (None once it has gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return None


def latency_ms(seconds: list[float]) -> dict:
    """Second samples as millisecond percentiles (requests over HTTP)."""
    if not seconds:
        return {}
    xs = sorted(seconds)
    pct = {f"p{q}_ms": round(1000 * bench.percentile(xs, q / 100), 1) for q in (50, 95, 99)}
    return {"n": len(xs), **pct, "max_ms": round(1000 * xs[-1], 1), "mean_ms": round(1000 * statistics.fmean(xs), 1)}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    except OSError:
        return "?"


def memory_snapshot(proxy: Proxy, redis: RedisServer) -> list[dict]:
    """The resident set size of the proxy's processes (parent, workers, helpers) and redis-server."""
    out = []
    for pid in bench.process_tree(proxy.pid):
        role = ("proxy parent" if pid == proxy.pid else "resource tracker" if "resource_tracker" in _cmdline(pid)
                else "proxy worker")
        out.append({"pid": pid, "role": role, "rss_mb": rss_mb(pid)})
    if redis.proc is not None:  # None while it is killed
        out.append({"pid": redis.proc.pid, "role": "redis-server", "rss_mb": rss_mb(redis.proc.pid)})
    return out


# -- load ------------------------------------------------------------------------------------------
class Load:
    """Requests at a steady rate from a thread pool; each thread keeps a connection for a few
    requests, then opens a new one (the kernel spreads new connections over the workers)."""

    def __init__(self, proxy: Proxy, rate: float, threads: int = 16):
        self.proxy, self.rate, self.pool, self.local = proxy, rate, ThreadPoolExecutor(threads), threading.local()
        self.lock, self.results, self.phase, self.sent = threading.Lock(), [], "steady", 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.pool.shutdown(wait=True)

    def _run(self):
        t0 = time.monotonic()
        while not self._stop.wait(max(0.0, t0 + self.sent / self.rate - time.monotonic())):
            self.pool.submit(self._one, self.sent, self.phase)
            self.sent += 1

    def _client(self) -> httpx.Client:
        c, n = getattr(self.local, "client", None), getattr(self.local, "n", 0)
        if c is None or n >= 25:
            if c is not None:
                c.close()
            c, n = httpx.Client(base_url=self.proxy.url, headers=self.proxy.headers, timeout=60), 0
            self.local.client = c
        self.local.n = n + 1
        return c

    def _one(self, i: int, phase: str):
        stream = i % 5 == 0
        body = {"model": ALIAS, "messages": [{"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} (#{i})"}],
                "stream": stream}
        started = time.monotonic()
        status, served, error = None, None, None
        try:
            c = self._client()
            if stream:
                with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    status, data = r.status_code, [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
                    done = "[DONE]" in (d.strip() for d in data)
                    text = "".join((ch.get("delta") or {}).get("content") or "" for d in data if d.strip() != "[DONE]"
                                   for ch in json.loads(d).get("choices") or ())
                    served = parse_reply(text)[0] if done else None
                    if status == 200 and not done:
                        error = "stream ended without [DONE]"
            else:
                r = c.post("/v1/chat/completions", json=body)
                status = r.status_code
                if status == 200:
                    served = parse_reply(r.json()["choices"][0]["message"]["content"])[0]
                else:
                    error = r.text[:300]
        except Exception as exc:  # noqa: BLE001 - every failure is a client error to report
            error = f"{type(exc).__name__}: {exc}"[:300]
            self.local.client = None
        latency = time.monotonic() - started
        ok = status == 200 and served is not None and error is None
        with self.lock:
            self.results.append({"i": i, "phase": phase, "latency_s": latency, "ok": ok, "status": status,
                                 "served": served, "stream": stream, "error": None if ok else (error or "no reply")})


def serving_workers(proxy: Proxy, limit_s: float = 180.0) -> set:
    """The worker processes answering (GET /aisia/policy names its worker; a new connection each
    time), once two distinct ones did or the wait ran out."""
    seen: set = set()
    deadline = time.monotonic() + limit_s
    while len(seen) < 2 and time.monotonic() < deadline:
        try:
            with httpx.Client(base_url=proxy.url, headers=proxy.headers, timeout=30) as c:
                seen.add(c.get("/aisia/policy").json()["worker_pid"])
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    return seen


# -- the run ---------------------------------------------------------------------------------------
def redis_counts(redis: RedisServer, names) -> dict:
    c = redis.client()
    try:
        return {n: int(c.hget("{aisia}:bandit:" + n, "count") or 0) for n in names}
    finally:
        c.close()


def run(minutes: float, rate: float, slow_redis_ms: float, out_dir: Path, log=print) -> dict:
    total = minutes * 60.0
    fail_at, fail_s = 0.2 * total, min(60.0, 0.1 * total)
    restart_at, down_s = 0.45 * total, 5.0
    slow_at, slow_s = 0.65 * total, min(60.0, 0.1 * total)
    work = Path(tempfile.mkdtemp(prefix="aisia-soak-"))
    redis = RedisServer(work / "redis", aof=True).start()
    delay = DelayProxy(redis.port).start()
    running = start_upstreams(UPSTREAMS)
    ups, proxy = {u.name: u for u in running}, None
    events = []

    def note(what):
        events.append({"t_s": round(time.monotonic() - t0, 1), "event": what})
        log(f"[{events[-1]['t_s']:7.1f} s] {what}")

    try:
        started = time.monotonic()
        proxy = start_plugin_proxy(work, ups, POLICY, env={"AISIA_REDIS_URL": f"redis://127.0.0.1:{delay.port}/0"},
                                   num_workers=2)
        log(f"proxy with 2 workers up in {time.monotonic() - started:.1f} s at {proxy.url} (log: {proxy.log_path})")
        # Warm-up, not counted in the timed run's latencies but in the exact counts.
        with httpx.Client(base_url=proxy.url, headers=proxy.headers, timeout=60) as c:
            for k in range(10):
                r = c.post("/v1/chat/completions", json={"model": ALIAS, "messages": [
                    {"role": "user", "content": f"warm-up {k}"}]})
                if r.status_code != 200:
                    raise RuntimeError(f"warm-up request failed: {r.status_code} {r.text[:300]}")
        workers = serving_workers(proxy)
        log(f"workers answering: {sorted(workers)}")
        if len(workers) < 2:
            raise RuntimeError(f"only {len(workers)} proxy worker answered within the wait: {proxy.log_tail()}")
        mem_start = memory_snapshot(proxy, redis)
        t0 = time.monotonic()
        load = Load(proxy, rate)
        note(f"load started: {rate:g} requests/s for {minutes:g} min")
        plan = [(fail_at, "soak-a answers 500", "upstream_down", lambda: ups["soak-a"].control(mode="error", status=500)),
                (fail_at + fail_s, "soak-a repaired", "steady", lambda: ups["soak-a"].control(mode="ok")),
                (restart_at, "redis-server killed (SIGKILL)", "redis_restart", redis.kill),
                (restart_at + down_s, "redis-server restarted from its AOF", None, redis.start),
                (slow_at, f"Redis replies delayed {slow_redis_ms:g} ms each way", "redis_slow",
                 lambda: delay.set_delay(slow_redis_ms / 1000.0)),
                (slow_at + slow_s, "Redis at full speed", "steady", lambda: delay.set_delay(0)),
                (total, None, None, None)]
        samples = []  # the workers' RSS every 30 s: is the growth levelling off?
        for at, what, phase, act in plan:
            while time.monotonic() - t0 < at:
                if time.monotonic() - t0 >= 30.0 * len(samples):
                    samples.append({"t_s": round(time.monotonic() - t0), "sent": load.sent,
                                    "rss_mb": [m["rss_mb"] for m in memory_snapshot(proxy, redis)
                                               if m["role"] == "proxy worker"]})
                time.sleep(0.2)
            if act is not None:
                act()
                load.phase = phase or load.phase
                note(what)
        load.stop()
        note(f"load stopped: {load.sent} requests sent")
        mem_end = memory_snapshot(proxy, redis)
        # Every outcome reaches Redis within a flush period or so; wait for the counts to match.
        names, deadline = list(ups), time.monotonic() + 60
        while (calls := {n: ups[n].stats()["calls"] for n in names}) != (counts := redis_counts(redis, names)) \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        with httpx.Client(base_url=proxy.url, headers=proxy.headers, timeout=60) as c:
            stats = c.get("/admin/bandit/stats").json()
        workers_end = serving_workers(proxy)
        logs = proxy.logs()
    finally:
        if proxy is not None:
            proxy.stop()
        stop_upstreams(running)
        delay.stop()
        redis.stop()

    results, warmup = load.results, 10
    errors = [r for r in results if not r["ok"]]
    succeeded = {n: ups[n].stats()["succeeded"] for n in names}
    checks = {
        "zero_client_errors": not errors,
        "counts_equal_upstream_calls": counts == calls,
        "upstream_successes_equal_requests": sum(succeeded.values()) == len(results) + warmup,
        "every_request_answered": len(results) == load.sent,
        "two_workers_throughout": len(workers) == 2 and workers == workers_end,
    }
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": bench.conditions(),
        "minutes": minutes, "rate_per_s": rate, "slow_redis_ms": slow_redis_ms,
        "requests": len(results), "warmup_requests": warmup, "ok": len(results) - len(errors), "client_errors": len(errors),
        "error_samples": errors[:10], "streams": sum(r["stream"] for r in results),
        "served_by": {n: sum(1 for r in results if r["served"] == n) for n in names}, "upstream_calls": calls, "upstream_succeeded": succeeded, "redis_counts": counts,
        "breakers_at_end": {n: (stats.get(n) or {}).get("breaker") for n in names},
        "workers_at_start": sorted(workers), "workers_at_end": sorted(workers_end),
        "worker_restarts": logs.count("died"),
        "latency_by_phase": {ph: latency_ms([r["latency_s"] for r in results if r["phase"] == ph])
                             for ph in ("steady", "upstream_down", "redis_restart", "redis_slow")},
        "events": events, "memory": {"start": mem_start, "end": mem_end, "worker_samples": samples}, "checks": checks,
        "log_warnings": sum(1 for line in logs.splitlines() if "WARNING" in line or "ERROR" in line),
        "redis_outage_warnings": logs.count("unreachable (") , "redis_back_lines": logs.count("reachable again"),
    }
    bench.write_results("soak", report, render(report), out=out_dir)
    return report


def render(r: dict) -> str:
    ok = all(r["checks"].values())
    lines = [f"# Soak run ({r['date']})", "",
             f"`tests/long/soak.py --minutes {r['minutes']:g} --rate {r['rate_per_s']:g}`: a LiteLLM proxy with two "
             f"workers, the plugin and the Redis store (AOF), {r['machine']['cpu_count']} CPUs shared with other jobs, "
             f"Python {r['machine']['python']}; loopback only.", "",
             f"- requests: {r['requests']} timed (+{r['warmup_requests']} warm-up), {r['streams']} of them streamed; "
             f"answered 200: {r['ok']}; **client errors: {r['client_errors']}**",
             f"- served by: " + ", ".join(f"{k} {v}" for k, v in r["served_by"].items()),
             f"- upstream calls (attempts): " + ", ".join(f"{k} {v}" for k, v in r["upstream_calls"].items()),
             f"- outcomes counted in Redis (`count`): " + ", ".join(f"{k} {v}" for k, v in r["redis_counts"].items()),
             f"- checks: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in r["checks"].items()),
             f"- Redis outage warnings in the proxy log: {r['redis_outage_warnings']} "
             f"(one per worker and outage), back-again lines: {r['redis_back_lines']}",
             f"- proxy workers answering at the start {r['workers_at_start']} and at the end {r['workers_at_end']}; "
             f"worker deaths in the log: {r['worker_restarts']}",
             f"- overall: {'PASS' if ok else 'FAIL'}", "", "## Timeline", ""]
    lines += [f"- {e['t_s']:.0f} s: {e['event']}" for e in r["events"]]
    start, end = ({m["pid"]: m for m in r["memory"][k]} for k in ("start", "end"))
    lines += ["", "## Client latency by phase (ms)", "", *bench.md_table(["phase", "n", "p50", "p95", "p99", "max"], [
        [ph, p["n"], p["p50_ms"], p["p95_ms"], p["p99_ms"], p["max_ms"]] for ph, p in r["latency_by_phase"].items() if p],
        "---:"), "", "## Resident memory (MB), at the start of the timed run and at its end", "",
        *bench.md_table(["pid", "process", "start", "end"], [
            [pid, (start.get(pid) or end[pid])["role"],
             *(x if (x := side.get(pid, {}).get("rss_mb", "-")) is not None else "-" for side in (start, end))]
            for pid in list(start) + [p for p in end if p not in start]])]
    samples = r["memory"].get("worker_samples") or []
    if samples:
        lines += ["", "Workers' RSS during the run (MB, every 30 s): "
                  + "; ".join(f"{x['t_s']} s ({x['sent']} sent): {', '.join(str(v) for v in x['rss_mb'])}"
                              for x in samples)]
    if r["error_samples"]:
        lines += ["", "## Client errors (first 10)", ""]
        lines += [f"- #{e['i']} ({e['phase']}): {e['status']} {e['error']}" for e in r["error_samples"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, minutes=10.0, rate=(10.0, "requests per second (default 10)"),
                           slow_redis_ms=(100.0, "delay of each Redis reply, each way"), out=bench.RESULTS)
    report = run(args.minutes, args.rate, args.slow_redis_ms, args.out)
    print(render(report))
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
