"""The long fuzz run (issue 13): hypothesis with a large budget over feature extraction, domain
detection, the decision with outcomes recorded, and the plugin's admin and feedback endpoints on a
real proxy. atheris does not install here (no wheel in this machine's package index), so this is
hypothesis; CI runs the short property tests (tests/test_hostile_requests.py, whose strategies
this reuses).

    .venv/bin/python tests/long/fuzz.py                       # 20,000 examples per target, 2,000 HTTP
    .venv/bin/python tests/long/fuzz.py --examples 2000 --http-examples 300

A target fails when an exception escapes, or when one example takes longer than --max-example-s
(no unbounded time). The peak RSS of this process is reported (no unbounded memory). Results:
benchmarks/results/fuzz.json and fuzz.md. Loopback only."""

from __future__ import annotations

import json
import random
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# The tests' fixtures beside this folder (the plugin's proxy, redis-server, ...) and benchmarks/bench.py
# (LiteLLM kept offline, the machine's conditions, results files), imported first.
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2] / "benchmarks")]
import bench  # noqa: E402
from fault_helpers import start_plugin_proxy  # noqa: E402
from test_hostile_requests import ALIASES, POOL, messages, scalar, text, tools  # noqa: E402

from aisia_plugin.demo.upstream import start_upstreams, stop_upstreams  # noqa: E402
from aisia_plugin.engine import Engine  # noqa: E402
from aisia_plugin.features import extract_features  # noqa: E402
from aisia_plugin.outcome import Outcome  # noqa: E402
from aisia_plugin.policy import detect_domain, load_policy  # noqa: E402


class Target:
    """One fuzz target: its examples counted and timed, each failing above ``limit_s``."""

    def __init__(self, name, limit_s):
        self.name, self.limit_s, self.examples, self.slowest_s = name, limit_s, 0, 0.0

    def timed(self, fn):
        t = time.perf_counter()
        fn()
        took = time.perf_counter() - t
        self.examples += 1
        self.slowest_s = max(self.slowest_s, took)
        if took > self.limit_s:
            raise AssertionError(f"one example took {took:.3f} s (limit {self.limit_s} s)")

    def run(self, test) -> dict:
        """Run the hypothesis test: the report, with the traceback of an escaping exception."""
        failure, started = None, time.monotonic()
        try:
            test()
        except Exception:  # noqa: BLE001 - the failure is the result
            failure = traceback.format_exc(limit=6)[-3000:]
        return {"target": self.name, "examples": self.examples, "slowest_example_ms": round(1000 * self.slowest_s, 2),
                "seconds": round(time.monotonic() - started, 1), "failure": failure}


def in_process(n: int, limit_s: float) -> list[dict]:
    policy = load_policy()
    engine = Engine(policy, clock=lambda: 1000.0, rng=random.Random(0))
    cfg = settings(max_examples=n, deadline=None, database=None, derandomize=False,
                   suppress_health_check=list(HealthCheck))
    t1 = Target("features.extract_features", limit_s)

    @cfg
    @given(msgs=messages, tls=tools, modalities=st.none() | st.lists(scalar, max_size=3))
    def features(msgs, tls, modalities):
        t1.timed(lambda: extract_features(msgs, tls, modalities))

    t2 = Target("policy.detect_domain (the shipped policy's DomainDetector)", limit_s)

    @cfg
    @given(s=text | st.text(max_size=5000) | st.binary(max_size=2000).map(lambda b: b.decode("utf-8", "replace")))
    def domain(s):
        t2.timed(lambda: detect_domain(s))

    t3 = Target("engine.decide + record", limit_s)

    @cfg
    @given(msgs=messages, tls=tools, alias=st.sampled_from(ALIASES), ok=st.booleans(),
           status=st.sampled_from([None, 200, 400, 401, 413, 429, 500, 503, 0, -1, 99999]),
           latency=st.none() | st.floats(allow_nan=True, allow_infinity=True),
           cost=st.none() | st.floats(allow_nan=True, allow_infinity=True),
           quality=st.none() | st.floats(allow_nan=True, allow_infinity=True),
           retry_after=st.none() | st.floats(allow_nan=True, allow_infinity=True))
    def decide(msgs, tls, alias, ok, status, latency, cost, quality, retry_after):
        def once():
            d = engine.decide(alias, msgs, POOL, tools=tls)
            assert d.deployment_id in {p.id for p in POOL} or d.refused
            if not d.refused:
                engine.record(d, Outcome(d.deployment_id, ok, latency_s=latency, status_code=status, cost_usd=cost,
                                         quality=quality, retry_after_s=retry_after))
        t3.timed(once)
    return [t1.run(features), t2.run(domain), t3.run(decide)]


