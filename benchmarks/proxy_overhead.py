"""What the plugin adds to a LiteLLM proxy's request path, measured end to end over HTTP.

One LiteLLM proxy with the plugin and one instant simulated upstream (its own process, so that it
does not share this process's interpreter with the load generator). Requests go either to a
plain model name (`bench-plain`, LiteLLM's simple-shuffle over one deployment: the plugin only
looks at the request and lets it through) or to an alias (`auto/bench`) whose only candidate is
that same deployment (the plugin's whole path: features, domain, breaker, strategy, the
deployment filter, learning from the outcome, the x-aisia-* headers). A second proxy without any
callback serves the same plain name, the baseline of plain LiteLLM; a third one has an empty
CustomLogger as its callback, which separates what LiteLLM itself spends on having a callback
(its logging payloads, the hooks it awaits) from what the plugin's code spends.

* Sequential: one client, requests interleaved alias / plain (and plain on the proxy without the
  plugin); the median latency of each, and the median of the paired differences.
* Concurrent: 32 clients in closed loop, blocks of a few seconds alternating between the arms;
  throughput per block, the median over blocks, and the ratios. The proxy's own CPU time per
  request over the blocks (from /proc) is reported too: on a machine shared with other work, the
  wall-clock figures move with the load, the CPU time much less.

    .venv/bin/python benchmarks/proxy_overhead.py            # ~5 minutes
    .venv/bin/python benchmarks/proxy_overhead.py --quick    # a smoke run

Writes benchmarks/results/proxy_overhead.json and .md (the conditions are in both)."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench
import httpx

from aisia_plugin.demo.proxy import Proxy, deployment

PLAIN, ALIAS = "bench-plain", "auto/bench"
TARGET_ADDED_MS = 0.3
TARGET_THROUGHPUT_RATIO = 0.95
PROMPT = "Write a Python function that merges two sorted lists"
# An empty callback for the third proxy (it runs inside that proxy, which has LiteLLM).
NOOP_CALLBACK = """from litellm.integrations.custom_logger import CustomLogger


class NoopLogger(CustomLogger):
    pass


noop = NoopLogger()
"""
POLICY = """# The benchmark's alias: its only candidate is the plain model's deployment.
version: 1
aliases:
  auto/bench:
    description: The proxy overhead benchmark's alias (one candidate, the plain model's deployment).
    strategy: ucb1
    candidates:
      models: [bench-plain]