def http(n: int, limit_s: float) -> list[dict]:
    running = start_upstreams([{"name": "fz-a", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.1},
                               {"name": "fz-b", "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0}])
    proxy = start_plugin_proxy(Path(tempfile.mkdtemp(prefix="aisia-fuzz-")), {u.name: u for u in running},
                               "version: 1\naliases:\n  fz/main:\n    description: fuzz\n    strategy: cost\n"
                               "    candidates: {models: [fz-a, fz-b]}\n")
    out = []
    try:
        c = httpx.Client(base_url=proxy.url, headers=proxy.headers, timeout=60)
        ids = []
        for k in range(20):
            r = c.post("/v1/chat/completions", json={"model": "fz/main", "messages": [{"role": "user", "content": f"q{k}"}]})
            ids.append(r.headers.get("x-aisia-request-id", "none"))
        json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | text,
                                  lambda i: st.lists(i, max_size=4) | st.dictionaries(text, i, max_size=4), max_leaves=20)
        body = (st.fixed_dictionaries({}, optional={"request_id": st.sampled_from(ids) | json_value,
                                                    "score": json_value, "deployment_id": json_value})
                | json_value)
        cfg = settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        statuses: dict = {}

        def check(r):
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code < 500, f"{r.status_code}: {r.text[:300]}"

        t = Target("POST /aisia/feedback, /admin/bandit/reset; GET /aisia/explain (real proxy)", limit_s)

        @cfg
        @given(b=body, raw=st.none() | st.binary(max_size=300), limit=st.none() | text | st.integers(),
               path=st.sampled_from(["/aisia/feedback", "/admin/bandit/reset"]))
        def endpoints(b, raw, limit, path):
            def once():
                if raw is not None:
                    check(c.post(path, content=raw))
                else:
                    check(c.post(path, content=json.dumps(b, allow_nan=True).encode()))
                check(c.get("/aisia/explain", params={} if limit is None else {"limit": str(limit)[:100].encode("utf-8", "replace").decode()}))
            t.timed(once)
        report = t.run(endpoints)
        report["statuses"] = {str(k): v for k, v in sorted(statuses.items())}
        report["proxy_alive"] = proxy.running() and c.get("/health/liveliness").status_code == 200
        if not report["proxy_alive"] and not report["failure"]:
            report["failure"] = "the proxy stopped answering"
        out.append(report)
        c.close()
    finally:
        proxy.stop()
        stop_upstreams(running)
    return out


def render(r: dict) -> str:
    lines = [f"# Fuzz run ({r['date']})", "",
             f"`tests/long/fuzz.py --examples {r['examples']} --http-examples {r['http_examples']}`: hypothesis "
             f"(atheris: {r['atheris']}), {r['machine']['cpu_count']} CPUs shared with other jobs, Python "
             f"{r['machine']['python']}; an example fails above {r['max_example_s']} s.", "",
             *bench.md_table(["target", "examples", "slowest example (ms)", "seconds", "result"], [
                 [t["target"], t["examples"], t["slowest_example_ms"], t["seconds"], "FAIL" if t["failure"] else "pass"]
                 for t in r["targets"]], "---:")]
    lines += ["", f"Peak RSS of the fuzzing process: {r['peak_rss_mb']} MB."]
    for t in r["targets"]:
        if "statuses" in t:
            lines.append(f"HTTP statuses seen: {t['statuses']} (never a 5xx; the proxy alive at the end: {t['proxy_alive']}).")
        if t["failure"]:
            lines += ["", f"## {t['target']}", "", "```", t["failure"], "```"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, examples=20_000, http_examples=2_000, max_example_s=2.0, out=bench.RESULTS)
    try:
        import atheris  # noqa: F401
        atheris_state = "installed (not used: the hypothesis targets are the documented run)"
    except ImportError:
        atheris_state = "not installable here"
    targets = in_process(args.examples, args.max_example_s)
    if args.http_examples:
        targets += http(args.http_examples, args.max_example_s * 5)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": bench.conditions(),
              "examples": args.examples, "http_examples": args.http_examples, "max_example_s": args.max_example_s,
              "atheris": atheris_state, "targets": targets,
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)}
    bench.write_results("fuzz", report, render(report), out=args.out)
    print(render(report))
    return 1 if any(t["failure"] for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