"""


def bench_proxy(prefix: str, **env):
    """A work folder, the instant upstream, the plain proxy config and the proxy with the plugin
    (not started) serving the plain model and the alias (also benchmarks/profile_proxy.py's)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    upstream = _UpstreamProcess()
    (work / "bench-policy.yaml").write_text(POLICY)
    base = {"model_list": [deployment(PLAIN, upstream.base_url, id="bench-1")],
            "router_settings": {"routing_strategy": "simple-shuffle"}}
    proxy = Proxy({**base, "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}}, work / "plugin",
                  env={"AISIA_POLICY": str(work / "bench-policy.yaml"), **env})
    return work, upstream, base, proxy


class _UpstreamProcess:
    """The instant upstream, run by the upstream module's command line."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "aisia_plugin.demo.upstream", "--json", "--spec",
                                      "instant:latency_ms=0,reply_words=8"], cwd=str(bench.REPO),
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the simulated upstream did not start")
        self.base_url = json.loads(line)["base_url"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _body(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16}


def _check(client: httpx.Client, proxy: Proxy, model: str) -> dict:
    r = client.post(proxy.base_url + "/chat/completions", json=_body(model), headers=proxy.headers)
    if r.status_code != 200:
        raise SystemExit(f"{model} on {proxy.url}: HTTP {r.status_code}: {r.text[:300]}\n{proxy.log_tail()}")
    return {k: v for k, v in r.headers.items() if k.startswith(("x-aisia", "x-litellm-model-id"))}


def sequential(arms, n: int, warmup: int) -> dict:
    """`arms`: name -> (proxy, model). Requests interleaved arm by arm, `n` rounds."""
    clients = {name: httpx.Client(timeout=30) for name in arms}
    try:
        for _ in range(warmup):
            for name, (proxy, model) in arms.items():
                clients[name].post(proxy.base_url + "/chat/completions", json=_body(model), headers=proxy.headers)
        times = {name: [] for name in arms}
        failures = {name: 0 for name in arms}
        for i in range(n):
            order = list(arms) if i % 2 == 0 else list(reversed(arms))  # no arm always goes first
            for name in order:
                proxy, model = arms[name]
                t0 = time.perf_counter()
                r = clients[name].post(proxy.base_url + "/chat/completions", json=_body(model), headers=proxy.headers)
                times[name].append((time.perf_counter() - t0) * 1000.0)
                if r.status_code != 200:
                    failures[name] += 1
        return {"times": times, "failures": failures}
    finally:
        for c in clients.values():
            c.close()


async def _block(proxy: Proxy, model: str, concurrency: int, seconds: float) -> tuple[int, int, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    done = failed = 0
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()

        async def worker():
            nonlocal done, failed
            while time.perf_counter() < deadline:
                r = await client.post(proxy.base_url + "/chat/completions", json=_body(model), headers=proxy.headers)
                done += 1
                failed += r.status_code != 200

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return done, failed, elapsed


# After a block, the proxy may still be finishing its callbacks' work for the last responses.
_SETTLE_S = 0.5


def concurrent(arms, concurrency: int, blocks: int, seconds: float) -> dict:
    rps = {name: [] for name in arms}
    cpu = {name: 0.0 for name in arms}
    requests = {name: 0 for name in arms}
    failures = {name: 0 for name in arms}
    for b in range(blocks):
        order = list(arms) if b % 2 == 0 else list(reversed(arms))
        for name in order:
            proxy, model = arms[name]
            cpu0 = bench.cpu_seconds(proxy.pid)
            done, failed, elapsed = asyncio.run(_block(proxy, model, concurrency, seconds))
            time.sleep(_SETTLE_S)
            cpu[name] += bench.cpu_seconds(proxy.pid) - cpu0
            requests[name] += done
            rps[name].append(done / elapsed)
            failures[name] += failed
    cpu_ms = {name: 1000.0 * cpu[name] / max(1, requests[name]) for name in arms}
    return {"rps": rps, "failures": failures, "cpu_ms_per_request": cpu_ms}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2000, help="sequential rounds (one request per arm each)")
    p.add_argument("--blocks", type=int, default=10, help="concurrent blocks per arm")
    p.add_argument("--block-seconds", type=float, default=3.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--quick", action="store_true", help="a smoke run (few requests; figures not meaningful)")
    p.add_argument("--no-write", action="store_true", help="print the results, do not write benchmarks/results")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.blocks, args.block_seconds, args.warmup = 100, 2, 1.0, 20
    load_start = bench.load_average()

    work, upstream, base, with_plugin = bench_proxy("aisia-bench-")
    without = Proxy(base, work / "plain")
    (work / "noop_callback").mkdir()
    (work / "noop_callback" / "aisia_bench_noop.py").write_text(NOOP_CALLBACK)
    noop = Proxy({**base, "litellm_settings": {"callbacks": ["aisia_bench_noop.noop"]}}, work / "noop",
                 env={"PYTHONPATH": str(work / "noop_callback")})
    proxies = (with_plugin, without, noop)
    try:
        print("starting three proxies ...", file=sys.stderr, flush=True)
        for proxy in proxies:
            proxy.start()
        with httpx.Client(timeout=30) as c:
            alias_headers = _check(c, with_plugin, ALIAS)
            _check(c, with_plugin, PLAIN)
            _check(c, without, PLAIN)
            _check(c, noop, PLAIN)
        if alias_headers.get("x-litellm-model-id") != "bench-1" or "x-aisia-alias" not in alias_headers:
            raise SystemExit(f"the alias did not go through the plugin to bench-1: {alias_headers}")
        arms = {"alias": (with_plugin, ALIAS), "plain": (with_plugin, PLAIN), "no_plugin": (without, PLAIN),
                "noop_callback": (noop, PLAIN)}
        print(f"sequential: {args.rounds} rounds ...", file=sys.stderr, flush=True)
        seq = sequential(arms, args.rounds, args.warmup)
        print(f"concurrent: {args.blocks} blocks x {args.block_seconds:g} s per arm at {args.concurrency} clients ...",
              file=sys.stderr, flush=True)
        conc = concurrent(arms, args.concurrency, args.blocks, args.block_seconds)
    finally:
        for proxy in proxies:
            proxy.stop()
        upstream.stop()

    t = seq["times"]
    med = {k: statistics.median(v) for k, v in t.items()}
    rps = {k: statistics.median(v) for k, v in conc["rps"].items()}
    pairs = {"alias_vs_plain_same_proxy": ("alias", "plain"), "plain_with_plugin_vs_without": ("plain", "no_plugin"),
             "alias_vs_plain_litellm": ("alias", "no_plugin"), "alias_vs_litellm_with_empty_callback": ("alias", "noop_callback"),
             "empty_callback_vs_plain_litellm": ("noop_callback", "no_plugin")}
    result = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": args.quick,
        "conditions": bench.conditions(
            **{"load_average_at_start": load_start,
            "proxy": "litellm --config (1 worker), offline flags, no database, master key, routing_strategy simple-shuffle",
            "upstream": "aisia_plugin.demo.upstream, no added latency, in its own process, HTTP/1.1 keep-alive",
            "client": "httpx on the same machine (sync for sequential, asyncio for concurrent)",
            "request": f"one user message ({len(PROMPT)} chars), max_tokens 16, non-streaming",
            "alias": f"{ALIAS}: strategy ucb1, one candidate (the {PLAIN} deployment)",
            "sequential_rounds": args.rounds, "warmup_per_arm": args.warmup,
            "concurrency": args.concurrency, "blocks_per_arm": args.blocks, "block_seconds": args.block_seconds}),
        "sequential_median_ms": {k: round(v, 3) for k, v in med.items()},
        "sequential_p90_ms": {k: round(statistics.quantiles(v, n=10)[-1], 3) for k, v in t.items()},
        "added_latency_ms": {k: round(statistics.median(a - b for a, b in zip(t[x], t[y])), 3)
                             for k, (x, y) in pairs.items()},
        "throughput_rps": {k: round(v, 1) for k, v in rps.items()},
        "proxy_cpu_ms_per_request": {k: round(v, 3) for k, v in conc["cpu_ms_per_request"].items()},
        "throughput_blocks_rps": {k: [round(x, 1) for x in v] for k, v in conc["rps"].items()},
        "throughput_ratio": {k: round(rps[x] / rps[y], 3) for k, (x, y) in pairs.items()},
        "failures": {"sequential": seq["failures"], "concurrent": conc["failures"]},
        "targets": {"added_latency_ms_max": TARGET_ADDED_MS, "throughput_ratio_min": TARGET_THROUGHPUT_RATIO},
    }
    result["targets"]["added_latency_met"] = result["added_latency_ms"]["alias_vs_plain_litellm"] <= TARGET_ADDED_MS
    result["targets"]["throughput_met"] = result["throughput_ratio"]["alias_vs_plain_litellm"] >= TARGET_THROUGHPUT_RATIO
    md = render(result)
    print(md)
    if not args.no_write:
        bench.write_results("proxy_overhead", result, md)
    return 0


def render(r: dict) -> str:
    c = r["conditions"]
    a, ratio, med, rps = r["added_latency_ms"], r["throughput_ratio"], r["sequential_median_ms"], r["throughput_rps"]
    p90, cpu = r["sequential_p90_ms"], r["proxy_cpu_ms_per_request"]
    yes = {True: "met", False: "NOT met"}
    return f"""# Proxy overhead of the plugin

Generated {r['generated']} by `benchmarks/proxy_overhead.py`{' (--quick: not meaningful)' if r['quick'] else ''}.

Conditions: {c['platform']}, {c['cpu_count']} CPUs (load average {', '.join(f'{x:g}' for x in c['load_average_at_start'])} when the run started: the
machine was shared with other work); Python {c['python']}, litellm {c['litellm']}, aisia_plugin {c['aisia_plugin']}.
Proxy: {c['proxy']}. Upstream: {c['upstream']}. Client: {c['client']}. Request: {c['request']}.
Alias: {c['alias']}. The arms are interleaved in one run: {c['sequential_rounds']} sequential rounds
(after {c['warmup_per_arm']} warm-up requests per arm), then {c['blocks_per_arm']} blocks of
{c['block_seconds']:g} s per arm at {c['concurrency']} concurrent clients, alternating.

Arms: **alias** = `auto/bench` through the plugin; **plain** = the plain model name on the same
proxy (the plugin only lets it through); **LiteLLM** = the plain model name on a proxy without any
callback (simple-shuffle); **empty callback** = the same with a CustomLogger that does nothing.

| | alias | plain | LiteLLM | empty callback |
|---|---:|---:|---:|---:|
| sequential median latency (ms) | {med['alias']:.2f} | {med['plain']:.2f} | {med['no_plugin']:.2f} | {med['noop_callback']:.2f} |
| sequential p90 latency (ms) | {p90['alias']:.2f} | {p90['plain']:.2f} | {p90['no_plugin']:.2f} | {p90['noop_callback']:.2f} |
| throughput at {c['concurrency']} clients (req/s, median of blocks) | {rps['alias']:.0f} | {rps['plain']:.0f} | {rps['no_plugin']:.0f} | {rps['noop_callback']:.0f} |
| proxy CPU per request at {c['concurrency']} clients (ms) | {cpu['alias']:.2f} | {cpu['plain']:.2f} | {cpu['no_plugin']:.2f} | {cpu['noop_callback']:.2f} |

| added by the plugin (median of paired differences) | ms | throughput ratio |
|---|---:|---:|
| alias vs plain LiteLLM | {a['alias_vs_plain_litellm']:+.3f} | {ratio['alias_vs_plain_litellm']:.3f} |
| alias vs plain name, same proxy | {a['alias_vs_plain_same_proxy']:+.3f} | {ratio['alias_vs_plain_same_proxy']:.3f} |
| plain name with the plugin loaded vs without | {a['plain_with_plugin_vs_without']:+.3f} | {ratio['plain_with_plugin_vs_without']:.3f} |
| alias vs LiteLLM with an empty callback (the plugin's own code) | {a['alias_vs_litellm_with_empty_callback']:+.3f} | {ratio['alias_vs_litellm_with_empty_callback']:.3f} |
| empty callback vs none (LiteLLM's cost of having a callback) | {a['empty_callback_vs_plain_litellm']:+.3f} | {ratio['empty_callback_vs_plain_litellm']:.3f} |

Targets (alias vs plain LiteLLM): added median latency <= {r['targets']['added_latency_ms_max']} ms:
{yes[r['targets']['added_latency_met']]}; throughput >= {r['targets']['throughput_ratio_min']}x: {yes[r['targets']['throughput_met']]}.
Failed requests: sequential {r['failures']['sequential']}, concurrent {r['failures']['concurrent']}.
"""


if __name__ == "__main__":
    sys.exit(main())
